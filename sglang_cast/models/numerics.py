"""When may two greedy runs of the same model in the same precision pick different tokens?

In fp32 the engine is token-identical to vanilla decoding.  In reduced precision it is
not: verifying 16 tokens in one forward and decoding them one by one run different
kernels (different tiling, reduction order, AMX vs AVX paths), so the same logit comes
out with a different rounding, and where the top two logits are closer than that
rounding the argmax may flip.  Such a flip is a *near-tie*: both tokens are equally
justified by the model at that precision.  Anything else is a bug.

The tolerance is derived from the dtype, not tuned:

* Every decoder layer writes its residual-stream output, and the final norm and the
  head write theirs, in the compute dtype: ``L + 2`` roundings for ``L`` layers, each
  with relative error at most the unit roundoff ``u`` (``finfo.eps / 2``: 2^-8 for bf16,
  2^-24 for fp32).  To first order those relative errors add, so a logit computed along
  one kernel path is within ``(L + 2) · u · S`` of the exact value, where ``S`` bounds
  the logits' magnitude; we take ``S = max_v |z_v|`` over the vocabulary at that
  position.  That is an assumption, not a theorem: the rigorous Cauchy-Schwarz scale
  ``|w_v| · |h|`` is ~sqrt(hidden) times larger, because rounding errors are not aligned
  with any one row ``w_v``; the largest logit is the natural scale of a dot product with
  the same final hidden state, and the tests check the bound against measured spreads.
* Two runs can each be off by that much in opposite directions, and the comparison
  involves two logits, so the decision gap ``|z_a - z_b|`` of a genuine near-tie is at
  most ``tolerance = 2 · 2 · (L + 2) · u · S``.

For SmolLM2 (L = 30, logits of magnitude ~20) that is ~20 · 128 · 2^-8 ≈ 10 in bf16 — a
loose worst-case bound, because nothing about the accumulation inside the kernels is
assumed — and ~1.5e-4 in fp32.  `tests/test_precision.py` checks both sides: the
bf16 spread between a one-forward and a token-by-token run stays inside the bound, and a
planted wrong token (a clear non-tie) fails it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def unit_roundoff(dtype: torch.dtype) -> float:
    """Largest relative error of rounding a real number to ``dtype`` (``eps / 2``)."""
    if not dtype.is_floating_point:
        raise ValueError(f"dtype: {dtype} is not a floating-point dtype")
    return torch.finfo(dtype).eps / 2


@dataclass(frozen=True)
class NearTieRule:
    """The near-tie tolerance for a model of ``num_layers`` layers computing in ``dtype``."""

    dtype: torch.dtype
    num_layers: int

    def __post_init__(self) -> None:
        if self.num_layers < 1:
            raise ValueError(f"num_layers: {self.num_layers} must be >= 1")
        unit_roundoff(self.dtype)  # validates the dtype

    @property
    def relative_error(self) -> float:
        """``(L + 2) · u``: one logit's relative error bound along one kernel path."""
        return (self.num_layers + 2) * unit_roundoff(self.dtype)

    def tolerance(self, logits: Tensor) -> float:
        """``2 · 2 · (L + 2) · u · max|z|`` for one position's logits ``[vocab]``."""
        scale = float(logits.detach().float().abs().max())
        return 4 * self.relative_error * scale

    def check(self, logits: Tensor, expected: int, got: int) -> Divergence:
        """Judge a greedy divergence: ``expected`` and ``got`` tokens at one position whose
        target logits are ``logits`` ``[vocab]`` (either run's; the bound covers both)."""
        if logits.ndim != 1:
            raise ValueError(f"logits: expected one position [vocab], got {tuple(logits.shape)}")
        vocab = logits.shape[0]
        for name, token in (("expected", expected), ("got", got)):
            if not 0 <= token < vocab:
                raise ValueError(f"{name}: token {token} not in [0, {vocab})")
        values = logits.detach().float()
        gap = abs(float(values[expected] - values[got]))
        tolerance = self.tolerance(values)
        return Divergence(expected, got, gap, tolerance, gap <= tolerance)


@dataclass(frozen=True)
class Divergence:
    """One greedy divergence: the two tokens, their logit gap and the rule's verdict."""

    expected: int
    got: int
    gap: float
    tolerance: float
    near_tie: bool


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first differing token of two greedy outputs, or None.

    Only the first one can be judged: after it the two runs condition on different
    prefixes.  A run that stops early (EOS, length) is not a divergence.
    """
    for index, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return index
    return None
