"""Token log-probabilities under the target model, in SGLang's ``meta_info`` layout.

SGLang frontends need them for ``sgl.select`` (it scores each choice with
``max_new_tokens=0`` and ``return_logprob`` over prompt + choice).  The engine's
step does not keep per-position distributions, so they are computed here by one
plain causal forward of the target over the sequence, in a scratch KV cache of
its own: the engine's cache slots are never touched.  For generated tokens this
rescoring is exact, because the same target produced them.  Values are the raw
model distribution (temperature 1), as SGLang reports them.

Runs on the engine thread only (it shares the target and the tokenizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..models import LlamaModel

# Positions whose vocab-sized log-softmax is materialised at once: bounds memory
# for long prompts (2048 x 49152 floats would be 400 MB).
ROWS_PER_CHUNK = 256

Entry = list[Any]  # [logprob | None, token_id, text | None]


@dataclass(frozen=True)
class LogprobOptions:
    """What a request asked for (SGLang's ``logprob_start_len``, ``top_logprobs_num``,
    ``return_text_in_logprobs``).  ``start=None`` reports output tokens only, which is
    SGLang's default."""

    start: int | None = None
    top_k: int = 0
    with_text: bool = False


@dataclass(frozen=True)
class ScoredPositions:
    """``logprobs[i]`` is log p(token at ``start + i`` | tokens before it); position 0
    has no context and gets ``None``.  ``top[i]`` lists (logprob, token_id) of the
    ``top_k`` most likely tokens there, or ``None``."""

    start: int
    logprobs: list[float | None]
    top: list[list[tuple[float, int]] | None]


@torch.inference_mode()
def score_positions(target: LlamaModel, token_ids: list[int], start: int, top_k: int = 0) -> ScoredPositions:
    n = len(token_ids)
    if not 0 <= start <= n:
        raise ValueError(f"start must be in [0, {n}], got {start}")
    hidden = target.causal_hidden(token_ids)  # [n, hidden], final-normed: row p predicts token p + 1
    ids = torch.tensor([token_ids], device=hidden.device)  # [1, n]

    first = max(start, 1)
    logprobs: list[float | None] = [None] * (first - start)
    top: list[list[tuple[float, int]] | None] = [None] * (first - start)
    for lo in range(first, n, ROWS_PER_CHUNK):
        hi = min(n, lo + ROWS_PER_CHUNK)
        # The distribution over token p is predicted at position p - 1.
        table = torch.log_softmax(target.logits(hidden[lo - 1 : hi - 1]).float(), dim=-1)  # [hi - lo, V]
        logprobs += table.gather(1, ids[0, lo:hi, None]).squeeze(1).tolist()  # [hi - lo]
        if top_k:
            values, indices = table.topk(min(top_k, table.shape[-1]), dim=-1)  # [hi - lo, top_k] each
            top += [list(zip(v, i)) for v, i in zip(values.tolist(), indices.tolist())]
        else:
            top += [None] * (hi - lo)
    return ScoredPositions(start, logprobs, top)


@dataclass(frozen=True)
class LogprobReport:
    """The four lists SGLang puts in ``meta_info`` when ``return_logprob`` is set."""

    input_token_logprobs: list[Entry]
    output_token_logprobs: list[Entry]
    input_top_logprobs: list[list[Entry] | None]
    output_top_logprobs: list[list[Entry] | None]

    def to_meta_info(self) -> dict[str, Any]:
        return {
            "input_token_logprobs": self.input_token_logprobs,
            "output_token_logprobs": self.output_token_logprobs,
            "input_top_logprobs": self.input_top_logprobs,
            "output_top_logprobs": self.output_top_logprobs,
        }


def report_logprobs(target: LlamaModel, tokenizer, prompt_ids: list[int], output_ids: list[int],
                    options: LogprobOptions) -> LogprobReport:
    """Score prompt + output once and split the result at the prompt's end
    (``options.start`` within the prompt: `native_protocol` refused it otherwise)."""
    start = len(prompt_ids) if options.start is None else options.start
    ids = prompt_ids + output_ids
    scored = score_positions(target, ids, start, options.top_k)

    def text(token_id: int) -> str | None:
        return tokenizer.decode([token_id]) if options.with_text else None

    entries = [[lp, token, text(token)] for lp, token in zip(scored.logprobs, ids[start:])]
    tops = [None if alternatives is None else [[lp, token, text(token)] for lp, token in alternatives]
            for alternatives in scored.top]
    split = len(prompt_ids) - start
    return LogprobReport(entries[:split], entries[split:], tops[:split], tops[split:])
