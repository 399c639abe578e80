"""Lossless verification of a verified tree against the target (docs/design/cast.md §6).

Both functions return, per sequence, the accepted path (local indices into the
``VerifyTree``, root excluded) and the bonus token drawn from the target at the
last accepted node, so an engine commits ``accepted + 1`` tokens per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import RequestSampler, target_probs
from .tree import VerifyTree


@dataclass
class VerifyResult:
    accepted: torch.Tensor  # [B, max_accepted] local node indices, -1 padded
    num_accepted: torch.Tensor  # [B] draft tokens accepted (bonus excluded)
    bonus: torch.Tensor  # [B] token sampled from the target after the path

    def accepted_tokens(self, tree: VerifyTree, batch_index: int) -> list[int]:
        """Accepted draft tokens followed by the bonus token."""
        count = int(self.num_accepted[batch_index])
        path = self.accepted[batch_index, :count]
        return tree.tokens[batch_index, path].tolist() + [int(self.bonus[batch_index])]


def _pack(paths: list[list[int]], bonus: list[int], device: torch.device) -> VerifyResult:
    width = max([len(p) for p in paths] + [1])
    accepted = torch.full((len(paths), width), -1, dtype=torch.long)
    for b, path in enumerate(paths):
        accepted[b, : len(path)] = torch.tensor(path, dtype=torch.long)
    return VerifyResult(
        accepted=accepted.to(device),
        num_accepted=torch.tensor([len(p) for p in paths], dtype=torch.long, device=device),
        bonus=torch.tensor(bonus, dtype=torch.long, device=device),
    )


def verify_greedy(tree: VerifyTree, target_argmax: torch.Tensor) -> VerifyResult:
    """Walk from the root, descending into the child that carries the target's
    argmax; stop when no verified child does.  ``target_argmax[b, i]`` is the
    target's greedy next token after node ``i``.  Vectorised over the batch; the
    loop runs once per drafted layer (``tree.max_depth``, known on the host), with no
    early exit, so nothing is read back from the device.  ``accepted`` has one column
    per layer, -1 past each row's path."""
    batch, n = tree.tokens.shape
    device = tree.tokens.device
    rows = torch.arange(batch, device=device)
    current = torch.zeros(batch, dtype=torch.long, device=device)
    alive = torch.ones(batch, dtype=torch.bool, device=device)
    depth = tree.max_depth if tree.max_depth is not None else int(tree.depths.max())
    steps = []
    for _ in range(depth):
        wanted = target_argmax[rows, current]
        match = (tree.parents == current.view(-1, 1)) & (tree.tokens == wanted.view(-1, 1)) & alive.view(-1, 1)
        child = torch.argmax(match.int(), dim=1)  # top-k children carry distinct tokens
        alive = alive & match.any(dim=1)
        current = torch.where(alive, child, current)
        steps.append(torch.where(alive, child, torch.full_like(child, -1)))
    if not steps:
        return VerifyResult(accepted=torch.full((batch, 1), -1, dtype=torch.long, device=device),
                            num_accepted=torch.zeros(batch, dtype=torch.long, device=device),
                            bonus=target_argmax[rows, current])
    accepted = torch.stack(steps, dim=1)
    return VerifyResult(accepted=accepted, num_accepted=accepted.ge(0).sum(dim=1), bonus=target_argmax[rows, current])


def reject(probs: torch.Tensor, token: int) -> torch.Tensor:
    """Residual distribution after rejecting a point-mass proposal ``token``:
    ``norm(max(p - δ_token, 0))`` = ``p`` with ``token`` removed, renormalised.
    If ``token`` held all the mass (only reachable through rounding), ``p`` stays."""
    residual = probs.clone()
    residual[token] = 0.0
    total = residual.sum()
    return residual / total if total > 0 else probs


def verify_sampling(tree: VerifyTree, target_logits: torch.Tensor,
                    samplers: list[RequestSampler]) -> VerifyResult:
    """Multi-round speculative sampling with deterministic (point-mass) proposals.

    At a node the target distribution ``p`` (after the request's temperature,
    top-k, top-p) is computed; verified children are tried best first (local
    order is rank order); child ``t`` is accepted with probability ``p(t)``, and on
    rejection ``p`` becomes :func:`reject`'s residual.  If every child is
    rejected, the bonus token is drawn from what remains.  The emitted tokens are
    then distributed exactly as sampling the target directly.
    """
    paths: list[list[int]] = []
    bonus: list[int] = []
    parents = tree.parents.cpu()
    tokens = tree.tokens.cpu()
    for b, sampler in enumerate(samplers):
        path: list[int] = []
        current = 0
        while True:
            probs = target_probs(target_logits[b, current], sampler.params)
            chosen = None
            for child in torch.nonzero(parents[b] == current).flatten().tolist():
                token = int(tokens[b, child])
                if sampler.uniform() < float(probs[token]):
                    chosen = child
                    break
                probs = reject(probs, token)
            if chosen is None:
                bonus.append(sampler.sample(probs))
                break
            path.append(chosen)
            current = chosen
        paths.append(path)
    return _pack(paths, bonus, tree.tokens.device)
