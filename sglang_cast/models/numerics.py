"""When may two greedy runs of the same model in the same precision pick different tokens?

In fp32 on the CPU the engine is token-identical to vanilla decoding.  In reduced
precision (or with CUDA's shape-dependent GEMM kernels) it is not: verifying 16 tokens
in one forward and decoding them one by one run different kernels (different tiling,
reduction order, AMX vs AVX paths), so the same logit comes out with a different
rounding, and where the top two logits are closer than that rounding the argmax may
flip.  Such a flip is a *near-tie*: both tokens are equally justified by the model at
that precision.  Anything else is a bug.

The judge (`judge_by_kernel_paths`) measures, it does not bound a priori.  At the first
divergent position it recomputes the target's logits along the two kernel paths the two
runs took (`kernel_paths`): ``verify`` — one causal forward over the whole prefix, the
M = n kernels a verify forward runs — and ``stepwise`` — the same tokens one forward
each, the M = 1 kernels of plain decoding.  With ``Δ = verify - stepwise`` over the
vocabulary (`KernelPaths.tolerance`):

* the measured spread is ``s = max_v |Δ_v|``, the largest disagreement of the two paths
  on any logit at that position.  The maximum, not a quantile: rounding error grows
  with a logit's magnitude, and the two tokens in question are top logits, so a
  quantile over the (mostly small) vocabulary would understate their own error;
* the decision between two tokens ``e`` and ``g`` is the sign of ``z_e - z_g``; between
  the paths it moves by ``Δ_e - Δ_g``, at most ``2 s``: ``tolerance = 2 s``;
* in each path, the *gap* is how far the weaker of ``e`` and ``g`` lies below that
  path's own argmax (``max_v z_v - min(z_e, z_g)``); the verdict's gap is the larger of
  the two paths' gaps.  A divergence is a near-tie iff ``gap <= tolerance``: both
  tokens are, in both paths, within the measured spread of the top.

When the recomputed paths reproduce the flip (verify's argmax is one token, stepwise's
the other), the two gaps sum to ``|Δ_e - Δ_g| <= 2 s``, so a reproduced flip always
passes; a token several spreads behind the top fails however close the paths agree
(a planted token 0.5 logits behind, with paths agreeing to 1e-3, fails:
`tests/models/test_near_tie.py`).  The recomputation runs one sequence alone, not the run's
batch and tree, so its rounding is a sample of the same kernels' error, not a replay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from .attention import causal_tree_mask
from .kv_cache import KVCache
from .llama import LlamaModel


@dataclass(frozen=True)
class Divergence:
    """One greedy divergence: the two tokens, their logit gap, the tolerance it was held
    to and the verdict (``near_tie``: ``gap <= tolerance``)."""

    expected: int
    got: int
    gap: float
    tolerance: float
    near_tie: bool


@dataclass(frozen=True)
class KernelPaths:
    """One position's target logits ``[vocab]`` as the two kernel paths computed them."""

    verify: Tensor  # one causal forward over the whole prefix (M = n, a verify forward's kernels)
    stepwise: Tensor  # the same tokens one forward each (M = 1, plain decoding's kernels)

    @property
    def spread(self) -> float:
        """``max_v |verify_v - stepwise_v|``: the paths' largest disagreement on any logit."""
        return float((self.verify.float() - self.stepwise.float()).abs().max())

    @property
    def tolerance(self) -> float:
        """``2 · spread``: how far the paths may move the difference of two logits."""
        return 2 * self.spread

    def gap(self, expected: int, got: int) -> float:
        """The larger, over both paths, of how far the weaker of the two tokens lies below
        that path's own argmax."""
        return max(float(z.max() - torch.minimum(z[expected], z[got]))
                   for z in (self.verify.float(), self.stepwise.float()))


def judge_paths(paths: KernelPaths, expected: int, got: int) -> Divergence:
    """A near-tie iff both tokens are, in both paths, within the measured tolerance of
    the top (module docstring)."""
    for name, logits in (("verify", paths.verify), ("stepwise", paths.stepwise)):
        if logits.ndim != 1:
            raise ValueError(f"{name}: expected one position [vocab], got {tuple(logits.shape)}")
    if paths.verify.shape != paths.stepwise.shape:
        raise ValueError(f"stepwise: shape {tuple(paths.stepwise.shape)} differs from verify's "
                         f"{tuple(paths.verify.shape)}")
    vocab = paths.verify.shape[0]
    for name, token in (("expected", expected), ("got", got)):
        if not 0 <= token < vocab:
            raise ValueError(f"{name}: token {token} not in [0, {vocab})")
    gap, tolerance = paths.gap(expected, got), paths.tolerance
    return Divergence(expected, got, gap, tolerance, gap <= tolerance)


def _token_list(token_ids: list[int]) -> list[int]:
    """``token_ids`` as a list of its own, refused when empty (no position to judge)."""
    if not token_ids:
        raise ValueError("token_ids: at least one token is needed")
    return list(token_ids)


def _stepwise_hidden(target: LlamaModel, token_ids: list[int]) -> Iterator[Tensor]:
    """Final-norm hidden state ``[hidden]`` after each of ``token_ids``, fed one token per
    forward into a scratch KV cache of its own, as plain decoding computes them (no
    engine state is touched).  Callers hold inference mode."""
    device = target.embed_tokens.weight.device
    cache = KVCache.for_model(target.config, 1, len(token_ids), device, target.embed_tokens.weight.dtype)
    slots = torch.zeros(1, dtype=torch.long, device=device)
    mask = causal_tree_mask(1, 1, device)
    keep = torch.zeros(1, 1, dtype=torch.long, device=device)
    one = torch.ones(1, dtype=torch.long, device=device)
    for position, token in enumerate(token_ids):
        ids = torch.tensor([[token]], device=device)
        hidden = target(ids, torch.tensor([[position]], device=device), cache, slots, mask).hidden
        cache.commit(slots, keep, one)
        yield hidden[0, -1]


@torch.inference_mode()
def stepwise_logits(target: LlamaModel, token_ids: list[int]) -> Tensor:
    """Logits ``[vocab]`` after ``token_ids`` fed one token per forward (`_stepwise_hidden`)."""
    *_, last = _stepwise_hidden(target, _token_list(token_ids))
    return target.logits(last)


@torch.inference_mode()
def kernel_paths(target: LlamaModel, token_ids: list[int]) -> KernelPaths:
    """The target's logits after ``token_ids`` along both kernel paths."""
    token_ids = _token_list(token_ids)
    verify = target.logits(target.causal_hidden(token_ids)[-1])
    return KernelPaths(verify, stepwise_logits(target, token_ids))


@torch.inference_mode()
def kernel_paths_per_position(target: LlamaModel, token_ids: list[int]) -> list[KernelPaths]:
    """Both kernel paths' logits after every prefix of ``token_ids`` (entry ``i``: after
    ``token_ids[: i + 1]``), in one verify forward (LM head on all ``n`` rows at once) and
    ``n`` one-token forwards (the head on one row each, as plain decoding runs it): the
    paths' spread over a whole sequence, for diagnostics (`tools/bench_kernels.py`)."""
    token_ids = _token_list(token_ids)
    verify = target.logits(target.causal_hidden(token_ids))  # [n, vocab]
    stepwise = (target.logits(hidden) for hidden in _stepwise_hidden(target, token_ids))
    return [KernelPaths(v, s) for v, s in zip(verify, stepwise)]


def judge_by_kernel_paths(target: LlamaModel, prompt_ids: list[int], reference: list[int],
                          other: list[int]) -> Divergence | None:
    """The verdict on two greedy continuations of ``prompt_ids`` by the same target:
    ``None`` if they agree; else `judge_paths` at their first difference, on both kernel
    paths' logits after the common prefix."""
    at = first_divergence(reference, other)
    if at is None:
        return None
    paths = kernel_paths(target, list(prompt_ids) + list(reference[:at]))
    return judge_paths(paths, reference[at], other[at])


def first_divergence(reference: list[int], other: list[int]) -> int | None:
    """Index of the first differing token of two greedy outputs, or None.

    Only the first one can be judged: after it the two runs condition on different
    prefixes.  A run that stops early (EOS, length) is not a divergence.
    """
    for index, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return index
    return None
