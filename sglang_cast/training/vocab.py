"""The vocab stage: which target tokens the head's reduced LM head predicts."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .config import PipelineConfig
from .head import head_state
from .responses import read_generations
from .target import Target


def build_vocab(target: Target, cfg: PipelineConfig, responses_dir: Path, out: Path) -> dict[str, Any]:
    """The draft vocab: the ``draft_vocab`` most frequent tokens of the target's answers,
    or, when continuing ``--init-head``, that head's vocab (its LM-head rows are trained
    for exactly those tokens) grown by up to ``vocab_grow`` of these answers' frequent
    tokens and with up to ``vocab_swap`` of its rarest tokens swapped for more frequent
    ones; the summary says how much of these answers it covers.

    The initial head's weights are copied into this stage too (``init_head.pt``), so
    training reads the head as it was when the run began even if the export later
    overwrites the directory it came from (the default output is the shipped head)."""
    counts = torch.zeros(target.config.vocab_size, dtype=torch.long)
    for gen in read_generations(responses_dir):
        counts += torch.bincount(torch.tensor(gen.output_ids, dtype=torch.long), minlength=counts.numel())
    total = max(int(counts.sum()), 1)
    summary: dict[str, Any] = {"from_head": None if cfg.init_head is None else str(cfg.init_head)}
    if cfg.init_head is None:
        d2t, t2d = select_draft_vocab(counts, cfg.train.draft_vocab)
    else:
        head = head_state(cfg.init_head, target)
        d2t, t2d, rows = swap_draft_vocab(counts, head["t2d"], cfg.train.vocab_swap, target.eos_token_ids,
                                          grow=cfg.train.vocab_grow)
        grown = d2t.numel() - head["d2t"].numel()
        summary |= {"head_vocab_coverage": float(counts[head["t2d"]].sum()) / total, "grown_tokens": grown,
                    "swapped_tokens": int((rows < 0).sum()) - grown}
        head = with_vocab(head, d2t, t2d, rows)
        torch.save(head, out / "init_head.pt")
    torch.save({"d2t": d2t, "t2d": t2d}, out / "vocab.pt")
    return {"draft_vocab": d2t.numel(), **summary, "distinct_response_tokens": int((counts > 0).sum()),
            "response_token_coverage": float(counts[t2d].sum()) / total}


def with_vocab(head: dict[str, Tensor], d2t: Tensor, t2d: Tensor, rows: Tensor) -> dict[str, Tensor]:
    """``head`` moved onto a swapped draft vocab: each kept token keeps its trained
    LM-head row (``rows`` maps new draft ids to old ones); a token that came in starts
    from the mean row, i.e. with an average logit, so it is rarely proposed before
    training has seen it."""
    weight = head["lm_head.weight"]
    moved = weight[rows.clamp(min=0)]
    moved[rows < 0] = weight.mean(dim=0)
    return {**head, "lm_head.weight": moved, "d2t": d2t.to(head["d2t"].dtype), "t2d": t2d}


def select_draft_vocab(token_counts: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-3's ``(d2t, t2d)`` for the ``size`` most frequent target tokens.

    Draft ids are assigned in increasing target-id order, so ``d2t[i]`` (target id minus
    draft id) is non-negative and non-decreasing, as in the public checkpoints.  Ties
    and unseen tokens (small corpora) are broken by the smaller target id.
    """
    vocab = token_counts.numel()
    if not 0 < size <= vocab:
        raise ValueError(f"draft vocab size must be in [1, {vocab}], got {size}")
    # Stable sort on -count keeps smaller ids first among equal counts.
    order = torch.sort(-token_counts.long(), stable=True).indices[:size]
    hot = order.sort().values
    d2t = hot - torch.arange(size)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[hot] = True
    return d2t, t2d


def swap_draft_vocab(token_counts: torch.Tensor, t2d: torch.Tensor, max_swaps: int, keep: Iterable[int] = (),
                     grow: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Refresh a trained head's draft vocab for new data.

    A continued head keeps the vocab its LM-head rows were trained for, but each new
    batch of answers brings frequent tokens it can never propose.  First the ``grow``
    most frequent tokens outside the vocab that these answers use come in (a larger
    vocab); then up to ``max_swaps`` pairs are swapped: the next most frequent token
    outside comes in for the least frequent one inside, while the incoming token is
    strictly more frequent (ties go to the smaller target id; ``keep``, e.g. EOS, never
    leaves).  Draft ids stay in increasing target-id order, so the kept tokens' ids
    shift: ``rows[i]`` is the old draft id of new draft id ``i`` (the LM-head row to
    copy), -1 for a token that came in.
    """
    counts = token_counts.long()
    inside = torch.nonzero(t2d).squeeze(1)
    inside = inside[~torch.isin(inside, torch.tensor(list(keep), dtype=torch.long))]
    outside = torch.nonzero(~t2d).squeeze(1)
    outside = outside[torch.sort(-counts[outside], stable=True).indices]
    added = outside[:grow][counts[outside[:grow]] > 0]
    incoming = outside[added.numel():][:max_swaps]
    outgoing = inside[torch.sort(counts[inside], stable=True).indices][:max_swaps]
    pairs = min(incoming.numel(), outgoing.numel())
    # incoming counts fall and outgoing counts rise along the pairs, so the pairs worth
    # swapping are a prefix
    swaps = int((counts[incoming[:pairs]] > counts[outgoing[:pairs]]).sum())
    new_t2d = t2d.clone()
    new_t2d[added] = True
    new_t2d[outgoing[:swaps]] = False
    new_t2d[incoming[:swaps]] = True
    hot = torch.nonzero(new_t2d).squeeze(1)
    return hot - torch.arange(hot.numel()), new_t2d, target_to_draft(t2d)[hot]


def target_to_draft(t2d: torch.Tensor) -> torch.Tensor:
    """Draft id of every target id, -1 where the token is outside the draft vocab."""
    index = torch.cumsum(t2d.long(), 0) - 1
    return torch.where(t2d, index, torch.full_like(index, -1))
