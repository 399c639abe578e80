"""The ``int4vnni`` and ``int8vnni`` formats: the packed layouts (checked everywhere) and
the VNNI kernels (on CPUs with AVX512-VNNI and -BF16; skipped elsewhere with the reason).
What they share with the AMX tile formats: test_cpu_kernel.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang_cast.hardware import cpu_flags
from sglang_cast.models.vnni_dot import VnniInt4, VnniInt8, unavailable_reason
from sglang_cast.models.weights import (Format, Int4Groups, Int4VnniLinear, Int8VnniLinear, int4_from_q4_1,
                                        int4_quantize, int8_quantize, pack_linear)
from support.models import random_q4_1

VNNI_MISSING = unavailable_reason(cpu_flags())  # the ISA alone: a kernel that fails to build must fail, not skip
needs_vnni = pytest.mark.skipif(VNNI_MISSING is not None, reason=f"VNNI kernels: {VNNI_MISSING}")


def unpack_int4(packed: VnniInt4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes [N, K], scales and mins [N, K/32] read back from the blocks, written
    independently of `VnniInt4.pack` from the layout csrc/vnni_dot.cpp documents: byte
    4c + q of load j holds (column c, input 8j + q) low and (column c, input 8j + 4 + q) high."""
    blocks = packed.blocks.numpy()
    num_blocks, groups, _ = blocks.shape
    codes = np.zeros((num_blocks * 64, groups * 32), dtype=np.int64)
    scales, mins = np.zeros((num_blocks * 64, groups), np.float32), np.zeros((num_blocks * 64, groups), np.float32)
    for b in range(num_blocks):
        for g in range(groups):
            record = blocks[b, g]
            loads = record[:1024].reshape(4, 4, 64)  # [tile, load j, byte]
            meta = record[1024:].view(np.float16).reshape(2, 4, 16)  # [scale or min, tile, column]
            for t in range(4):
                for j in range(4):
                    for c in range(16):
                        for q in range(4):
                            byte = int(loads[t, j, 4 * c + q])
                            codes[64 * b + 16 * t + c, 32 * g + 8 * j + q] = byte & 0xF
                            codes[64 * b + 16 * t + c, 32 * g + 8 * j + 4 + q] = byte >> 4
                scales[64 * b + 16 * t:64 * b + 16 * t + 16, g] = meta[0, t]
                mins[64 * b + 16 * t:64 * b + 16 * t + 16, g] = meta[1, t]
    return torch.from_numpy(codes), torch.from_numpy(scales), torch.from_numpy(mins)


def unpack_int8(packed: VnniInt8) -> torch.Tensor:
    """codes [N, K] read back from the documented layout: byte 64j + 4c + q of tile t's
    512 holds code + 128 of (column 16t + c, input 4j + q) of the group."""
    blocks = packed.blocks.numpy()
    num_blocks, groups, _ = blocks.shape
    codes = np.zeros((num_blocks * 64, groups * 32), dtype=np.int64)
    for b in range(num_blocks):
        for g in range(groups):
            for t in range(4):
                tile = blocks[b, g, 512 * t:512 * (t + 1)]
                for j in range(8):
                    for c in range(16):
                        for q in range(4):
                            codes[64 * b + 16 * t + c, 32 * g + 4 * j + q] = int(tile[64 * j + 4 * c + q]) - 128
    return torch.from_numpy(codes).to(torch.int8)


def test_int4_pack_writes_the_documented_layout_and_keeps_gguf_scales_and_mins_exact() -> None:
    groups = int4_from_q4_1(random_q4_1(128, 96, seed=1))
    codes, scales, mins = unpack_int4(VnniInt4.pack(groups.codes, groups.scales, groups.zeros))
    assert torch.equal(codes, groups.codes.long())
    assert torch.equal(scales, groups.scales)  # fp16 d, exactly
    assert torch.equal(mins.double(), groups.zeros.double() - 8 * groups.scales.double())  # fp16 m, exactly


def test_int8_pack_writes_the_documented_layout_and_keeps_the_scales() -> None:
    codes, scales = int8_quantize(torch.randn(128, 96))
    packed = VnniInt8.pack(codes, scales)
    assert torch.equal(unpack_int8(packed), codes)
    assert packed.scales.dtype == torch.float32 and torch.equal(packed.scales, scales.float())


def test_pack_refuses_shapes_the_kernels_cannot_hold() -> None:
    groups = int4_quantize(torch.randn(96, 64))
    with pytest.raises(ValueError, match="weight_format: int4vnni: a linear of 96 outputs x 64 inputs"):
        VnniInt4.pack(groups.codes, groups.scales, groups.zeros)
    with pytest.raises(ValueError, match="weight_format: int8vnni: a linear of 64 outputs x 48 inputs"):
        VnniInt8.pack(*int8_quantize(torch.randn(64, 48)))


@pytest.fixture
def kernel() -> None:
    Format.INT4_VNNI.load_kernel()


def quantized_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's activation rounding, from csrc/vnni_dot.cpp's header: per row and group
    of 32, sx = max|x| / 127 and xq = round-half-even(x · (127 / max|x|)), in fp32.
    Returns xq [M, G, 32] (int64) and sx [M, G] (fp32)."""
    groups = x.float().reshape(x.shape[0], -1, 32)
    amax = groups.abs().amax(-1)
    inverse = torch.where(amax > 0, torch.tensor(127.0) / amax, torch.zeros_like(amax))
    return torch.round(groups * inverse[..., None]).long(), amax / torch.tensor(127.0)


def int4_reference(x: torch.Tensor, groups: Int4Groups) -> torch.Tensor:
    """out[m, n] = sum_g sx[m, g] (scale[n, g] sum_k code xq + min[n, g] sum_k xq), in float64:
    every weight times the same rounded input."""
    xq, sx = quantized_rows(x)
    n, k = groups.codes.shape
    codes = groups.codes.long().reshape(n, k // 32, 32)
    dots = torch.einsum("mgk,ngk->mng", xq, codes).double()  # exact integer sums
    scales = groups.scales.to(torch.float16).double()
    mins = (groups.zeros.double() - 8 * groups.scales.double()).to(torch.float16).double()
    sums = xq.sum(-1).double()  # [M, G]
    return ((dots * scales[None] + sums[:, None, :] * mins[None]) * sx.double()[:, None, :]).sum(-1)


def close_to(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Within one bf16 rounding of each output (2^-8 of its size) and fp32 sums."""
    return bool(((got.double() - want).abs() <= want.abs() * 2 ** -8 + want.abs().max() * 2 ** -15).all())


@needs_vnni
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 16, 17, 40])
@pytest.mark.parametrize("shape", [(192, 576), (576, 1536), (64, 32)])
def test_the_int4_kernel_computes_the_documented_math(kernel, rows: int, shape: tuple[int, int]) -> None:
    torch.manual_seed(rows)
    groups = int4_from_q4_1(random_q4_1(*shape, seed=rows))
    x = torch.randn(rows, shape[1]).bfloat16()
    got = VnniInt4.pack(groups.codes, groups.scales, groups.zeros).matmul(x)
    assert close_to(got, int4_reference(x, groups))


@needs_vnni
@pytest.mark.parametrize("rows", [1, 4, 5, 17])
@pytest.mark.parametrize("shape", [(192, 576), (1536, 96), (64, 32)])
def test_the_int8_kernel_computes_the_documented_math(kernel, rows: int, shape: tuple[int, int]) -> None:
    torch.manual_seed(rows)
    codes, scales = int8_quantize(torch.randn(*shape))
    x = torch.randn(rows, shape[1]).bfloat16()
    xq, sx = quantized_rows(x)
    dots = torch.einsum("mgk,ngk->mng", xq, codes.long().reshape(shape[0], -1, 32)).double()
    want = (dots * sx.double()[:, None, :]).sum(-1) * scales.double()[None]
    assert close_to(VnniInt8.pack(codes, scales).matmul(x), want)


@needs_vnni
def test_a_rows_result_does_not_depend_on_the_rows_beside_it(kernel) -> None:
    """What makes a verify row equal the decode step that would have computed it."""
    torch.manual_seed(0)
    groups = int4_quantize(torch.randn(192, 576) * 0.05)
    int4 = VnniInt4.pack(groups.codes, groups.scales, groups.zeros)
    int8 = VnniInt8.pack(*int8_quantize(torch.randn(128, 576)))
    x = torch.randn(17, 576).bfloat16()
    for packed in (int4, int8):
        together = packed.matmul(x)
        for row in (0, 3, 4, 16):
            assert torch.equal(packed.matmul(x[row:row + 1]), together[row:row + 1])


@needs_vnni
def test_an_outputs_result_does_not_depend_on_the_outputs_beside_it(kernel) -> None:
    """What lets a packed format stack q, k and v (gate and up) into one linear bit for bit
    (`weights.StacksLinears`): each output column is computed from its own weights alone."""
    torch.manual_seed(1)
    weight = torch.randn(192, 576) * 0.05
    groups = int4_quantize(weight)
    codes, scales = int8_quantize(weight)
    x = torch.randn(17, 576).bfloat16()
    whole4 = VnniInt4.pack(groups.codes, groups.scales, groups.zeros).matmul(x)
    whole8 = VnniInt8.pack(codes, scales).matmul(x)
    for part in (slice(0, 64), slice(64, 192)):
        assert torch.equal(VnniInt4.pack(groups.codes[part], groups.scales[part], groups.zeros[part]).matmul(x),
                           whole4[:, part])
        assert torch.equal(VnniInt8.pack(codes[part], scales[part]).matmul(x), whole8[:, part])


@needs_vnni
def test_zero_rows_and_an_all_zero_group_give_zeros_not_nans(kernel) -> None:
    groups = int4_quantize(torch.randn(64, 64))
    packed = VnniInt4.pack(groups.codes, groups.scales, groups.zeros)
    assert packed.matmul(torch.zeros(0, 64).bfloat16()).shape == (0, 64)
    x = torch.zeros(2, 64).bfloat16()
    x[1, 32:] = 1.0  # row 1: group 0 all zero, group 1 not
    out = packed.matmul(x).double()
    assert torch.isfinite(out).all() and out[0].abs().max() == 0
    assert close_to(out, int4_reference(x, groups))


@needs_vnni
def test_the_vnni_linears_run_their_kernel_on_every_row_count(kernel) -> None:
    weight = torch.randn(128, 64) * 0.05
    for fmt, kind in ((Format.INT4_VNNI, Int4VnniLinear), (Format.INT8_VNNI, Int8VnniLinear)):
        linear = pack_linear(fmt, weight, None)
        assert type(linear) is kind
        for rows in (1, 7):
            x = torch.randn(rows, 64)
            assert torch.equal(linear(x), linear.packed.matmul(x.bfloat16()).float())


@needs_vnni
def test_the_vnni_kernels_trace_under_torch_compile(kernel) -> None:
    groups = int4_quantize(torch.randn(64, 64))
    x = torch.randn(8, 64).bfloat16()
    for packed in (VnniInt4.pack(groups.codes, groups.scales, groups.zeros), VnniInt8.pack(*int8_quantize(torch.randn(64, 64)))):
        compiled = torch.compile(packed.matmul, backend="eager", fullgraph=True)
        assert torch.equal(compiled(x), packed.matmul(x))
