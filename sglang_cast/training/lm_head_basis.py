"""The head's LM head trained as ``W + B·P``: rare draft tokens learn through the target's own output rows.

Why: the shipped head misses most where the token is rare in its training answers, even when the target is sure
of it (docs/results/2026-12-05_confidence_gap_avx512.md): an LM-head row that a token's few labels barely trained
cannot score it, whatever the hidden state says.  Here the draft's ``lm_head.weight`` ``[V_d, h]`` is a free part
``W`` plus the target's own output rows of the draft vocabulary ``B`` ``[V_d, h]`` (frozen) times a shared,
trained ``P`` ``[h, h]`` (zero at the start, so the head starts exactly as it was).  ``P`` is trained by every
token's labels and moves each row by that token's place in the target's output space, rare ones included.

Training only: `folded_state` writes ``W + B·P`` back as the plain ``lm_head.weight``, so the exported head has
the public EAGLE-3 layout and costs the same at inference.  ``B``'s rows are scaled to L2 norm
``scale / sqrt(h)``, so one AdamW step of ``P`` moves a weight by at most ``scale`` times what a step of ``W``
does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sglang_cast.models import Eagle3Draft

FREE, PROJ, BASIS = "lm_head.free", "lm_head.proj", "lm_head.basis"


class BasisLmHead(nn.Module):
    """``x [..., h] -> x · (W + B·P)ᵀ [..., V_d]``."""

    def __init__(self, weight: Tensor, basis: Tensor) -> None:
        super().__init__()
        self.free = nn.Parameter(weight.detach().clone())  # W [V_d, h]
        self.register_buffer("basis", basis)  # B [V_d, h], frozen
        self.proj = nn.Parameter(torch.zeros(basis.shape[1], weight.shape[1], dtype=weight.dtype))  # P [h, h]

    @property
    def weight(self) -> Tensor:
        return self.free + self.basis @ self.proj

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight)


def target_basis(draft: Eagle3Draft, target_output: Tensor, scale: float) -> Tensor:
    """``[V_d, h]``: the target's output rows (``target_output`` ``[V, h]``) of the draft's tokens, in draft-id
    order, each scaled to L2 norm ``scale / sqrt(h)``."""
    rows = target_output.detach().float()[draft.draft_to_target(torch.arange(draft.d2t.numel()))]
    return rows * (scale / rows.shape[1] ** 0.5 / rows.norm(dim=1, keepdim=True).clamp(min=1e-12))


def with_basis(draft: Eagle3Draft, target_output: Tensor, scale: float) -> Eagle3Draft:
    """``draft`` with its ``lm_head`` replaced by a `BasisLmHead` starting from the current weights."""
    draft.lm_head = BasisLmHead(draft.lm_head.weight, target_basis(draft, target_output, scale))
    return draft


def folded_state(draft: Eagle3Draft) -> dict[str, Tensor]:
    """``draft``'s state dict in the public layout: a `BasisLmHead` folded into ``lm_head.weight``."""
    state = draft.state_dict()
    if isinstance(draft.lm_head, BasisLmHead):
        state = {k: v for k, v in state.items() if k not in (FREE, PROJ, BASIS)}
        state["lm_head.weight"] = draft.lm_head.weight.detach().clone()
    return state
