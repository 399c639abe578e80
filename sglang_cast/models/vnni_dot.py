"""The ``int4vnni`` and ``int8vnni`` kernels: weight-only int4 and int8 multiplied with
AVX512-VNNI integer dot products, the activations rounded to int8 per row and group of 32
inputs (csrc/vnni_dot.cpp).

Why: torch's CPU int4 and int8 kernels multiply in floating point and grow with every
activation row, so on a 2-core AVX-512 EPYC without AMX a verify of 16 tokens cost 3.4x a
decode step.  `vpdpbusd` multiplies 64 bytes per instruction; here the model's int4
linears took 0.43-0.66x torch's time at 2-32 rows, its int8 LM head 1.15x at one row and
0.33-0.56x at 8-32, whole target forwards 0.90x at one token and 0.64-0.69x at 13-32
(docs/results/2026-12-04_vnni_kernels_avx512.md).

What it changes: the activations are rounded to int8 with one scale per row and group
(llama.cpp's Q8_1 activations against its Q4_1 weights, the same scheme), a coarser
rounding than the bf16 activations torch's kernels take.  Each row is rounded and summed
on its own, so a row's result is the same bit for bit whatever other rows share the call:
a verify row equals the decode step that would have computed it.

The C++ source is built on first use (models/cpu_kernel.py); it needs AVX512-VNNI and
AVX512-BF16 (`unavailable_reason` says why not here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .cpu_kernel import BLOCK_COLS as _BLOCK_COLS, GROUP as _GROUP, OPENMP, CpuKernel, check_packable

_TILE_COLS = 16  # output columns per tile: the int32 lanes of a zmm
_TILES = _BLOCK_COLS // _TILE_COLS  # tiles per record (csrc: kTiles)
_INT8_OFFSET = 128  # int8 codes are stored as code + 128: vpdpbusd's unsigned operand


KERNEL = CpuKernel(
    namespace="sglang_cast_vnni", source="vnni_dot.cpp",
    required_flags=frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"}),
    compile_flags=("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mavx512bf16", *OPENMP),
    link_flags=OPENMP)


def unavailable_reason(flags: frozenset[str] | None = None) -> str | None:
    """Why the kernel cannot run on this machine (``None``: it can)."""
    return KERNEL.unavailable_reason(flags)


@dataclass(frozen=True)
class VnniInt4:
    """int4 weights in the kernel's layout (csrc/vnni_dot.cpp's header): ``blocks``
    ``[N/64, K/32, 1280]`` uint8, one record per block of 64 columns and group of 32
    inputs (four tiles' codes, two per byte, then their fp16 scales and mins);
    ``w[n, k] = code · scale + min``."""

    blocks: Tensor

    @classmethod
    def pack(cls, codes: Tensor, scales: Tensor, zeros: Tensor) -> VnniInt4:
        """From `weights.Int4Groups`' tensors (``w = (code - 8) · scale + zero``): ``codes``
        ``[N, K]`` (0-15), ``scales`` and ``zeros`` ``[N, K/32]``.  The min ``zero - 8 ·
        scale`` is GGUF Q4_1's ``m``, so a GGUF's fp16 ``d`` and ``m`` come back exactly."""
        n, k = codes.shape
        check_packable("int4vnni", n, k)
        blocks, groups = n // _BLOCK_COLS, k // _GROUP
        # input k = 32 g + 8 j + 4 h + q: load j of a group, nibble h (0 low, 1 high), byte q of a lane
        split = codes.to(torch.int32).reshape(blocks, _TILES, _TILE_COLS, groups, 4, 2, 4)
        code_bytes = split[..., 0, :] | (split[..., 1, :] << 4)  # [block, tile, column, g, j, q]
        code_bytes = code_bytes.permute(0, 3, 1, 4, 2, 5).to(torch.uint8).reshape(blocks, groups, -1)
        mins = zeros.double() - 8 * scales.double()

        def per_record(values: Tensor) -> Tensor:  # [N, G] -> [block, group, tile, 16] fp16
            return values.to(torch.float16).reshape(blocks, _TILES, _TILE_COLS, groups).permute(0, 3, 1, 2)

        meta = torch.stack((per_record(scales), per_record(mins)), dim=2)  # [block, group, 2, tile, 16]
        meta_bytes = meta.contiguous().view(torch.uint8).reshape(blocks, groups, -1)  # [block, group, 256]
        return cls(torch.cat((code_bytes.contiguous(), meta_bytes), dim=-1).contiguous())

    def matmul(self, x: Tensor) -> Tensor:
        """``x`` ``[M, K]`` bf16 -> ``[M, N]`` bf16, or fp32 -> fp32 with the same bits (after
        `Format.load_kernel`)."""
        return torch.ops.sglang_cast_vnni.int4_mm(x.contiguous(), self.blocks)


@dataclass(frozen=True)
class VnniInt8:
    """int8 weights in the kernel's layout (csrc/vnni_dot.cpp's header): ``blocks``
    ``[N/64, K/32, 2048]`` uint8 holding code + 128, four inputs of a column per 32-bit
    lane; ``scales`` ``[N]`` fp32; ``w[n, k] = code · scale[n]``."""

    blocks: Tensor
    scales: Tensor

    @classmethod
    def pack(cls, codes: Tensor, scales: Tensor) -> VnniInt8:
        """From `weights.Int8Linear`'s tensors: ``codes`` ``[N, K]`` int8 in -127..127,
        ``scales`` ``[N]`` (any float dtype; kept as fp32, so bf16 scales stay exact)."""
        n, k = codes.shape
        check_packable("int8vnni", n, k)
        # input k = 32 g + 4 j + q: quad j of a group, byte q of a lane
        offset = (codes.to(torch.int32) + _INT8_OFFSET).to(torch.uint8)
        split = offset.reshape(n // _BLOCK_COLS, _TILES, _TILE_COLS, k // _GROUP, _GROUP // 4, 4)
        blocks = split.permute(0, 3, 1, 4, 2, 5)  # [block, g, tile, j, column, q]
        return cls(blocks.reshape(n // _BLOCK_COLS, k // _GROUP, -1).contiguous(), scales.float().contiguous())

    def matmul(self, x: Tensor) -> Tensor:
        """``x`` ``[M, K]`` bf16 -> ``[M, N]`` bf16, or fp32 -> fp32 with the same bits (after
        `Format.load_kernel`)."""
        return torch.ops.sglang_cast_vnni.int8_mm(x.contiguous(), self.blocks, self.scales)
