"""The llama.cpp anchor: llama.cpp (llama-cpp-python) on the same GGUF, the speed a
CPU user gets today.  It is an optional extra (`bash run.sh anchors` builds
llama-cpp-python from source with flags chosen from this CPU's ISA; see
`tools/install_anchors.sh`).

Fairness rules (each one a way the comparison could silently favour one side):

* the same GGUF file the native engine converts its weights from;
* the same prompt tokens: prompts are tokenized once by our tokenizer (chat template
  included) and handed to llama.cpp as token ids, so both decode identical inputs;
* the same thread count as torch uses in the benchmark process;
* greedy (llama.cpp's ``temp=0`` is argmax), the same ``max_new_tokens``, stopping
  at the same EOS ids;
* time from the prompt's submission to its last token, prefill included, prompts
  one after another, warmed up and timed in the same interleaved rounds as the
  native methods (``rounds.py``).

llama-cpp-python decodes one sequence at a time, so the anchor is a batch-1 number,
and it runs on the CPU: with ``--device cuda`` it is skipped.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sglang_cast.models.loader import embedded_gguf_path

from .methods import ANCHOR, Method
from .rounds import Round


def llamacpp_missing() -> str | None:
    """None when llama-cpp-python imports, else the one line that says how to get it."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (build it once with `bash run.sh anchors`, ~5 min on 2 cores)"
    return None


def anchor_model(methods: list[Method], model_path: str | None, on_cuda: bool = False,
                 ) -> tuple[Path | None, list[Method]]:
    """The GGUF the anchor runs, or drop the anchor with one line saying why it cannot run."""
    if not any(m.is_anchor for m in methods):
        return None, methods
    gguf = embedded_gguf_path() if model_path is None else Path(model_path)
    reason = "it runs on the CPU; --device is cuda" if on_cuda else llamacpp_missing()
    if reason is None and gguf.suffix != ".gguf":
        reason = f"the target {model_path} is not a GGUF file"
    if reason is None:
        return gguf, methods
    print(f"skipping {ANCHOR}: {reason}", file=sys.stderr)
    return None, [m for m in methods if not m.is_anchor]


class LlamaCppRunner:
    """Greedy llama.cpp decoding of ``prompt_token_ids``, loaded once: a `rounds.Runner`."""

    def __init__(self, gguf_path: Path, prompt_token_ids: Sequence[Sequence[int]], max_new_tokens: int,
                 eos_token_ids: Sequence[int], threads: int, context_length: int = 2048) -> None:
        import llama_cpp

        if not prompt_token_ids:
            raise ValueError("prompt_token_ids: at least one prompt is needed")
        self.model = llama_cpp.Llama(model_path=str(gguf_path), n_ctx=context_length, n_threads=threads,
                                     n_threads_batch=threads, n_batch=512, verbose=False)
        self.prompts = [list(p) for p in prompt_token_ids]
        self.max_new_tokens = max_new_tokens
        self.stop = set(eos_token_ids)
        self.note = (f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, {gguf_path.name} in its own "
                     f"kernels, {threads} threads, batch 1")

    def warm_up(self) -> None:
        self.run()

    def run(self) -> Round:
        start = time.perf_counter()
        outputs = [self.decode(prompt) for prompt in self.prompts]
        return Round(outputs, time.perf_counter() - start, [])

    def decode(self, prompt: list[int]) -> list[int]:
        """Greedy tokens after ``prompt`` until an EOS id or ``max_new_tokens``."""
        out: list[int] = []
        for token in self.model.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                         reset=True):
            if token in self.stop:
                break
            out.append(token)
            if len(out) >= self.max_new_tokens:
                break
        return out


def anchor_summary(done: Round) -> dict:
    """The anchor's record fields: one token per iteration, no draft."""
    return {"tokens": done.tokens, "seconds": done.seconds, "iterations": done.tokens, "tau": 1.0,
            "mean_verified_tokens": 0.0, "mean_depth": 0.0, "draft_ms": 0.0,
            "verify_ms": 1000 * done.seconds / max(done.tokens, 1), "host_ms": 0.0}
