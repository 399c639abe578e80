"""The ``int4amx`` and ``int8amx`` kernels: weight-only int4 and int8 multiplied on AMX
tiles (csrc/amx_tiles.cpp).

Why kernels of our own: torch's CPU int4 and int8 kernels dequantise their weights once
per block of 4 activation rows, so on a 2-core AMX Xeon the model's int4 linears cost 3.0x
a decode step's at 8 rows and 5.1x at 16, and its int8 LM head 3.7x at 8 rows
(docs/precision.md).  A speculative verify runs exactly those widths.  These kernels widen
each 16 x 32 weight block once into an AMX tile and multiply it with up to 16 rows at
once: the int4 linears at 8 rows 0.77x and at 16 rows 0.53x torch's time.  At 1-4 rows
torch's kernels are cheaper (int4, one row: 0.53x this one's), so the ``int4amx`` and
``int8amx`` formats (weights.py) run torch's kernel below `TILES_FROM` rows and these from
there on, over the same codes and scales.

The C++ source is built on first use (models/cpu_kernel.py).  It needs a CPU with AMX-BF16
(and AVX512-BF16) on Linux: `unavailable_reason` says why not here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .cpu_kernel import BLOCK_COLS as _BLOCK_COLS, GROUP as _GROUP, CpuKernel, check_packable

TILES_FROM = 5  # rows: torch's kernels dequantise once per 4 rows, so from 5 on they pay twice
_TILE_COLS = 16  # columns per tile; a B tile holds one group of 32 inputs (one int4 scale group)
_TILES = _BLOCK_COLS // _TILE_COLS  # column tiles per block (csrc: kTilesPerBlock)


# Built without OpenMP (`cpu_kernel.OPENMP`), so its at::parallel_for runs on the calling
# thread: `profiles/cpu.yaml` was measured so on the AMX Xeon, and threading it wants a
# re-profile there (the VNNI library gained 2x on its one-row LM head from it).
KERNEL = CpuKernel(
    namespace="sglang_cast_amx", source="amx_tiles.cpp",
    required_flags=frozenset({"amx_tile", "amx_bf16", "avx512_bf16", "avx512bw"}),
    compile_flags=("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mamx-tile", "-mamx-bf16"),
    linux_only="AMX tile state is granted by arch_prctl")


def unavailable_reason(flags: frozenset[str] | None = None) -> str | None:
    """Why the kernel cannot run on this machine (``None``: it can)."""
    return KERNEL.unavailable_reason(flags)


@dataclass(frozen=True)
class TiledInt4:
    """int4 weights in the int4 kernel's layout (csrc/amx_tiles.cpp's header): ``blocks``
    ``[N/64, K/32, 1280]`` uint8, one record per block of four 16-column tiles and group
    of 32 inputs (the tiles' codes, four per 16-bit lane, then their fp16 scales and
    mins), in the order the kernel streams them; ``w[n, k] = code · scale + min``."""

    blocks: Tensor

    @classmethod
    def pack(cls, codes: Tensor, scales: Tensor, zeros: Tensor) -> TiledInt4:
        """From `weights.Int4Groups`' tensors (``w = (code - 8) · scale + zero``): ``codes``
        ``[N, K]`` (0-15), ``scales`` and ``zeros`` ``[N, K/32]``; N a multiple of 64, K of 32.
        The min ``zero - 8 · scale`` is GGUF Q4_1's ``m``, so a GGUF's fp16 ``d`` and ``m``
        come back exactly."""
        n, k = codes.shape
        check_packable("int4amx", n, k)
        blocks, groups = n // _BLOCK_COLS, k // _GROUP
        # input k = 32 g + 8 i + 2 r + p: load i of a group, nibble r of a 16-bit lane, parity p
        split = codes.to(torch.int32).reshape(blocks, _TILES, _TILE_COLS, groups, 4, 4, 2)
        lanes = sum(split[:, :, :, :, :, r, :] << (4 * r) for r in range(4))  # [block, tile, column, g, i, p]
        lanes = lanes.permute(0, 3, 1, 4, 2, 5).to(torch.int16)  # [block, g, tile, i, column, p]: 32 lanes per load
        code_bytes = lanes.contiguous().view(torch.uint8).reshape(blocks, groups, -1)  # [block, group, 1024]
        mins = zeros.double() - 8 * scales.double()

        def per_record(values: Tensor) -> Tensor:  # [N, G] -> [block, group, tile, 16] fp16
            return values.to(torch.float16).reshape(blocks, _TILES, _TILE_COLS, groups).permute(0, 3, 1, 2)

        meta = torch.stack((per_record(scales), per_record(mins)), dim=2)  # [block, group, 2, tile, 16]
        meta_bytes = meta.contiguous().view(torch.uint8).reshape(blocks, groups, -1)  # [block, group, 256]
        return cls(torch.cat((code_bytes, meta_bytes), dim=-1).contiguous())

    def matmul(self, x: Tensor) -> Tensor:
        """``x`` ``[M, K]`` bf16 -> ``[M, N]`` bf16 (after `Format.load_kernel`)."""
        return torch.ops.sglang_cast_amx.int4_mm(x.contiguous(), self.blocks)


@dataclass(frozen=True)
class TiledInt8:
    """int8 weights in the int8 kernel's layout (csrc/amx_tiles.cpp's header): ``blocks``
    ``[N/64, K/32, 2048]`` int8, one record per block of four 16-column tiles and 32
    inputs, each tile's codes in AMX's VNNI order (a pair of inputs per column); ``scales``
    ``[N]`` fp32; ``w[n, k] = code · scale[n]``."""

    blocks: Tensor
    scales: Tensor

    @classmethod
    def pack(cls, codes: Tensor, scales: Tensor) -> TiledInt8:
        """From `weights.Int8Linear`'s tensors: ``codes`` ``[N, K]`` int8, ``scales`` ``[N]``
        (any float dtype; kept as fp32, so bf16 scales stay exact)."""
        n, k = codes.shape
        check_packable("int8amx", n, k)
        # input k = 32 g + 2 r + p: row r of a group's B tile, parity p
        split = codes.reshape(n // _BLOCK_COLS, _TILES, _TILE_COLS, k // _GROUP, _GROUP // 2, 2)
        blocks = split.permute(0, 3, 1, 4, 2, 5)  # [block, g, tile, r, column, p]
        return cls(blocks.reshape(n // _BLOCK_COLS, k // _GROUP, -1).contiguous(), scales.float().contiguous())

    def matmul(self, x: Tensor) -> Tensor:
        """``x`` ``[M, K]`` bf16 -> ``[M, N]`` bf16 (after `Format.load_kernel`)."""
        return torch.ops.sglang_cast_amx.int8_mm(x.contiguous(), self.blocks, self.scales)
