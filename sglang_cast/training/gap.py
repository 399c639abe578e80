"""Where a draft head loses acceptance: teacher-forced accuracy on benchmark answers
versus on its own held-out training data.

Chain α on a benchmark can be low for two reasons: the head fits the training data
poorly, or the benchmark's answers look unlike the training answers.  This measures
both with the training code's own scoring (`ttt.ttt_loss`, 4 unrolled steps):

- per benchmark: the target's greedy answers to the first N first-turn prompts, with
  their features captured as in training, and the share of answer tokens outside the
  draft vocabulary (guaranteed misses);
- per training source: the held-out sequences of the training split.

If the benchmark's step-0 accuracy matches the engine's chain α at depth 1 and sits
well below the held-out accuracy, the gap is the data's, not the engine's.

Usage: ``python tools/draft_gap.py --head DIR --work-dir DIR`` (about 4 minutes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from sglang_cast.models import load_draft

from .benchmark_filter import first_turns
from .config import DEFAULT_BENCHMARKS, EVAL_DATASETS, TrainConfig
from .features import FeatureSet, collate
from .responses import greedy_with_features
from .target import Target, chat_ids
from .train import split
from .ttt import StepStats, ttt_loss
from .vocab import target_to_draft
from .workspace import META, read_jsonl, write_jsonl


def score(draft, fs: FeatureSet, indices: list[int], to_draft: torch.Tensor, steps: int) -> dict:
    """Top-1 accuracy per unrolled step and the out-of-vocabulary share of answer tokens."""
    stats = StepStats.zeros(steps)
    with torch.no_grad():
        for start in range(0, len(indices), 8):
            stats.add(ttt_loss(draft, collate(fs, indices[start : start + 8], to_draft), steps, 1.0)[1])
    answers = [torch.from_numpy(fs.sequences[i].token_ids[fs.sequences[i].response_start :]) for i in indices]
    outside = sum(int((to_draft[a] < 0).sum()) for a in answers)
    tokens = sum(len(a) for a in answers)
    return {"sequences": len(indices), "answer_tokens": tokens, "scored_positions": stats.scored,
            "step_accuracy": stats.accuracy(), "outside_draft_vocab": outside / max(tokens, 1)}


def benchmark_answers(target: Target, name: str, benchmark_dir: Path, prompts: int, tokens: int,
                      cache: Path) -> Path:
    """One answer shard in the responses stage's format, cached under ``cache``."""
    out = cache / f"{name}-{prompts}x{tokens}"
    marker = out / "shard_00000.jsonl"
    if not marker.is_file():
        out.mkdir(parents=True, exist_ok=True)
        encoded = [chat_ids(target.tokenizer, p) for p in first_turns(benchmark_dir / f"{name}.jsonl", prompts)]
        answers = sorted(greedy_with_features(target.model, encoded, tokens, len(encoded),
                                                   target.feature_layers, target.eos_token_ids),
                         key=lambda a: a.index)
        np.save(out / "shard_00000.npy", np.concatenate([a.features for a in answers]))
        write_jsonl(marker, [{"prompt_ids": encoded[a.index], "output_ids": a.output_ids,
                              "truncated": a.truncated} for a in answers])
    return out


def gap_report(target: Target, head: Path, work_dir: Path, benchmark_dir: Path, prompts: int,
               tokens: int) -> dict[str, dict]:
    """`score` per benchmark and per training source of the held-out split."""
    draft = load_draft(head, target.model, "cpu", torch.float32)
    to_draft = target_to_draft(torch.load(work_dir / "vocab" / "vocab.pt")["t2d"])
    settings = json.loads((work_dir / "train" / META).read_text())["settings"]
    train_cfg = TrainConfig(**settings["train"])
    report = {}
    for name in EVAL_DATASETS:
        shard = benchmark_answers(target, name, benchmark_dir, prompts, tokens, work_dir / "gap")
        fs = FeatureSet.open(shard, train_cfg.max_seq_len)
        report[name] = score(draft, fs, list(range(len(fs))), to_draft, train_cfg.ttt_steps)
    fs = FeatureSet.open(work_dir / "responses", train_cfg.max_seq_len)
    held_out = split(fs, train_cfg, settings["seed"]).val
    sources = [row["source"] for row in read_jsonl(work_dir / "prompts" / "prompts.jsonl")]
    for source in sorted(set(sources)):
        indices = [i for i in held_out if sources[i] == source]
        if indices:
            report[f"held_out_{source}"] = score(draft, fs, indices, to_draft, train_cfg.ttt_steps)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", type=Path, required=True, help="exported head (config.json + model.safetensors)")
    parser.add_argument("--work-dir", type=Path, required=True,
                        help="train_draft work dir the head was trained in (its prompts, responses, vocab and "
                             "train stages); benchmark answers are cached in <work-dir>/gap")
    parser.add_argument("--benchmark-dir", type=Path, default=DEFAULT_BENCHMARKS, help="benchmark *.jsonl")
    parser.add_argument("--prompts", type=int, default=20, help="first-turn prompts per benchmark (20)")
    parser.add_argument("--tokens", type=int, default=128, help="greedy answer tokens per prompt (128)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    report = gap_report(Target.embedded(), args.head, args.work_dir.expanduser(), args.benchmark_dir, args.prompts,
                        args.tokens)
    print(json.dumps(report, indent=1))
