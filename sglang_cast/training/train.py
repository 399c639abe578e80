"""The train stage: AdamW with a cosine schedule over training-time-test batches,
resumable from its checkpoints."""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from sglang_cast.models import Eagle3Draft

from .config import PipelineConfig, TrainConfig
from .features import FeatureSet, collate, make_batches
from .head import new_draft
from .lm_head_basis import folded_state, with_basis
from .target import Target
from .ttt import StepStats, ttt_loss
from .vocab import target_to_draft


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(total - cfg.warmup_steps, 1)
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


@dataclass(frozen=True)
class Schedule:
    """Deterministic batch order: epoch ``e`` shuffles with ``seed`` and ``e``, so a
    resumed run replays exactly the batches it would have seen."""

    train: list[int]
    val: list[int]
    lengths: list[int]
    batch_tokens: int
    seed: int

    def epoch(self, epoch: int) -> list[list[int]]:
        rng = random.Random(self.seed * 7919 + epoch)
        batches = make_batches([self.lengths[i] for i in self.train], self.batch_tokens, rng)
        return [[self.train[i] for i in batch] for batch in batches]

    def val_batches(self) -> list[list[int]]:
        batches = make_batches([self.lengths[i] for i in self.val], self.batch_tokens, random.Random(0))
        return [[self.val[i] for i in batch] for batch in batches]


def split(fs: FeatureSet, cfg: TrainConfig, seed: int) -> Schedule:
    """A seeded hold-out of ``val_fraction`` of the sequences (at least one, when there are two)."""
    order = list(range(len(fs)))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(cfg.val_fraction * len(order))) if len(order) > 1 else 0
    lengths = [fs.length(i) for i in range(len(fs))]
    return Schedule(sorted(order[n_val:]), sorted(order[:n_val]), lengths, cfg.batch_tokens, seed)


@torch.no_grad()
def validate(draft: Eagle3Draft, fs: FeatureSet, schedule: Schedule, to_draft: Tensor, cfg: TrainConfig) -> StepStats:
    """Per-step loss and top-1 accuracy on the held-out sequences."""
    stats = StepStats.zeros(cfg.ttt_steps)
    for indices in schedule.val_batches():
        stats.add(ttt_loss(draft, collate(fs, indices, to_draft), cfg.ttt_steps, cfg.step_decay)[1])
    return stats


def training_precision(tc: TrainConfig) -> torch.autocast:
    """bf16 autocast around the training forward when ``tc.bf16_autocast`` (its backward runs in the
    dtypes the forward chose): the head's matmuls are most of a step, and run 36's train stage took 0.73x
    its fp32 time on the AVX-512 EPYC with the held-out accuracy level
    (docs/results/2026-12-07_bf16_training_avx512.md). Weights, AdamW state and `validate` stay fp32."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=tc.bf16_autocast)


def build_train(target: Target, cfg: PipelineConfig, vocab_dir: Path, responses_dir: Path, out: Path) -> dict[str, Any]:
    """AdamW + cosine schedule over TTT batches, from a fresh head or ``--init-head``;
    checkpoints every ``checkpoint_every`` steps."""
    tc = cfg.train
    torch.manual_seed(cfg.seed)  # the head's random initialisation
    vocab = torch.load(vocab_dir / "vocab.pt")
    draft = new_draft(target, vocab["d2t"], vocab["t2d"])
    if (vocab_dir / "init_head.pt").is_file():
        draft.load_state_dict(torch.load(vocab_dir / "init_head.pt"), strict=True)
    if tc.lm_head_basis:
        with_basis(draft, target.model.lm_head_weight, tc.lm_head_basis)
    to_draft = target_to_draft(vocab["t2d"])
    fs = FeatureSet.open_many([responses_dir, *map(Path, tc.replay)], tc.max_seq_len)
    if tc.soft_labels and fs.soft is None:
        raise SystemExit("--soft-labels needs soft labels in every answer shard: generate the answers with "
                         "--soft-top-k > 0 (a new --work-dir, or delete its responses stage and later ones)")
    own_shards = len(list(responses_dir.glob("shard_*.jsonl")))
    schedule = split(fs, tc, cfg.seed)
    per_epoch = len(schedule.epoch(0))
    total = min(tc.epochs * per_epoch, tc.max_steps or tc.epochs * per_epoch)
    params = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=tc.lr, betas=(0.9, 0.95), weight_decay=tc.weight_decay)
    state = {"step": 0, "seconds": 0.0, "tokens": 0}
    checkpoint = out / "checkpoint.pt"
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False)
        draft.load_state_dict(saved["draft"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        print(f"[train] resumed from step {state['step']}", flush=True)
    log = out / "log.jsonl"
    draft.train()
    window = StepStats.zeros(tc.ttt_steps)
    bar = tqdm(total=total, initial=state["step"], desc="train", unit="step")
    epoch, batches = -1, []
    while state["step"] < total:
        if state["step"] // per_epoch != epoch:
            epoch = state["step"] // per_epoch
            batches = schedule.epoch(epoch)
        batch = collate(fs, batches[state["step"] % per_epoch], to_draft)
        began = time.time()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(state["step"], total, tc)
        with training_precision(tc):
            loss, stats = ttt_loss(draft, batch, tc.ttt_steps, tc.step_decay, tc.soft_labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
        optimizer.step()
        state["step"] += 1
        state["seconds"] += time.time() - began
        state["tokens"] += int(batch.targets.sum())
        window.add(stats)
        bar.update(1)
        bar.set_postfix(ce=" ".join(f"{x:.2f}" for x in window.mean_loss()),
                        acc=" ".join(f"{a:.2f}" for a in window.accuracy()),
                        tok_s=f"{state['tokens'] / state['seconds']:.0f}")
        if state["step"] % tc.checkpoint_every == 0 or state["step"] == total:
            val = validate(draft, fs, schedule, to_draft, tc) if schedule.val else StepStats.zeros(tc.ttt_steps)
            with log.open("a") as handle:
                handle.write(json.dumps({"step": state["step"], "lr": lr_at(state["step"] - 1, total, tc),
                                         "train_loss": window.mean_loss(), "train_acc": window.accuracy(),
                                         "val_loss": val.mean_loss(), "val_acc": val.accuracy(),
                                         "seconds": state["seconds"]}) + "\n")
            window = StepStats.zeros(tc.ttt_steps)
            torch.save({"draft": draft.state_dict(), "optimizer": optimizer.state_dict(), "state": state},
                       checkpoint.with_name("checkpoint.tmp"))
            os.replace(checkpoint.with_name("checkpoint.tmp"), checkpoint)
            draft.train()
    bar.close()
    torch.save(folded_state(draft), out / "draft.pt")
    last = json.loads(log.read_text().splitlines()[-1])
    return {"steps": state["step"], "steps_per_epoch": per_epoch, "train_seconds": state["seconds"],
            "scored_tokens": state["tokens"], "train_sequences": len(schedule.train),
            "replayed_sequences": sum(seq.shard >= own_shards for seq in fs.sequences),
            "val_sequences": len(schedule.val), "val_step_accuracy": last["val_acc"],
            "val_step_loss": last["val_loss"],
            "tokens_per_second": state["tokens"] / max(state["seconds"], 1e-9)}
