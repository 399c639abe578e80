"""When may two greedy runs of the same model in the same precision pick different tokens?

In fp32 the engine is token-identical to vanilla decoding.  In reduced precision it is
not: verifying 16 tokens in one forward and decoding them one by one run different
kernels (different tiling, reduction order, AMX vs AVX paths), so the same logit comes
out with a different rounding, and where the top two logits are closer than that
rounding the argmax may flip.  Such a flip is a *near-tie*: both tokens are equally
justified by the model at that precision.  Anything else is a bug.

The tolerance is derived from the dtype, not tuned:

* Every decoder layer writes its residual-stream output, and the final norm and the
  head write theirs, in the compute dtype: ``L + 2`` stages for ``L`` layers.  Each
  stage rounds its output once, relative error at most the unit roundoff ``u``
  (``finfo.eps / 2``: 2^-8 for bf16, 2^-24 for fp32), and accumulates dot products of
  length at most ``K`` (the widest inner dimension) in fp32, whose order differs between
  kernels: ``sqrt(K) · u_fp32`` (the probabilistic bound of Higham & Mary, 2019, for
  independent rounding errors; the worst case ``K · u_fp32`` never shows in practice).
  So a stage's relative error is ``e = u + sqrt(K) · u_fp32``; in bf16 the first term
  dominates, in fp32 the second.  To first order the stages' errors add, so a logit
  computed along one kernel path is within ``(L + 2) · e · S`` of the exact value, where
  ``S`` bounds the logits' magnitude; we take ``S = max_v |z_v|`` over the vocabulary at
  that position.  That is an assumption, not a theorem: the rigorous Cauchy-Schwarz scale
  ``|w_v| · |h|`` is ~sqrt(hidden) times larger, because rounding errors are not aligned
  with any one row ``w_v``; the largest logit is the natural scale of a dot product with
  the same final hidden state, and the tests check the bound against measured spreads.
* Two runs can each be off by that much in opposite directions, and the comparison
  involves two logits, so the decision gap ``|z_a - z_b|`` of a genuine near-tie is at
  most ``tolerance = 2 · 2 · (L + 2) · e · S``.

For SmolLM2 (L = 30, K = 1536, logits of magnitude ~20) that is ~20 · 128 · 2^-8 ≈ 10
in bf16 — loose, since nothing about the kernels' internals is assumed (docs/precision.md
has the measured spread) — and ~6e-3 in fp32.  `tests/test_precision.py` checks both
sides: the bf16 spread between a one-forward and a token-by-token run stays inside the
bound, and a planted wrong token (a clear non-tie) fails it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .config import ModelConfig
from .llama import LlamaModel


def unit_roundoff(dtype: torch.dtype) -> float:
    """Largest relative error of rounding a real number to ``dtype`` (``eps / 2``)."""
    if not dtype.is_floating_point:
        raise ValueError(f"dtype: {dtype} is not a floating-point dtype")
    return torch.finfo(dtype).eps / 2


@dataclass(frozen=True)
class NearTieRule:
    """The near-tie tolerance for a model of ``num_layers`` layers, widest inner dimension
    ``inner_dim``, computing in ``dtype``."""

    dtype: torch.dtype
    num_layers: int
    inner_dim: int

    def __post_init__(self) -> None:
        for name in ("num_layers", "inner_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: {getattr(self, name)} must be >= 1")
        unit_roundoff(self.dtype)  # validates the dtype

    @classmethod
    def for_model(cls, config: ModelConfig, dtype: torch.dtype) -> NearTieRule:
        """The rule for a target of ``config`` whose activations are in ``dtype``."""
        inner = max(config.hidden_size, config.intermediate_size)
        return cls(dtype, config.num_layers, inner)

    @property
    def relative_error(self) -> float:
        """``(L + 2) · (u + sqrt(K) · u_fp32)``: one logit's relative error along one path."""
        stage = unit_roundoff(self.dtype) + math.sqrt(self.inner_dim) * unit_roundoff(torch.float32)
        return (self.num_layers + 2) * stage

    def tolerance(self, logits: Tensor) -> float:
        """``2 · 2 · relative_error · max|z|`` for one position's logits ``[vocab]``."""
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


@torch.inference_mode()
def judge_divergence(target: LlamaModel, rule: NearTieRule, prompt_ids: list[int], reference: list[int],
                     other: list[int]) -> Divergence | None:
    """The verdict on two greedy continuations of ``prompt_ids`` by the same target:
    ``None`` if they agree; else `NearTieRule.check` at their first difference, on the
    target's logits after the common prefix (one plain causal forward)."""
    at = first_divergence(reference, other)
    if at is None:
        return None
    hidden = target.causal_hidden(list(prompt_ids) + list(reference[:at]))
    return rule.check(target.logits(hidden[-1]), reference[at], other[at])


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first differing token of two greedy outputs, or None.

    Only the first one can be judged: after it the two runs condition on different
    prefixes.  A run that stops early (EOS, length) is not a divergence.
    """
    for index, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return index
    return None
