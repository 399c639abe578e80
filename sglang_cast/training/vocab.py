"""The vocab stage: which target tokens the head's reduced LM head predicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from . import data
from .config import PipelineConfig
from .head import head_state
from .responses import read_generations
from .target import Target


def build_vocab(target: Target, cfg: PipelineConfig, responses_dir: Path, out: Path) -> dict[str, Any]:
    """The draft vocab: the ``draft_vocab`` most frequent tokens of the target's answers,
    or, when continuing ``--init-head``, that head's vocab (its LM-head rows are trained
    for exactly those tokens) with up to ``vocab_swap`` of its rarest tokens swapped for
    these answers' frequent ones; the summary says how much of these answers it covers.

    The initial head's weights are copied into this stage too (``init_head.pt``), so
    training reads the head as it was when the run began even if the export later
    overwrites the directory it came from (the default output is the shipped head)."""
    counts = torch.zeros(target.config.vocab_size, dtype=torch.long)
    for gen in read_generations(responses_dir):
        counts += torch.bincount(torch.tensor(gen.output_ids, dtype=torch.long), minlength=counts.numel())
    total = max(int(counts.sum()), 1)
    summary: dict[str, Any] = {"from_head": None if cfg.init_head is None else str(cfg.init_head)}
    if cfg.init_head is None:
        d2t, t2d = data.select_draft_vocab(counts, cfg.train.draft_vocab)
    else:
        head = head_state(cfg.init_head, target)
        d2t, t2d, rows = data.swap_draft_vocab(counts, head["t2d"], cfg.train.vocab_swap, target.eos_token_ids)
        swapped = int((rows < 0).sum())
        summary |= {"head_vocab_coverage": float(counts[head["t2d"]].sum()) / total, "swapped_tokens": swapped}
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

