"""llama.cpp on the same GGUF: the speed a CPU user gets today, as a benchmark anchor.

`tools/bench.py --methods llamacpp,...` runs it beside our methods on the same
prompts, so every table carries the ratio to what a CPU user would otherwise pick.
It is an optional extra (`bash run.sh anchors` builds llama-cpp-python from source
with flags chosen from this CPU's ISA; see `tools/install_anchors.sh`).

Fairness rules (each one a way the comparison could silently favour one side):

* the same GGUF file the native engine converts its weights from;
* the same prompt tokens: prompts are tokenized once by our tokenizer (chat template
  included) and handed to llama.cpp as token ids, so both decode identical inputs;
* the same thread count as torch uses in the benchmark process;
* greedy (llama.cpp's ``temp=0`` is argmax), the same ``max_new_tokens``, stopping
  at the same EOS ids;
* time from the prompt's submission to its last token, prefill included, prompts
  one after another after one warm-up prompt, as `tools/bench.py` times its methods.

llama-cpp-python decodes one sequence at a time, so the anchor is a batch-1 number.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


@dataclass(frozen=True)
class AnchorRun:
    """What one anchor run produced: per-prompt new tokens and the time they took."""

    token_ids: list[list[int]]  # generated tokens per prompt (EOS excluded)
    seconds: float  # wall time over all prompts, prefill included, warm-up excluded
    version: str  # llama-cpp-python's version
    threads: int

    @property
    def tokens(self) -> int:
        return sum(len(t) for t in self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def llamacpp_missing() -> str | None:
    """None when llama-cpp-python imports, else the one line that says how to get it."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (build it once with `bash run.sh anchors`, ~5 min on 2 cores)"
    return None


def run_llamacpp(
    gguf_path: Path,
    prompt_token_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    threads: int,
    context_length: int = 2048,
) -> AnchorRun:
    """Greedy-decode every prompt with llama.cpp; the first prompt is also run once as warm-up."""
    import llama_cpp

    if not prompt_token_ids:
        raise ValueError("prompt_token_ids: at least one prompt is needed")
    model = llama_cpp.Llama(
        model_path=str(gguf_path), n_ctx=context_length, n_threads=threads, n_threads_batch=threads,
        n_batch=512, verbose=False,
    )
    stop = set(eos_token_ids)
    _decode(model, prompt_token_ids[0], 8, stop)  # warm-up: page in weights, size buffers
    start = time.perf_counter()
    outputs = [_decode(model, prompt, max_new_tokens, stop) for prompt in prompt_token_ids]
    seconds = time.perf_counter() - start
    return AnchorRun(outputs, seconds, llama_cpp.__version__, threads)


def _decode(model, prompt: Sequence[int], max_new_tokens: int, stop: set[int]) -> list[int]:
    """Greedy tokens after ``prompt`` until an EOS id or ``max_new_tokens``."""
    out: list[int] = []
    for token in model.generate(list(prompt), top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                repeat_penalty=1.0, reset=True):
        if token in stop:
            break
        out.append(token)
        if len(out) >= max_new_tokens:
            break
    return out
