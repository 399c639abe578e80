"""The eval stage: chain acceptance α and tree τ of the exported head, measured by the
engine's own greedy decoding."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sglang_cast.cast import SamplingParams, TreeShape, committed_tokens
from sglang_cast.engine import StepLog
from sglang_cast.models import load_draft
from sglang_cast.models.weights import DraftFormat, apply_draft_format

from .benchmark_filter import first_turns
from .config import EVAL_DATASETS, EvalConfig, PipelineConfig
from .target import Target, chat_ids
from .workspace import write_json


def acceptance(accepted: Sequence[int], depth: int) -> dict[str, Any]:
    """Chain statistics from per-iteration accepted counts of a top-1 chain of ``depth``.

    α is the conditional acceptance of a draft token whose parent was accepted: each
    iteration tries ``min(a + 1, depth)`` tokens and ``a`` succeed.  ``per_depth[d]`` is
    the same ratio for depth ``d + 1`` alone.
    """
    tried = sum(min(a + 1, depth) for a in accepted)
    per_depth = []
    for d in range(1, depth + 1):
        reached = sum(a >= d - 1 for a in accepted)
        per_depth.append(sum(a >= d for a in accepted) / max(reached, 1))
    return {"alpha": sum(accepted) / max(tried, 1), "alpha_per_depth": per_depth}


def evaluate_mode(target: Target, head: Path, prompts: list[list[int]], shape: TreeShape, max_new: int,
                  desc: str, lookup_depth: int = 0, draft_format: DraftFormat = DraftFormat()) -> dict[str, Any]:
    """Greedy batch-1 decoding of every prompt (trees with a ``lookup_depth``-token
    prompt-lookup branch when > 0; the head's linears in ``draft_format``); τ and
    per-iteration accepted counts."""
    weight = target.model.embed_tokens.weight  # the head runs where and in the dtype the target does
    draft = apply_draft_format(load_draft(head, target.model, str(weight.device), weight.dtype), draft_format)
    engine = target.engine(draft, shape, 1, max(len(p) for p in prompts) + max_new, lookup_depth)
    params = SamplingParams(max_new_tokens=max_new)
    outputs = []
    log = StepLog()
    began = time.time()
    for ids in tqdm(prompts, desc=desc, unit="prompt"):
        outputs.append(engine.generate([ids], params, on_step=log)[0].token_ids)
    seconds = time.time() - began
    accepted = [a for record in log.records for a in record.accepted]
    committed = committed_tokens(accepted)
    return {"tau": committed / max(len(accepted), 1), "iterations": len(accepted), "accepted": accepted,
            "generated_tokens": sum(len(o) for o in outputs), "seconds": seconds, "outputs": outputs}


def benchmark_prompts(target: Target, benchmark_dir: Path, name: str, count: int) -> list[list[int]]:
    """The first ``count`` first turns of benchmark ``name``, in the target's chat template."""
    return [chat_ids(target.tokenizer, p) for p in first_turns(benchmark_dir / f"{name}.jsonl", count)]


def evaluate_head(target: Target, head: Path, prompts: list[list[int]], ec: EvalConfig,
                  run_file: Callable[[str], Path], desc: str) -> dict[str, Any]:
    """Tree τ (EAGLE-2's tree, ``ec.tree``) and chain α of ``head`` on ``prompts``; each
    mode's run is kept in ``run_file(mode)`` and reused when it exists (resumable)."""
    chain = TreeShape(top_k=1, max_depth=ec.chain_depth, num_verify_tokens=ec.chain_depth + 1)
    runs = {}
    for mode, shape in (("chain", chain), ("tree", ec.tree)):
        path = run_file(mode)
        if not path.is_file():
            write_json(path, evaluate_mode(target, head, prompts, shape, ec.max_new_tokens, f"{desc} {mode}"))
        runs[mode] = json.loads(path.read_text())
    return {
        "tree_tau": runs["tree"]["tau"],
        "chain_tau": runs["chain"]["tau"],
        **acceptance(runs["chain"]["accepted"], ec.chain_depth),
        "tree_tokens_per_second": runs["tree"]["generated_tokens"] / max(runs["tree"]["seconds"], 1e-9),
        "chain_tokens_per_second": runs["chain"]["generated_tokens"] / max(runs["chain"]["seconds"], 1e-9),
        "outputs_identical": sum(a == b for a, b in zip(runs["tree"]["outputs"], runs["chain"]["outputs"])),
        "prompts": len(prompts),
    }


def build_eval(target: Target, cfg: PipelineConfig, head: Path, out: Path) -> dict[str, Any]:
    """Tree τ and chain α per benchmark; one resumable file per (benchmark, mode)."""
    ec = cfg.eval
    summary: dict[str, Any] = {"prompts_per_benchmark": ec.prompts, "max_new_tokens": ec.max_new_tokens}
    for name in EVAL_DATASETS:
        prompts = benchmark_prompts(target, cfg.benchmark_dir, name, ec.prompts)
        summary[name] = evaluate_head(target, head, prompts, ec, lambda mode: out / f"{name}.{mode}.json",
                                      f"eval {name}")
    return summary
