"""The ``int4amx`` and ``int8amx`` formats: the tile layouts (checked everywhere) and the
AMX kernels (on CPUs that have AMX-BF16; skipped elsewhere with the reason).  What they
share with the VNNI formats: test_cpu_kernel.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang_cast.hardware import cpu_flags
from sglang_cast.models import amx_tiles
from sglang_cast.models.amx_tiles import TiledInt4, TiledInt8, unavailable_reason
from sglang_cast.models.weights import (Format, Int4Groups, Int4Linear, Int8Linear, int4_from_q4_1,
                                        int4_quantize, pack_linear)
from support.models import random_q4_1

AMX_MISSING = unavailable_reason(cpu_flags())  # the ISA alone: a kernel that fails to build must fail, not skip
needs_amx = pytest.mark.skipif(AMX_MISSING is not None, reason=f"AMX tile kernels: {AMX_MISSING}")


def unpack(tiled: TiledInt4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes [N, K], scales and mins [N, K/32] read back from the blocks, written
    independently of `TiledInt4.pack` from the layout csrc/amx_tiles.cpp documents."""
    blocks = tiled.blocks.numpy()
    num_blocks, groups, _ = blocks.shape
    n, k = num_blocks * 64, groups * 32
    codes = np.zeros((n, k), dtype=np.int64)
    scales, mins = np.zeros((n, groups), np.float32), np.zeros((n, groups), np.float32)
    for b in range(num_blocks):
        for g in range(groups):
            record = blocks[b, g]
            lanes = record[:1024].view(np.uint16).reshape(4, 4, 32)  # [tile, load i, lane j]
            meta = record[1024:].view(np.float16).reshape(2, 4, 16)  # [scale or min, tile, column]
            for t in range(4):
                for i in range(4):
                    for j in range(32):
                        for r in range(4):
                            codes[64 * b + 16 * t + j // 2, 32 * g + 8 * i + 2 * r + j % 2] = \
                                (int(lanes[t, i, j]) >> (4 * r)) & 0xF
                scales[64 * b + 16 * t:64 * b + 16 * t + 16, g] = meta[0, t]
                mins[64 * b + 16 * t:64 * b + 16 * t + 16, g] = meta[1, t]
    return torch.from_numpy(codes), torch.from_numpy(scales), torch.from_numpy(mins)


def test_pack_writes_the_documented_layout_and_keeps_gguf_scales_and_mins_exact() -> None:
    groups = int4_from_q4_1(random_q4_1(128, 96, seed=1))
    codes, scales, mins = unpack(TiledInt4.pack(groups.codes, groups.scales, groups.zeros))
    assert torch.equal(codes, groups.codes.long())
    assert torch.equal(scales, groups.scales)  # fp16 d, exactly
    assert torch.equal(mins.double(), groups.zeros.double() - 8 * groups.scales.double())  # fp16 m, exactly


def unpack_int8(tiled: TiledInt8) -> torch.Tensor:
    """codes [N, K] read back from the int8 blocks, from the documented layout: byte
    32r + 2c + p of tile t's 512 is (column 16t + c, input 2r + p) of the group."""
    blocks = tiled.blocks.numpy()
    num_blocks, groups, _ = blocks.shape
    codes = np.zeros((num_blocks * 64, groups * 32), dtype=np.int8)
    for b in range(num_blocks):
        for g in range(groups):
            for t in range(4):
                tile = blocks[b, g, 512 * t:512 * (t + 1)]
                for r in range(16):
                    for c in range(16):
                        for p in range(2):
                            codes[64 * b + 16 * t + c, 32 * g + 2 * r + p] = tile[32 * r + 2 * c + p]
    return torch.from_numpy(codes)


def test_int8_pack_writes_the_documented_layout_and_keeps_the_scales() -> None:
    linear = Int8Linear(torch.randn(128, 96))
    tiled = TiledInt8.pack(linear.codes, linear.scales)
    assert torch.equal(unpack_int8(tiled), linear.codes)
    assert tiled.scales.dtype == torch.float32 and torch.equal(tiled.scales, linear.scales.float())


def test_pack_refuses_shapes_the_kernel_cannot_tile() -> None:
    groups = int4_quantize(torch.randn(96, 64))
    with pytest.raises(ValueError, match="weight_format: int4amx: a linear of 96 outputs x 64 inputs"):
        TiledInt4.pack(groups.codes, groups.scales, groups.zeros)
    linear = Int8Linear(torch.randn(64, 48))
    with pytest.raises(ValueError, match="weight_format: int8amx: a linear of 64 outputs x 48 inputs"):
        TiledInt8.pack(linear.codes, linear.scales)


@pytest.fixture
def kernel() -> None:
    Format.INT4_AMX.load_kernel()


def reference(x: torch.Tensor, groups: Int4Groups) -> torch.Tensor:
    return x.double() @ groups.dequantize().double().T


@needs_amx
@pytest.mark.parametrize("rows", [1, 5, 8, 16, 17, 40])
@pytest.mark.parametrize("shape", [(192, 576), (576, 1536), (64, 32)])
def test_the_tile_kernel_matches_the_dequantised_weights(kernel, rows: int, shape: tuple[int, int]) -> None:
    torch.manual_seed(rows)
    groups = int4_from_q4_1(random_q4_1(*shape, seed=rows))
    x = torch.randn(rows, shape[1]).bfloat16()
    want = reference(x, groups)
    got = TiledInt4.pack(groups.codes, groups.scales, groups.zeros).matmul(x).double()
    torch_kernel = Int4Linear(groups)._matmul(x).double()
    scale = want.abs().max()
    # one bf16 rounding of the output (2^-8 relative) at most; torch's own kernel, which
    # rounds scales to bf16 too, is no closer
    assert ((got - want).abs().max() / scale).item() < 2 ** -8
    assert (got - want).abs().max() <= (torch_kernel - want).abs().max() * 1.5


@needs_amx
def test_int4amx_linear_runs_torch_kernel_below_tiles_from_rows_and_the_tiles_from_there() -> None:
    weight = torch.randn(128, 64) * 0.05
    tiled = pack_linear(Format.INT4_AMX, weight, None)
    plain = pack_linear(Format.INT4, weight, None)
    few = torch.randn(amx_tiles.TILES_FROM - 1, 64)
    many = torch.randn(amx_tiles.TILES_FROM, 64)
    assert torch.equal(tiled(few), plain(few))
    assert torch.equal(tiled(many), tiled.tiled.matmul(many.bfloat16()).float())
    assert not torch.equal(tiled(many), plain(many))  # a different kernel ran


@needs_amx
@pytest.mark.parametrize("rows", [1, 5, 8, 16, 17, 40])
@pytest.mark.parametrize("shape", [(192, 576), (1536, 96), (64, 32)])
def test_the_int8_tile_kernel_matches_the_int8_weights(kernel, rows: int, shape: tuple[int, int]) -> None:
    torch.manual_seed(rows)
    linear = Int8Linear(torch.randn(*shape))
    x = torch.randn(rows, shape[1]).bfloat16()
    want = x.double() @ (linear.codes.double() * linear.scales.double()[:, None]).T
    got = TiledInt8.pack(linear.codes, linear.scales).matmul(x).double()
    # one bf16 rounding of each output (2^-8 of its size) and fp32 sums
    assert ((got - want).abs() <= want.abs() * 2 ** -8 + want.abs().max() * 2 ** -16).all()


@needs_amx
def test_int8amx_linear_runs_torch_kernel_below_tiles_from_rows_and_the_tiles_from_there(monkeypatch) -> None:
    weight = torch.randn(128, 64)
    tiled = pack_linear(Format.INT8_AMX, weight, None)
    plain = pack_linear(Format.INT8, weight, None)
    assert torch.equal(tiled.codes, plain.codes)
    rows_on_tiles = []
    tiles_matmul = TiledInt8.matmul
    monkeypatch.setattr(TiledInt8, "matmul", lambda self, x: rows_on_tiles.append(len(x)) or tiles_matmul(self, x))
    few = torch.randn(amx_tiles.TILES_FROM - 1, 64)
    many = torch.randn(amx_tiles.TILES_FROM, 64)
    assert torch.equal(tiled(few), plain(few))
    assert rows_on_tiles == []
    assert torch.equal(tiled(many), tiles_matmul(tiled.tiled, many.bfloat16()).float())
    assert rows_on_tiles == [amx_tiles.TILES_FROM]


@needs_amx
def test_the_tile_kernels_trace_under_torch_compile(kernel) -> None:
    groups = int4_quantize(torch.randn(64, 64))
    int8 = Int8Linear(torch.randn(64, 64))
    x = torch.randn(8, 64).bfloat16()
    for tiled in (TiledInt4.pack(groups.codes, groups.scales, groups.zeros), TiledInt8.pack(int8.codes, int8.scales)):
        compiled = torch.compile(tiled.matmul, backend="eager", fullgraph=True)
        assert torch.equal(compiled(x), tiled.matmul(x))
