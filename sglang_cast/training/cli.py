"""Command line of the training pipeline: every flag maps onto one `PipelineConfig` field.

Usage: ``python -m sglang_cast.training`` (or ``python tools/train_draft.py``): a full run
at default sizes (~3 h on 2 cores), or ``--quick`` for a smoke test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from sglang_cast.hardware import cpu_flags
from sglang_cast.models.weights import DraftFormat, WeightFormat, WeightFormatError

from .config import PipelineConfig
from .pipeline import STOPS, run_pipeline
from .target import Target
from .workspace import META

# flag -> (config section or None for the top level, field, type, help)
FLAGS: dict[str, tuple[str | None, str, type, str]] = {
    "--work-dir": (None, "work_dir", Path, "where every stage writes its output; delete a stage's directory "
                                         "to redo it (default ~/.cache/sglang_cast/train_draft, quick: .../quick)"),
    "--output": (None, "output_dir", Path, "directory that receives model.safetensors + config.json (default: "
                                           "the shipped sglang_cast/assets/smollm2-135m-eagle; quick: <work>/head)"),
    "--benchmark-dir": (None, "benchmark_dir", Path, "benchmark *.jsonl files: excluded from training data and "
                                                     "used for evaluation (default datasets/)"),
    "--seed": (None, "seed", int, "seed of every random choice: prompt sampling, data split, batch order (0)"),
    "--threads": (None, "threads", int, "torch CPU threads (2)"),
    "--init-head": (None, "init_head", Path, "continue training this exported head (a directory with "
                                             "model.safetensors) on this run's data, keeping its draft vocab; "
                                             "give the run a new --seed so its prompts are new (none: fresh head)"),
    "--target-format": (None, "target_format", str, "how the target's linears are stored while it answers the "
                                                    "training prompts (responses stage only), e.g. int4vnni/int8vnni: "
                                                    "the served format's own answers and features (fp32)"),
    "--self-instruct": ("data", "self_instruct", int, "meta-prompts asking the target to invent a request (1500)"),
    "--doc-prompts": ("data", "doc_prompts", int, "requests built from stdlib docstrings (1000)"),
    "--template-prompts": ("data", "template_prompts", int, "requests from our chat and arithmetic templates "
                                                            "over 243 topics (1500)"),
    "--task-prompts": ("data", "task_prompts", int, "multi-part task requests: extraction from a passage, "
                                                    "constrained writing, puzzles, code in 8 languages and SQL, "
                                                    "concepts, roleplay (0)"),
    "--request-tokens": ("data", "request_tokens", int, "token limit of one invented request (64)"),
    "--response-tokens": ("data", "response_tokens", int, "token limit of one target answer (256)"),
    "--max-prompt-tokens": ("data", "max_prompt_tokens", int, "drop prompts longer than this (256)"),
    "--gen-batch": ("data", "gen_batch", int, "sequences decoded together while generating data (64)"),
    "--shard-prompts": ("data", "shard_prompts", int, "prompts per resumable generation shard (256)"),
    "--max-answers": ("data", "max_answers", int, "answer only the first N kept (shuffled) prompts; 0 = all "
                                                  "(0)"),
    "--soft-top-k": ("data", "soft_top_k", int, "also keep the target's k likeliest tokens at every answer "
                                                "token, for --soft-labels; 0 = off (0)"),
    "--draft-vocab": ("train", "draft_vocab", int, "draft vocabulary size: most frequent answer tokens; "
                                                   "--init-head keeps its own (8192)"),
    "--vocab-swap": ("train", "vocab_swap", int, "with --init-head: swap up to N of the head's draft tokens "
                                                 "that this run's answers use least for more frequent answer "
                                                 "tokens outside its vocab; kept tokens keep their trained "
                                                 "LM-head rows, new ones start from the mean row (0)"),
    "--vocab-grow": ("train", "vocab_grow", int, "with --init-head: add up to N of this run's commonest answer "
                                                 "tokens outside the head's draft vocab to it (a larger LM "
                                                 "head), each starting from the mean row (0)"),
    "--ttt-steps": ("train", "ttt_steps", int, "unrolled draft steps per position in training (4)"),
    "--step-decay": ("train", "step_decay", float, "loss weight decay per unrolled step (0.8)"),
    "--epochs": ("train", "epochs", int, "passes over the training sequences (2)"),
    "--max-steps": ("train", "max_steps", int, "stop after this many optimiser steps; 0 = epochs decide (0)"),
    "--batch-tokens": ("train", "batch_tokens", int, "padded tokens per optimiser step (2048)"),
    "--max-seq-len": ("train", "max_seq_len", int, "prompt + answer tokens trained on per sequence (512)"),
    "--soft-labels": ("train", "soft_labels", float, "weight in [0, 1] of the cross-entropy against the target's "
                                                     "top-k distribution (needs --soft-top-k answers); the rest "
                                                     "weighs its argmax token (0)"),
    "--lm-head-basis": ("train", "lm_head_basis", float, "> 0: train the head's LM head as W + B·P, B the target's "
                                                         "own output rows of the draft tokens (scaled to this L2 "
                                                         "norm / sqrt(hidden); frozen), P shared and trained from "
                                                         "zero, so rare tokens learn through it; folded into one "
                                                         "matrix at export (0: off)"),
    "--lr": ("train", "lr", float, "peak AdamW learning rate (1e-3)"),
    "--warmup-steps": ("train", "warmup_steps", int, "linear warm-up steps (50)"),
    "--checkpoint-every": ("train", "checkpoint_every", int, "checkpoint + validation interval in steps (200)"),
    "--eval-prompts": ("eval", "prompts", int, "first-turn prompts per benchmark (mt_bench, humaneval) (40)"),
    "--eval-tokens": ("eval", "max_new_tokens", int, "new tokens per evaluation prompt (128)"),
}


def parse_args(argv: Sequence[str] | None = None) -> tuple[PipelineConfig, argparse.Namespace]:
    """The run's `PipelineConfig`: ``--quick`` or the defaults, then each flag given;
    a bad value exits with an error naming the flag."""
    parser = argparse.ArgumentParser(
        description="Build data, extract target features, train, export and evaluate the EAGLE-3 draft head "
                    "for the embedded SmolLM2-135M-Instruct. Resumable: rerun the same command after an "
                    "interruption. Numbers in parentheses are the full-run defaults.")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes end to end (< 2 min): a smoke test whose head is not useful; explicit "
                             "flags still override its sizes")
    parser.add_argument("--until", choices=STOPS, default="eval",
                        help="stop after this stage: responses (data only: a held-out set for tools/draft_gap.py, "
                             "or data several recipes' runs share), train (export the head, no evaluation), eval "
                             "(everything; default)")
    for flag, (_, _, kind, text) in FLAGS.items():
        parser.add_argument(flag, type=kind, default=None, help=text)
    parser.add_argument("--replay-responses", type=Path, action="append", default=[], metavar="DIR",
                        help="train on this earlier run's answers too: its <work-dir>/responses (a finished stage "
                             "built with another --seed); repeat for several runs; the schedule's epochs then cover "
                             "them all, so cap the compute with --max-steps (none)")
    parser.add_argument("--bf16-autocast", action="store_true",
                        help="train with the head's matmuls in bf16 (CPU autocast; weights, optimiser and the "
                             "held-out validation stay fp32): the train stage in 0.73x the fp32 time on an AVX-512 "
                             "EPYC, held-out accuracy level; needs AVX512-BF16 or AMX (off)")
    args = parser.parse_args(argv)
    cfg = PipelineConfig.quick() if args.quick else PipelineConfig()
    for flag, (section, name, _, _) in FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is None:
            continue
        if isinstance(value, (int, float)) and value < 0:
            parser.error(f"{flag}: must be >= 0, got {value}")
        if section is None:
            cfg = dataclasses.replace(cfg, **{name: value})
        else:
            cfg = dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section), **{name: value})})
    try:
        target_format = WeightFormat.parse(cfg.target_format)
    except WeightFormatError as err:
        parser.error(f"--target-format: {err.reason}")
    if target_format.draft != DraftFormat():
        parser.error(f"--target-format: {cfg.target_format!r} names a draft part ('+...'); it sets the target's "
                     "linears only")
    reason = target_format.unavailable_reason()
    if reason is not None:
        parser.error(f"--target-format: {cfg.target_format} cannot run on this CPU: {reason}")
    cfg = dataclasses.replace(cfg, target_format=str(target_format))
    if cfg.train.soft_labels > 1:
        parser.error(f"--soft-labels: must be in [0, 1], got {cfg.train.soft_labels}")
    if cfg.init_head is not None and not (cfg.init_head.expanduser() / "model.safetensors").is_file():
        parser.error(f"--init-head: no model.safetensors in {cfg.init_head}")
    for flag, value in (("--vocab-swap", cfg.train.vocab_swap), ("--vocab-grow", cfg.train.vocab_grow)):
        if value and cfg.init_head is None:
            parser.error(f"{flag}: needs --init-head (a fresh head picks its whole vocab from the answers; "
                         "size it with --draft-vocab)")
    for stage in args.replay_responses:
        problem = replay_problem(stage.expanduser(), cfg)
        if problem is not None:
            parser.error(f"--replay-responses: {stage} {problem}")
    if args.bf16_autocast and not {"avx512_bf16", "amx_bf16"} & cpu_flags():
        parser.error("--bf16-autocast: this CPU has neither AVX512-BF16 nor AMX, so bf16 matmuls would run slower "
                     "than fp32 ones; train without it")
    replay = tuple(str(stage.expanduser().resolve()) for stage in args.replay_responses)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, replay=replay,
                                                             bf16_autocast=args.bf16_autocast))
    return cfg, args


def replay_problem(stage: Path, cfg: PipelineConfig) -> str | None:
    """Why an earlier run's responses stage cannot be trained on beside this run's answers
    (None when it can): it must be finished, another seed's prompts, and carry the soft
    labels this run trains on with the same k."""
    if not (stage / META).is_file() or not any(stage.glob("shard_*.jsonl")):
        return "is not a finished responses stage (no meta.json or no shard_*.jsonl): give an earlier run's " \
               "<work-dir>/responses"
    settings = json.loads((stage / META).read_text())["settings"]
    if settings.get("seed") == cfg.seed:
        return f"was built with this run's --seed {cfg.seed}: its prompts are this run's own"
    k = settings.get("soft_top_k", 0)
    if cfg.train.soft_labels and k != cfg.data.soft_top_k:
        return (f"holds soft labels of the top {k} tokens, this run's --soft-top-k is {cfg.data.soft_top_k} "
                "(--soft-labels needs the same k in every answer shard)")
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the flags, load the embedded target and run every stage."""
    cfg, args = parse_args(argv)
    answerer = None if cfg.target_format == "fp32" else Target.embedded(cfg.target_format)
    run_pipeline(Target.embedded(), cfg, args.until, answerer)
