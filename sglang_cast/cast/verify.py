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
    """The longest verified path whose every token is the target's argmax after its
    parent (``target_argmax[b, i]``: the target's greedy next token after node ``i``).

    A node is accepted when it and all its ancestors match, read off the ancestor
    mask in one step for every node at once: no loop over layers, nothing read back
    from the device, and the same handful of ops whatever the depth.  Siblings carry
    distinct tokens (a top-k's), so the accepted nodes form one path; in local order
    (parents first) they are in depth order.  ``accepted`` has one column per drafted
    layer (``tree.max_depth``, known on the host), -1 past each row's path."""
    batch, n = tree.tokens.shape
    if n == 1:  # plain decoding: the root alone, its bonus the target's argmax
        return VerifyResult(accepted=torch.full((batch, 1), -1, dtype=torch.long, device=tree.tokens.device),
                            num_accepted=torch.zeros(batch, dtype=torch.long, device=tree.tokens.device),
                            bonus=target_argmax[:, 0])
    depth = tree.max_depth if tree.max_depth is not None else int(tree.depths.max())
    parents = tree.parents.clamp(min=0)
    matches = (tree.tokens == target_argmax.gather(1, parents)) | (tree.parents < 0)  # the root always
    on_path = ~(tree.ancestor_mask() & ~matches.unsqueeze(1)).any(dim=2)  # [B, n]
    local = torch.arange(n, device=tree.tokens.device).expand(batch, n)
    # Path nodes first, in local order; n marks "no node" and becomes -1.
    ordered = torch.where(on_path, local, n)[:, 1:].sort(dim=1).values
    width = max(depth, 1)
    accepted = torch.nn.functional.pad(ordered, (0, max(0, width - ordered.shape[1])), value=n)[:, :width]
    last = torch.where(on_path, local, 0).amax(dim=1, keepdim=True)  # the deepest accepted node
    return VerifyResult(accepted=accepted.masked_fill(accepted == n, -1), num_accepted=on_path.sum(dim=1) - 1,
                        bonus=target_argmax.gather(1, last).squeeze(1))


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
