"""Training sequences from the responses stage: memory-mapped feature shards, soft
labels, and padded batches in the pairing the engine uses."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .responses import soft_path
from .workspace import read_jsonl


@dataclass(frozen=True)
class TrainSequence:
    token_ids: np.ndarray  # prompt + answer, cut to max_seq_len
    response_start: int
    shard: int
    row: int  # row of its first token in the shard's feature matrix
    soft_row: int  # row of its first answer token in the shard's soft labels


@dataclass(frozen=True)
class FeatureSet:
    """The responses stage's sequences, memory-mapped fp16 feature shards and, when
    every shard has them, soft labels."""

    features: list[np.ndarray]  # per shard: [rows, 3 * hidden] float16
    sequences: list[TrainSequence]
    soft: list[tuple[np.ndarray, np.ndarray]] | None = None  # per shard: log-probs [rows, k], target ids

    @classmethod
    def open(cls, stage_dir: Path, max_len: int) -> FeatureSet:
        return cls.open_many([stage_dir], max_len)

    @classmethod
    def open_many(cls, stage_dirs: Sequence[Path], max_len: int) -> FeatureSet:
        """The shards of every responses stage in ``stage_dirs``, in that order (a run's own
        answers, then the earlier runs' it replays)."""
        features, sequences, soft = [], [], []
        paths = [path for stage_dir in stage_dirs for path in sorted(stage_dir.glob("shard_*.jsonl"))]
        for shard, path in enumerate(paths):
            features.append(np.load(path.with_suffix(".npy"), mmap_mode="r"))
            if soft_path(path).is_file():
                with np.load(soft_path(path)) as arrays:
                    soft.append((arrays["logprobs"], arrays["ids"]))
            row = soft_row = 0
            for record in read_jsonl(path):
                ids = record["prompt_ids"] + record["output_ids"]
                sequences.append(TrainSequence(np.array(ids[:max_len], dtype=np.int64), len(record["prompt_ids"]),
                                               shard, row, soft_row))
                row += len(ids) - 1
                soft_row += len(record["output_ids"])
        return cls(features, sequences, soft if len(soft) == len(features) else None)

    def __len__(self) -> int:
        return len(self.sequences)

    def length(self, i: int) -> int:
        return len(self.sequences[i].token_ids)


@dataclass(frozen=True)
class Batch:
    """Draft position ``t`` pairs the target feature of token ``t`` with token ``t + 1``
    and is trained to predict token ``t + 2`` (the engine's pairing; see eagle.py)."""

    input_ids: Tensor  # [B, T] token t + 1
    features: Tensor  # [B, T, 3h] float32
    labels: Tensor  # [B, T] draft id of token t + 2; -1 outside the draft vocab
    targets: Tensor  # [B, T] bool: token t + 2 exists and belongs to the response
    soft_ids: Tensor | None = None  # [B, T, k] draft ids of the target's k likeliest tokens t + 2; -1 outside
    soft_probs: Tensor | None = None  # [B, T, k] their target probabilities

    def step_mask(self, step: int) -> Tensor:
        """Positions step ``step`` (0-based) is scored on: it needs ``step`` earlier positions."""
        positions = torch.arange(self.targets.shape[1], device=self.targets.device)
        return self.targets & (positions >= step)


def collate(fs: FeatureSet, indices: Sequence[int], to_draft: Tensor) -> Batch:
    """The sequences ``indices`` of ``fs`` as one right-padded `Batch`; ``to_draft``
    maps target ids to draft ids (-1 outside the draft vocab)."""
    span = max(fs.length(i) for i in indices) - 1
    input_ids = torch.zeros(len(indices), span, dtype=torch.long)
    features = torch.zeros(len(indices), span, fs.features[0].shape[1])
    labels = torch.full((len(indices), span), -1, dtype=torch.long)
    targets = torch.zeros(len(indices), span, dtype=torch.bool)
    for row, i in enumerate(indices):
        seq = fs.sequences[i]
        tokens, n = torch.from_numpy(seq.token_ids), fs.length(i)
        input_ids[row, : n - 1] = tokens[1:]
        rows = fs.features[seq.shard][seq.row : seq.row + n - 1]
        features[row, : n - 1] = torch.from_numpy(np.asarray(rows, dtype=np.float32))
        labels[row, : n - 2] = to_draft[tokens[2:]]
        targets[row, max(seq.response_start - 2, 0) : n - 2] = True
    if fs.soft is None:
        return Batch(input_ids, features, labels, targets)
    k = fs.soft[0][1].shape[1]
    soft_ids = torch.full((len(indices), span, k), -1, dtype=torch.long)
    soft_probs = torch.zeros(len(indices), span, k)
    for row, i in enumerate(indices):
        # Position t predicts token t + 2, answer token j = t + 2 - response_start.
        seq, n = fs.sequences[i], fs.length(i)
        first = max(seq.response_start - 2, 0)
        if first >= n - 2:
            continue
        start = seq.soft_row + first + 2 - seq.response_start
        logprobs, ids = (array[start : start + n - 2 - first] for array in fs.soft[seq.shard])
        soft_ids[row, first : n - 2] = to_draft[torch.from_numpy(ids.astype(np.int64))]
        soft_probs[row, first : n - 2] = torch.from_numpy(logprobs.astype(np.float32)).exp()
    return Batch(input_ids, features, labels, targets, soft_ids, soft_probs)


def make_batches(lengths: Sequence[int], batch_tokens: int, rng: random.Random) -> list[list[int]]:
    """Length-sorted batches of at most ``batch_tokens`` padded tokens, in shuffled order.

    Sorting with random tie-breaks keeps padding small while varying batch membership
    from epoch to epoch.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > batch_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches
