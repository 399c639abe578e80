"""Weight formats for the model's linears and LM head, and the packed linear that runs them.

Formats (``Format``), what each stores and which kernel runs it:

* ``fp32``  today's ``nn.Linear`` in the model's dtype, run by ``F.linear`` (the reference).
* ``bf16``  dense bf16 weights ``[N, K]``; activations cast to bf16 (AMX/AVX512-BF16 GEMM).
* ``int8``  weight-only int8, one symmetric scale per output channel: ``w = q · s[n]``,
            ``q`` in [-127, 127]; ``torch.ops.aten._weight_int8pack_mm``, bf16 activations.
* ``int4``  weight-only int4, groups of ``GROUP_SIZE`` = 32 inputs per output row:
            ``w = (q - 8) · scale[n, g] + zero[n, g]``, ``q`` in [0, 15];
            ``torch.ops.aten._weight_int4pack_mm_for_cpu``, bf16 activations.
* ``int4amx``, ``int8amx`` the same int4 or int8 weights, multiplied by torch's kernel
            below `amx_tiles.TILES_FROM` rows and by our AMX tile kernels from there on
            (models/amx_tiles.py: torch's kernels dequantise once per 4 rows, ours once
            for up to 16); AMX CPUs only.  A linear the tiles cannot hold (outputs not a
            multiple of 64, inputs of 32: only in toy models) runs torch's kernel alone.
* ``int4vnni``, ``int8vnni`` the same int4 or int8 weights, multiplied at every row count
            by our AVX512-VNNI kernels with the activations rounded to int8 per row and
            group of 32 inputs (models/vnni_dot.py: llama.cpp's Q8 activations), the
            target's layers fused between the linears (models/cpu_layer.py); whole B = 1
            forwards 0.33-0.49x int4/int8's on a 2-core AVX-512 EPYC; CPUs with
            AVX512-VNNI and -BF16.
            A linear they cannot hold runs torch's kernel alone, as the tile formats.

Why this int4 layout: a GGUF Q4_1 block (32 weights, fp16 ``d`` and ``m``) is
``w = d · q + m``, which is the layout above with ``scale = d`` and ``zero = m + 8d``.
What is exact and what rounds (see `int4_from_q4_1`): the 4-bit codes are copied
bit-for-bit; the kernel takes scales and zeros in the activations' dtype (bf16), so
``d`` (fp16, 11-bit significand) and ``m + 8d`` round once to bf16's 8-bit significand,
a relative error of at most 2^-8 per group.  fp32 activations would keep them exact but
that kernel is 6-28x slower here (docs/precision.md).

A packed kernel's cost grows with its rows (the tokens of a forward) faster than a dense
GEMM's: on a 2-core AVX2 EPYC torch's int4 kernel overtook dense fp32 over the same
weights at ~30 rows and took 1.84x as long at 128 rows (a prefill).  ``:dense<N>``
(``"int4/int8:dense32"``) keeps each packed target part's dense weight as well and
multiplies by it from ``N`` rows on: decode stays packed, prefill and large verifies run
dense, for the dense weights' memory.  Where the crossover lies is a property of the CPU,
so ``N`` is chosen by measurement (``cast-autotune profile`` times every spec it is given).
``:dense<N>:bf16`` keeps that dense side as a bf16 copy instead of the model's dtype: on a
CPU with AMX a full forward of 24 rows took 0.69x the int4/int8 one's time and 0.61x fp32's
(2-core Xeon, docs/precision.md), and the copy is half the fp32 weights' memory.

Packed linears are CPU-only and hold their tensors as plain attributes: they are not
parameters or buffers, so ``model.to(dtype)`` (which would silently re-cast bf16 scales)
never touches them; apply a format after the model is built and cast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch
from torch import Tensor, nn

from . import amx_tiles, vnni_dot
from .cpu_kernel import CpuKernel, packable

Model = TypeVar("Model", bound=nn.Module)

GROUP_SIZE = 32
ACTIVATION_DTYPE = torch.bfloat16
_INT4_INNER_K_TILES = 1  # the CPU packer's tiling argument; 1 packs any K multiple of 32
_Q4_1_BLOCK_BYTES = 20  # fp16 d, fp16 m, 16 bytes of nibbles
_INT8_MAX = 127
_DENSE_TAG = ":dense"
MAX_DENSE_FROM = 1 << 20  # rows: a switch above this would never fire in a real forward


class WeightFormatError(ValueError):
    """A weight-format spec that does not parse.  ``reason`` is the message without the config
    field's name, so a command line can name its own flag instead (``--weight-format: ...``)."""

    def __init__(self, reason: str):
        super().__init__(f"weight_format: {reason}")
        self.reason = reason


class Format(str, Enum):
    """How one class of weights is stored and multiplied (module docstring)."""

    FP32 = "fp32"
    BF16 = "bf16"
    INT8 = "int8"
    INT4 = "int4"
    INT4_AMX = "int4amx"
    INT8_AMX = "int8amx"
    INT4_VNNI = "int4vnni"
    INT8_VNNI = "int8vnni"

    @property
    def is_int4(self) -> bool:
        """Int4 codes in groups (`Int4Groups`): a GGUF's Q4_1 blocks load into them bit-exact."""
        return self in (Format.INT4, Format.INT4_AMX, Format.INT4_VNNI)

    @property
    def on_torch_kernels(self) -> Format:
        """The same weights on torch's kernels alone: the twin of a format that runs our
        kernels (AMX tiles, VNNI), what runs where those cannot; any other format itself."""
        twins = {Format.INT4_AMX: Format.INT4, Format.INT8_AMX: Format.INT8,
                 Format.INT4_VNNI: Format.INT4, Format.INT8_VNNI: Format.INT8}
        return twins.get(self, self)

    @property
    def fused_layers(self) -> bool:
        """Do a target's decoder layers in this format run the fused CPU ops between their
        linears (models/cpu_layer.py)?  The VNNI formats' cost tables were measured so."""
        return self in (Format.INT4_VNNI, Format.INT8_VNNI)

    @property
    def kernel(self) -> CpuKernel | None:
        """The kernel library of ours this format runs on (None: torch's kernels alone)."""
        ours = {Format.INT4_AMX: amx_tiles.KERNEL, Format.INT8_AMX: amx_tiles.KERNEL,
                Format.INT4_VNNI: vnni_dot.KERNEL, Format.INT8_VNNI: vnni_dot.KERNEL}
        return ours.get(self)

    def unavailable_reason(self, flags: frozenset[str] | None = None) -> str | None:
        """Why this format's kernel of ours cannot run (`CpuKernel.unavailable_reason`);
        ``None`` when it can or the format runs torch's kernels."""
        return None if self.kernel is None else self.kernel.unavailable_reason(flags)

    def load_kernel(self) -> None:
        """Load this format's kernel of ours, if any, once per process; where it cannot run,
        a ``ValueError`` naming this format and its torch twin (`CpuKernel.ensure_loaded`)."""
        if self.kernel is not None:
            self.kernel.ensure_loaded(self.value, self.on_torch_kernels.value)


_FORMAT_NAMES = tuple(f.value for f in Format)  # what a part of a spec may name
_DENSE_FORMATS = (Format.FP32.value, Format.BF16.value)  # ":dense<N>[:<format>]"


@dataclass(frozen=True)
class DenseSwitch:
    """Where a packed part hands a forward to its dense weight: from ``rows`` rows on
    (0: never), kept in ``keep`` (fp32: the model's own weight, shared; bf16: a copy).
    Spelled ``":dense<rows>[:bf16]"`` after the part it belongs to (module docstring)."""

    rows: int = 0
    keep: Format = Format.FP32

    @classmethod
    def split(cls, spec: object, part: str) -> tuple[str, DenseSwitch]:
        """``"int4/int8:dense32:bf16"`` -> ``("int4/int8", DenseSwitch(32, BF16))``; without
        ``":bf16"`` the dense side is fp32; no suffix -> ``(part, DenseSwitch())``.  ``spec``
        is the whole spec, for the error message."""
        part, tag, suffix = part.partition(_DENSE_TAG)
        if not tag:
            return part, cls()
        rows, colon, dense = suffix.partition(":")
        if not (rows.isdigit() and 1 <= int(rows) <= MAX_DENSE_FROM):
            raise WeightFormatError(f"{spec!r}: the rows after '{_DENSE_TAG}' must be an integer in "
                                    f"[1, {MAX_DENSE_FROM}], got {rows!r}")
        if colon and dense not in _DENSE_FORMATS:
            raise WeightFormatError(f"{spec!r}: the dense side after '{_DENSE_TAG}{rows}:' must be one of "
                                    f"{', '.join(_DENSE_FORMATS)}, got {dense!r}")
        return part, cls(int(rows), Format(dense) if colon else Format.FP32)

    def spelled(self) -> str:
        """The suffix that says this switch (``""`` for none)."""
        if not self.rows:
            return ""
        return f"{_DENSE_TAG}{self.rows}" + ("" if self.keep == Format.FP32 else f":{self.keep.value}")

    def wrap(self, packed: PackedLinear, weight: Tensor) -> PackedLinear | DenseFromRows:
        """``packed`` itself when this never switches, else wrapped to switch to ``weight``
        (fp32: the model's own, shared; bf16: a copy) from `rows` rows on."""
        if not self.rows:
            return packed
        bias = packed.bias_fp
        large = SharedLinear(weight, bias) if self.keep == Format.FP32 else Bf16Linear(weight, bias)
        return DenseFromRows(packed, large, self.rows)


@dataclass(frozen=True)
class DraftFormat:
    """The draft head's linears' format and their own dense switch (spec
    ``"int8:dense8:bf16"``): a draft forward's rows are its batch times its frontier, and
    a packed kernel's crossover with a dense GEMM is the draft's own, not the target's
    (2-core AMX Xeon: a bf16 head took 1.27x the int8 head's time at 8 rows, 0.91x at 12,
    0.68x at 16 and 0.23x at a 200-token prompt; docs/precision.md)."""

    linears: Format = Format.FP32
    dense: DenseSwitch = DenseSwitch()

    @classmethod
    def parse(cls, spec: object, part: str | None = None) -> DraftFormat:
        """The draft part ``part`` of ``spec`` (the whole of ``spec`` when ``part`` is None)."""
        part, dense = DenseSwitch.split(spec, str(spec) if part is None else part)
        part = part.strip()
        if part not in _FORMAT_NAMES:
            raise WeightFormatError(f"{spec!r}: the draft part must be one of "
                                    f"{', '.join(_FORMAT_NAMES)}, optionally followed by '{_DENSE_TAG}<N>[:bf16]', "
                                    f"got {part!r}")
        if dense.rows and part in _DENSE_FORMATS:
            raise WeightFormatError(f"{spec!r}: '{_DENSE_TAG}<N>' needs a packed draft part to switch from")
        return cls(Format(part), dense)

    def __str__(self) -> str:
        return self.linears.value + self.dense.spelled()


@dataclass(frozen=True)
class WeightFormat:
    """The format of the target's decoder linears, of its LM head and of the draft head's linears.

    The LM head is tied to the embedding in SmolLM2 and is by far the largest matrix
    (``[49152, 576]``), with its own cost curve, so it gets its own choice.  The embedding
    lookup itself always stays in the model's dtype.  The draft head (one layer, ``fc``
    and its own reduced-vocab LM head for EAGLE-3) runs every layer of every tree, so its
    format is part of the pair's: ``"int4/int8+int8"`` is int4 target linears, an int8
    target LM head and an int8 draft head; without ``+`` the draft stays dense.
    ``dense`` (spec ``":dense<N>[:bf16]"`` after the target part) runs the target's packed
    parts on their dense weights from that many rows on (module docstring); the draft
    part takes its own (``"+int8:dense8:bf16"``, `DraftFormat`).
    """

    linears: Format = Format.FP32
    lm_head: Format = Format.FP32
    draft: DraftFormat = DraftFormat()
    dense: DenseSwitch = DenseSwitch()

    @classmethod
    def parse(cls, spec: str | WeightFormat) -> WeightFormat:
        """``"int4"`` (both the same), ``"int4/bf16"`` (linears / LM head), either
        optionally with ``":dense<N>"`` or ``":dense<N>:bf16"`` (``"int4/int8:dense32"``) and
        then with ``"+<draft>"`` (``"int4/int8+int8"``, ``"int4/int8:dense32+int8:dense8:bf16"``)."""
        if isinstance(spec, WeightFormat):
            return spec
        target, plus, draft = str(spec).partition("+")
        target, dense = DenseSwitch.split(spec, target)
        parts = [part.strip() for part in target.split("/")]  # [linears] or [linears, lm_head]
        if len(parts) not in (1, 2) or any(n not in _FORMAT_NAMES for n in parts):
            raise WeightFormatError(
                f"{spec!r} is not '<linears>' or '<linears>/<lm_head>', either optionally "
                f"followed by '{_DENSE_TAG}<N>[:bf16]' and then by '+<draft>[{_DENSE_TAG}<N>[:bf16]]', "
                f"with each one of {', '.join(_FORMAT_NAMES)}"
            )
        fmt = cls(Format(parts[0]), Format(parts[-1]), DraftFormat.parse(spec, draft) if plus else DraftFormat(),
                  dense)
        if dense.rows and fmt.linears == fmt.lm_head == Format.FP32:
            raise WeightFormatError(f"{spec!r}: '{_DENSE_TAG}<N>' needs a packed target part to switch from")
        return fmt

    def __str__(self) -> str:
        return self.spelled(self.linears.value, self.lm_head.value)

    def unavailable_reason(self, flags: frozenset[str] | None = None) -> str | None:
        """Why a part's kernel of ours cannot run on this CPU (``flags``: another CPU's, for
        tests); ``None`` when every part can."""
        parts = (self.linears, self.lm_head, self.draft.linears)
        reasons = dict.fromkeys(r for p in parts if (r := p.unavailable_reason(flags)))
        return "; ".join(reasons) or None

    def on_torch_kernels(self) -> WeightFormat:
        """This format with every part that runs a kernel of ours on torch's kernel instead
        (`Format.on_torch_kernels`)."""
        draft = replace(self.draft, linears=self.draft.linears.on_torch_kernels)
        return replace(self, linears=self.linears.on_torch_kernels, lm_head=self.lm_head.on_torch_kernels, draft=draft)

    def spelled(self, linears: str, lm_head: str) -> str:
        """This format's spec with its target parts named ``linears`` and ``lm_head``
        (the canonical spec for their format values; `format_choice.running_format`
        names dense parts by the model's dtype instead)."""
        target = (linears if linears == lm_head else f"{linears}/{lm_head}") + self.dense.spelled()
        return target if self.draft == DraftFormat() else f"{target}+{self.draft}"


@dataclass(frozen=True)
class Int4Groups:
    """Group-wise int4 weights before packing, in float32 so nothing is rounded yet.

    ``codes`` ``[N, K]`` uint8 in [0, 15]; ``scales`` and ``zeros`` ``[N, K / 32]``;
    ``w[n, k] = (codes[n, k] - 8) · scales[n, k // 32] + zeros[n, k // 32]``.
    """

    codes: Tensor
    scales: Tensor
    zeros: Tensor

    @classmethod
    def stacked(cls, parts: list[Int4Groups]) -> Int4Groups:
        """One linear's groups from ``parts``', their outputs (rows) one after another."""
        return cls(torch.cat([p.codes for p in parts]), torch.cat([p.scales for p in parts]),
                   torch.cat([p.zeros for p in parts]))

    def dequantize(self) -> Tensor:
        """The float32 weight ``[N, K]`` these groups stand for."""
        scales = self.scales.repeat_interleave(GROUP_SIZE, dim=1)  # [N, K]
        zeros = self.zeros.repeat_interleave(GROUP_SIZE, dim=1)
        return (self.codes.float() - 8) * scales + zeros


def int4_from_q4_1(raw: np.ndarray) -> Int4Groups:
    """Decode GGUF Q4_1 blocks ``[N, K/32 · 20]`` (uint8) into `Int4Groups`, losslessly.

    A block is ``d`` (fp16), ``m`` (fp16), then 16 bytes whose low nibbles are weights
    0-15 and high nibbles weights 16-31; ``w = d · q + m``.  So ``scale = d`` and
    ``zero = m + 8d`` (computed in float64, then float32: exact unless ``m`` and ``8d``
    are more than 2^13 apart in magnitude, which no trained weight block is).
    """
    rows = raw.shape[0]
    blocks = np.ascontiguousarray(raw).reshape(rows, -1, _Q4_1_BLOCK_BYTES)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
    nibbles = blocks[..., 4:]
    codes = np.concatenate((nibbles & 0x0F, nibbles >> 4), axis=-1).reshape(rows, -1)
    return Int4Groups(
        codes=torch.from_numpy(codes.astype(np.uint8)),
        scales=torch.from_numpy(d.astype(np.float32)),
        zeros=torch.from_numpy((m + 8 * d).astype(np.float32)),
    )


def int4_quantize(weight: Tensor) -> Int4Groups:
    """Round-to-nearest asymmetric int4 per group of 32 inputs (Q4_1's own recipe).

    ``min`` maps to code 0 and ``max`` to code 15, so each group's range is covered and
    the error per weight is at most ``scale / 2``.
    """
    rows, cols = weight.shape
    if cols % GROUP_SIZE:
        raise ValueError(f"int4: in_features {cols} is not a multiple of {GROUP_SIZE}")
    groups = weight.float().reshape(rows, cols // GROUP_SIZE, GROUP_SIZE)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scales = (high - low) / 15
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    codes = ((groups - low[..., None]) / safe[..., None]).round_().clamp_(0, 15)
    return Int4Groups(codes.to(torch.uint8).reshape(rows, cols), scales, low + 8 * scales)


class PackedLinear(nn.Module):
    """A linear layer whose weights are in a reduced `Format`; ``forward`` takes any
    float ``x`` ``[..., K]`` and returns ``[..., N]`` in ``x``'s dtype.

    Subclasses implement `_matmul` on bf16 ``[M, K]`` activations; one whose kernel also
    reads fp32 ones (``READS_FP32``, rounding them to bf16 itself and returning fp32) is
    called without the two casts.
    """

    READS_FP32 = False

    def __init__(self, in_features: int, out_features: int, bias: Tensor | None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.bias_fp = None if bias is None else bias.detach().clone()

    def _matmul(self, x: Tensor) -> Tensor:
        """``[M, K]`` bf16 -> ``[M, N]`` bf16: the format's kernel."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)
        if not (self.READS_FP32 and flat.dtype == torch.float32):
            flat = flat.to(ACTIVATION_DTYPE)
        out = self._matmul(flat).to(x.dtype).view(*x.shape[:-1], self.out_features)
        return out if self.bias_fp is None else out.add_(self.bias_fp.to(x.dtype))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class Bf16Linear(PackedLinear):
    """Dense bf16 ``[N, K]`` weights (AMX tiles where the CPU has them)."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        super().__init__(weight.shape[1], weight.shape[0], bias)
        self.weight_bf16 = weight.detach().to(torch.bfloat16).contiguous()

    def _matmul(self, x: Tensor) -> Tensor:
        return torch.nn.functional.linear(x, self.weight_bf16)


def int8_quantize(weight: Tensor) -> tuple[Tensor, Tensor]:
    """``weight`` ``[N, K]`` -> int8 codes ``[N, K]`` in [-127, 127] and one bf16 scale per
    output channel ``[N]``: ``w ≈ code · scale[n]``."""
    w = weight.detach().float()
    scales = w.abs().amax(dim=1) / _INT8_MAX
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    codes = (w / scales[:, None]).round_().clamp_(-_INT8_MAX, _INT8_MAX).to(torch.int8)
    return codes, scales.to(ACTIVATION_DTYPE)


class Int8Linear(PackedLinear):
    """Weight-only int8 ``[N, K]`` with one bf16 scale per output channel ``[N]``."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        super().__init__(weight.shape[1], weight.shape[0], bias)
        self.codes, self.scales = int8_quantize(weight)

    def _matmul(self, x: Tensor) -> Tensor:
        return torch.ops.aten._weight_int8pack_mm(x, self.codes, self.scales)


class Int4Linear(PackedLinear):
    """Weight-only int4 in groups of 32 (`Int4Groups`), packed for torch's CPU kernel.

    The kernel wants ``scales_and_zeros`` as ``[K / 32, N, 2]`` in the activations' dtype;
    that cast to bf16 is the one rounding step (module docstring).
    """

    def __init__(self, groups: Int4Groups, bias: Tensor | None = None) -> None:
        out_features, in_features = groups.codes.shape
        super().__init__(in_features, out_features, bias)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            groups.codes.to(torch.int32).contiguous(), _INT4_INNER_K_TILES
        )
        pairs = torch.stack((groups.scales, groups.zeros), dim=-1)  # [N, K/32, 2]
        self.scales_and_zeros = pairs.transpose(0, 1).contiguous().to(ACTIVATION_DTYPE)

    def _matmul(self, x: Tensor) -> Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(
            x, self.packed, GROUP_SIZE, self.scales_and_zeros
        )


class _TilesFromRows:
    """Mixed into a torch-kernel linear whose weights `__init__` also packs as ``tiled``
    (`amx_tiles.TiledInt4` / `TiledInt8`): forwards below `amx_tiles.TILES_FROM` rows run
    torch's kernel, the rest the tiles.  ``FORMAT`` names the tile format in errors."""

    FORMAT: Format

    def _matmul(self, x: Tensor) -> Tensor:
        if x.shape[0] < amx_tiles.TILES_FROM:
            return super()._matmul(x)
        return self.tiled.matmul(x)


class Int4AmxLinear(_TilesFromRows, Int4Linear):
    """`Int4Linear` whose forwards of `amx_tiles.TILES_FROM` rows or more run on AMX
    tiles (the same codes, scales and zeros, in the tile kernel's own layout: the int4
    weights are held twice).  The tile kernel keeps each group's scale and min in fp16
    (GGUF's own ``d`` and ``m``, exact) and applies them in fp32, so its results are
    nearer the fp32 weights than torch's bf16-scaled kernel's."""

    FORMAT = Format.INT4_AMX

    def __init__(self, groups: Int4Groups, bias: Tensor | None = None) -> None:
        self.FORMAT.load_kernel()
        super().__init__(groups, bias)
        self.tiled = amx_tiles.TiledInt4.pack(groups.codes, groups.scales, groups.zeros)


class Int8AmxLinear(_TilesFromRows, Int8Linear):
    """`Int8Linear` whose forwards of `amx_tiles.TILES_FROM` rows or more run on AMX tiles
    (the same codes and bf16 scales, in the tile kernel's layout: the int8 weights are held
    twice).  The tiles sum each output over all inputs in fp32 before its scale applies."""

    FORMAT = Format.INT8_AMX

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        self.FORMAT.load_kernel()
        super().__init__(weight, bias)
        self.tiled = amx_tiles.TiledInt8.pack(self.codes, self.scales)


class Int4VnniLinear(PackedLinear):
    """`Int4Groups` on the VNNI kernel at every row count (models/vnni_dot.py: the same
    codes, GGUF's fp16 scales and mins applied in fp32, activations rounded to int8)."""

    READS_FP32 = True

    def __init__(self, groups: Int4Groups, bias: Tensor | None = None) -> None:
        Format.INT4_VNNI.load_kernel()
        out_features, in_features = groups.codes.shape
        super().__init__(in_features, out_features, bias)
        self.packed = vnni_dot.VnniInt4.pack(groups.codes, groups.scales, groups.zeros)

    def _matmul(self, x: Tensor) -> Tensor:
        return self.packed.matmul(x)


class Int8VnniLinear(PackedLinear):
    """`int8_quantize`'s codes and bf16 scales on the VNNI kernel at every row count
    (models/vnni_dot.py: each output summed over all inputs before its scale applies)."""

    READS_FP32 = True

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        Format.INT8_VNNI.load_kernel()
        super().__init__(weight.shape[1], weight.shape[0], bias)
        self.packed = vnni_dot.VnniInt8.pack(*int8_quantize(weight))

    def _matmul(self, x: Tensor) -> Tensor:
        return self.packed.matmul(x)


class SharedLinear(nn.Module):
    """``F.linear`` over a weight ``[N, K]`` the model already holds (no copy): the dense
    side of a ``:dense<N>`` format in the model's own dtype."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight = weight.detach()  # shares the unpacked weight's storage
        self.bias = bias

    def forward(self, x: Tensor) -> Tensor:
        return torch.nn.functional.linear(x, self.weight, self.bias)


class DenseFromRows(nn.Module):
    """A packed linear that hands a forward of ``dense_from`` rows or more to ``large``,
    one dense GEMM over the weight it was packed from: a `SharedLinear` in the model's
    dtype or a `Bf16Linear` copy (module docstring: where each kernel is cheaper).
    ``forward`` as `PackedLinear`'s."""

    def __init__(self, packed: PackedLinear, large: SharedLinear | Bf16Linear, dense_from: int) -> None:
        super().__init__()
        self.packed = packed
        self.large = large
        self.dense_from = dense_from

    def forward(self, x: Tensor) -> Tensor:
        kernel = self.packed if x.numel() // self.packed.in_features < self.dense_from else self.large
        return kernel.forward(x)  # no __call__ hooks, as `llama.linear`

    def extra_repr(self) -> str:
        return f"dense_from={self.dense_from}"


def pack_linear(
    fmt: Format, weight: Tensor, bias: Tensor | None, exact_int4: Int4Groups | None = None
) -> PackedLinear:
    """A `PackedLinear` of format ``fmt`` (not ``fp32``) for ``weight`` ``[N, K]``.

    ``exact_int4`` (blocks read straight from a GGUF file) is used as-is for the int4
    formats; without it the weight is re-quantised group-wise (`int4_quantize`).  A format
    of our kernels on a linear they cannot hold (`cpu_kernel.packable`) packs for torch's
    kernel alone.
    """
    if not packable(*weight.shape):
        fmt = fmt.on_torch_kernels
    packed_from_weight = {Format.BF16: Bf16Linear, Format.INT8: Int8Linear, Format.INT8_AMX: Int8AmxLinear,
                          Format.INT8_VNNI: Int8VnniLinear}
    if fmt in packed_from_weight:
        return packed_from_weight[fmt](weight, bias)
    if fmt.is_int4:
        kernel = {Format.INT4_AMX: Int4AmxLinear, Format.INT4_VNNI: Int4VnniLinear}.get(fmt, Int4Linear)
        return kernel(exact_int4 if exact_int4 is not None else int4_quantize(weight), bias)
    raise ValueError(f"pack_linear: format {fmt.value!r} is not a packed format")


@runtime_checkable
class StacksLinears(Protocol):
    """A module whose sibling linears read one input (`llama.Attention`: q, k and v;
    `llama.MLP`: gate and up) and that can run them as one linear over their weights
    stacked along outputs.  A packed format stacks them: one kernel call and one activation
    cast instead of two or three saves 5-53 µs a layer and group at 1-17 rows on a 2-core
    AVX-512 EPYC (docs/results/2026-12-04_stacked_linears_avx512.md); every packed CPU
    kernel computes an output column from that column's weights alone, so there the stacked
    outputs equal the separate ones bit for bit (on a GPU, cuBLAS may pick another kernel for
    the wider shape).  Dense fp32 stays unstacked: one larger GEMV was slower on the CPU
    (docs/native_engine.md)."""

    STACKED: ClassVar[str]  # the stacked linear's attribute name

    def stacked_parts(self) -> tuple[str, ...]: ...

    def stack(self, stacked: nn.Module) -> None: ...


def stacked_linear(parts: list[nn.Linear]) -> nn.Linear:
    """One ``nn.Linear`` over ``parts``' weights (and biases) stacked along outputs."""
    weight = torch.cat([p.weight.detach() for p in parts])
    stacked = nn.Linear(weight.shape[1], weight.shape[0], bias=parts[0].bias is not None, device="meta")
    stacked.weight = nn.Parameter(weight, requires_grad=False)
    if stacked.bias is not None:
        stacked.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]), requires_grad=False)
    return stacked


def _stack_linears(root: nn.Module, exact_int4: dict[str, Int4Groups]) -> dict[str, Int4Groups]:
    """Stack the parts of every `StacksLinears` module under ``root`` into one ``nn.Linear``,
    to be packed like any other; returns ``exact_int4`` with the stacked linears' GGUF
    blocks added, stacked from the parts' (a part without them quantised as `pack_linear`
    would have)."""
    exact = dict(exact_int4)
    for name, module in list(root.named_modules()):
        if not isinstance(module, StacksLinears):
            continue
        prefix = f"{name}." if name else ""
        parts = {prefix + part: getattr(module, part) for part in module.stacked_parts()}
        if any(part in exact for part in parts):
            exact[prefix + module.STACKED] = Int4Groups.stacked(
                [exact[part] if part in exact else int4_quantize(linear.weight) for part, linear in parts.items()])
        module.stack(stacked_linear(list(parts.values())))
    return exact


def apply_weight_format(model: Model, fmt: WeightFormat, exact_int4: dict[str, Int4Groups] | None = None) -> Model:
    """Swap a `llama.LlamaModel`'s decoder linears and LM head to ``fmt``, in place;
    returns ``model``.  (Typed by a variable, not by the class: llama.py builds on this
    module, so this module does not import it.)

    ``exact_int4`` maps a linear's name inside ``model.layers`` (``"0.self_attn.q_proj"``)
    to its GGUF blocks.  ``fp32`` leaves the module untouched (the reference path); a
    packed format first stacks each attention's q, k and v, and each MLP's gate and up,
    into one linear (`StacksLinears`).
    The dense fp32 weights of swapped linears are released unless ``fmt.dense`` keeps
    them (or their bf16 copy) for large forwards; the embedding stays, since
    the lookup reads it even when the (tied) LM head is packed.
    """
    exact_int4 = exact_int4 or {}
    if fmt.linears != Format.FP32:
        exact_int4 = _stack_linears(model.layers, exact_int4)

        def packed(name: str, linear: nn.Linear) -> nn.Module:
            kernel = pack_linear(fmt.linears, linear.weight, linear.bias, exact_int4.get(name))
            return fmt.dense.wrap(kernel, linear.weight)

        _swap_linears(model.layers, packed)
    if fmt.lm_head != Format.FP32:
        packed = pack_linear(fmt.lm_head, model.lm_head_weight, None)
        model.packed_head = fmt.dense.wrap(packed, model.lm_head_weight)
    model.weight_format = fmt
    return model


def apply_draft_format(draft: Model, fmt: DraftFormat) -> Model:
    """Swap every ``nn.Linear`` of a draft head (its layer, ``fc``, an EAGLE-3 head's own
    LM head) to ``fmt`` (with its dense switch), in place; returns ``draft``.  The target's
    modules it reads (the shared embedding, an EAGLE-1/2 head's target LM head) are not
    its submodules and keep the target's format.  ``fp32`` leaves it untouched."""
    if fmt.linears == Format.FP32:
        return draft
    _stack_linears(draft, {})
    _swap_linears(draft, lambda name, linear: fmt.dense.wrap(pack_linear(fmt.linears, linear.weight, linear.bias),
                                                             linear.weight))
    return draft


def _swap_linears(root: nn.Module, make: Callable[[str, nn.Linear], nn.Module]) -> None:
    """Replace every ``nn.Linear`` under ``root`` by ``make(its name under root, it)``."""
    for name, linear in [(n, m) for n, m in root.named_modules() if type(m) is nn.Linear]:
        parent_name, _, child = name.rpartition(".")
        setattr(root.get_submodule(parent_name), child, make(name, linear))
