"""Training-time test (EAGLE-3): the unrolled draft steps a head is trained on, and their loss.

At inference only the first draft step sees target features; deeper tree levels feed the
draft its own previous hidden state and attend to draft entries of their ancestors
(`sglang_cast/engine/draft_expander.py`).  `ttt_forward` reproduces exactly those inputs
and that attention pattern for every position at once, so the head is trained on the
distribution it is used on (`tests/training/test_train_draft.py` checks it against the engine's
own expander).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from sglang_cast.models import Eagle3Draft
from sglang_cast.models.attention import tree_attention
from sglang_cast.models.llama import rope_cos_sin

from .features import Batch


def ttt_attention_mask(length: int, step: int, device: torch.device | str = "cpu") -> Tensor:
    """``[length, (step + 1) * length]``: which keys draft step ``step`` (0-based) sees.

    Keys are the concatenated per-step key blocks ``[K_0 | K_1 | ... | K_step]``.  A query
    at position ``t`` of step ``s`` stands for a tree node at depth ``s`` whose committed
    prefix ends at ``t - s``: it sees step-0 keys at positions ``<= t - s`` (the prefix,
    computed from target features) and the step-``i`` key at position ``t - s + i`` for
    ``1 <= i <= s`` (its ancestors' draft entries and itself), exactly the
    ``[prefix | scratch]`` visibility of `DraftExpander`.
    """
    t = torch.arange(length, device=device)[:, None]
    s = torch.arange(length, device=device)[None, :]
    blocks = [s <= t - step] + [s == t - step + i for i in range(1, step + 1)]
    return torch.cat(blocks, dim=1)


class UnrolledAttention:
    """The attention of `ttt_forward`'s unrolled steps, handed to the head's own layer.

    `Attention.forward` reads two things from its ``batch``: ``write_positions`` (for the
    shape ``[B, T]``) and ``attend(layer, q, k_new, v_new)``.  This class provides both,
    so the head's own `Eagle3Layer` (norms, projections, RoPE, MLP) runs each step and
    only the key set differs from inference: step ``s`` attends over the keys of steps
    ``0 .. s`` concatenated, ``[K_0 | K_1 | ... | K_s]`` ``[B, kv_heads, (s+1)·T, D]``,
    through `ttt_attention_mask` and the models' own `tree_attention`.  Keys stay
    ordinary autograd tensors (a `KVCache` would overwrite tensors backward still needs).
    """

    def __init__(self, batch: int, length: int, device: torch.device | str) -> None:
        self.batch, self.length, self.device = batch, length, device
        self.keys: list[Tensor] = []  # per step: [B, kv_heads, T, D], rotated
        self.values: list[Tensor] = []  # per step: [B, kv_heads, T, D]

    @property
    def write_positions(self) -> Tensor:
        """``[B, T]``: where the next step's keys go on the concatenated key axis."""
        start = len(self.keys) * self.length
        return torch.arange(start, start + self.length, device=self.device).expand(self.batch, -1)

    def attend(self, layer: int, q: Tensor, k_new: Tensor, v_new: Tensor) -> Tensor:
        """Append this step's keys and values, then attend ``q`` ``[B, H, T, D]`` over
        every step's so far; returns ``[B, H, T, D]``."""
        self.keys.append(k_new)
        self.values.append(v_new)
        mask = ttt_attention_mask(self.length, len(self.keys) - 1, self.device)
        return tree_attention(q, torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2), mask)


def ttt_forward(draft: Eagle3Draft, input_ids: Tensor, features: Tensor, steps: int) -> list[Tensor]:
    """Pre-norm hidden states ``[B, T, h]`` of ``steps`` unrolled draft steps.

    Step 0 is teacher-forced (``fc`` of the target features ``[B, T, 3h]``); step
    ``s > 0`` feeds at position ``t`` the draft's own step ``s - 1`` output at ``t - 1``,
    as a depth-``s`` tree node receives its parent's hidden state.  Every step runs the
    head's own layer; `UnrolledAttention` supplies the training-time key set.
    """
    b, n = input_ids.shape
    positions = torch.arange(n, device=input_ids.device).expand(b, n)
    embeds = draft.embed(input_ids)
    cos, sin = rope_cos_sin(positions, draft.config.layer, embeds.dtype)
    attention = UnrolledAttention(b, n, input_ids.device)
    hidden = draft.fc(features)
    outputs: list[Tensor] = []
    for step in range(steps):
        if step:
            hidden = F.pad(outputs[-1][:, :-1], (0, 0, 1, 0))
        outputs.append(draft.midlayer(embeds, hidden, cos, sin, attention))
    return outputs


@dataclass
class StepStats:
    """Per unrolled step: summed loss and counts for averages over many batches."""

    loss: list[float]  # summed over in-vocab targets
    known: list[int]  # in-vocab targets (the ones the loss sees)
    correct: list[int]  # top-1 == target token (tokens outside the draft vocab count as misses)
    scored: list[int]  # response positions scored

    @classmethod
    def zeros(cls, steps: int) -> StepStats:
        return cls([0.0] * steps, [0] * steps, [0] * steps, [0] * steps)

    def add(self, other: StepStats) -> None:
        for mine, theirs in ((self.loss, other.loss), (self.known, other.known), (self.correct, other.correct),
                             (self.scored, other.scored)):
            for j, value in enumerate(theirs):
                mine[j] += value

    def accuracy(self) -> list[float]:
        return [c / max(n, 1) for c, n in zip(self.correct, self.scored)]

    def mean_loss(self) -> list[float]:
        return [loss / max(n, 1) for loss, n in zip(self.loss, self.known)]


def ttt_loss(draft: Eagle3Draft, batch: Batch, steps: int, decay: float,
             soft_weight: float = 0.0) -> tuple[Tensor, StepStats]:
    """Decay-weighted cross-entropy over the draft vocab, summed over unrolled steps.

    With ``soft_weight`` > 0 each step's loss mixes the cross-entropy against the
    target's argmax with ``soft_weight`` times the cross-entropy against the target's
    top-k distribution renormalised over its tokens in the draft vocab (EAGLE-3 trains
    on the target's distribution; the tree's top-k branches need the runner-up order,
    which the argmax label does not teach).  The recorded loss stays the argmax one,
    so logs of runs with and without soft labels compare.
    The LM head runs only on scored positions (response tokens), which is most of the
    saving on long prompts; both losses read one fp32 log-softmax of its rows, weighted
    rather than row-selected (a selection copies, and scatters back, ``[n, V]`` rows).
    """
    outputs = ttt_forward(draft, batch.input_ids, batch.features, steps)
    total = batch.features.new_zeros(())
    stats = StepStats.zeros(steps)
    for step, hidden in enumerate(outputs):
        mask = batch.step_mask(step)
        logits = draft.lm_head(draft.norm(hidden[mask]))  # [n, V], n scored positions
        log_q = torch.log_softmax(logits.float(), dim=-1)
        labels = batch.labels[mask]
        known = labels >= 0  # the label is inside the draft vocab
        n_known = int(known.sum())
        label_log_q = log_q.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # [n]
        loss = -(label_log_q * known).sum() / max(n_known, 1)
        objective = loss
        if soft_weight:
            objective = (1 - soft_weight) * loss + soft_weight * soft_cross_entropy(
                log_q, batch.soft_ids[mask], batch.soft_probs[mask])
        total = total + decay**step * objective
        stats.loss[step] = loss.item() * n_known
        stats.known[step] = n_known
        stats.correct[step] = int(((logits.argmax(-1) == labels) & known).sum())
        stats.scored[step] = int(mask.sum())
    return total, stats


def soft_cross_entropy(log_q: Tensor, ids: Tensor, probs: Tensor) -> Tensor:
    """Mean over rows of ``-sum_i p_i log q(ids_i)`` for log-probabilities ``log_q`` ``[n, V]``
    and the target's top-k ``ids``, ``probs`` ``[n, k]``, with ``p`` renormalised over the
    entries inside the draft vocab (``ids >= 0``); rows with none are skipped."""
    probs = probs * (ids >= 0)
    mass = probs.sum(-1, keepdim=True)  # [n, 1]
    rows = int((mass > 0).sum())
    weights = probs / mass.clamp(min=torch.finfo(probs.dtype).tiny)  # 0 on skipped rows
    return -(weights * log_q.gather(-1, ids.clamp(min=0))).sum() / max(rows, 1)


