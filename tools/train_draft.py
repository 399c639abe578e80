"""Train the shipped EAGLE-3 draft head for the embedded SmolLM2-135M-Instruct on a CPU.

One command runs every stage; each writes its output into ``<work-dir>/<stage>.partial``
and renames it to ``<work-dir>/<stage>`` when complete, so an interrupted run resumes
where it stopped (long stages also resume inside: generation and feature shards,
training checkpoints, per-benchmark evaluation files) and a finished stage is skipped.

    self_instruct  the target invents user requests for itself (chat template, sampling)
    prompts        + requests built from stdlib docstrings, from our templates and (with
                   ``--task-prompts``) multi-part task requests; dedupe; benchmark filter
    responses      the target's greedy answers (continuous batching) and, captured in the
                   same forwards, its residual streams entering layers (2, 15, 27), fp16
    vocab          EAGLE-3 draft vocab: the most frequent response tokens (d2t / t2d),
                   or the vocab of ``--init-head`` when continuing an earlier head
    train          EAGLE-3 training-time test: K unrolled draft steps per position,
                   from a fresh head or from ``--init-head``
    export         fp16 safetensors + config.json in the public EAGLE-3 layout
    eval           chain (top-1) acceptance α and EAGLE-2 tree τ on mt_bench / humaneval

Why training-time test: at inference only the first draft step sees target features;
deeper tree levels feed the draft its own previous hidden state and attend to draft
entries of their ancestors (`sglang_cast/engine/draft_expander.py`).  `ttt_forward`
reproduces exactly those inputs and that attention pattern for every position at
once, so the head is trained on the distribution it is used on
(`tests/test_train_draft.py` checks it against the engine's own expander).

Why ``--init-head``: a working session here is shorter than generating and training on
all the data a good head needs, and its machine starts empty.  The shipped head is the
state that survives, so a later run answers *new* prompts (another ``--seed``) and
continues training that head on them: each run adds data without redoing the last one's.

Usage: ``python tools/train_draft.py`` (full run at default sizes, ~3 h on 2 cores) or ``--quick``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from safetensors.torch import load_file
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import draft_data as data  # noqa: E402
import draft_tasks  # noqa: E402

from sglang_cast.cast import CostModel, PolicySettings, SamplingParams, TreeShape, make_policy  # noqa: E402
from sglang_cast.engine import Engine  # noqa: E402
from sglang_cast.models import (  # noqa: E402
    DraftConfig,
    Eagle3Draft,
    LlamaModel,
    ModelConfig,
    eagle3_feature_layers,
    load_draft,
    load_target,
    save_draft,
)
from sglang_cast.models.attention import tree_attention  # noqa: E402
from sglang_cast.models.loader import check_state_dict  # noqa: E402
from sglang_cast.models.llama import apply_rope, rope_cos_sin  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "sglang_cast" / "assets" / "smollm2-135m-eagle"
DEFAULT_BENCHMARKS = REPO.parent / "shared" / "datasets"
DEFAULT_WORK_DIR = Path("~/.cache/sglang_cast/train_draft")
EVAL_DATASETS = ("mt_bench", "humaneval")
MAX_HEAD_BYTES = 20_000_000


# ------------------------------------------------------------------- configs

@dataclass(frozen=True)
class DataConfig:
    """How much data to build.  Defaults take about 1 h 40 min of generation on 2 idle
    cores (run 3 measured 148 answer tokens/s at batch 64, prefill included).

    Self-instruct and template requests outnumber documentation requests because
    their chat-style prompts (writing, roleplay, advice, reasoning) are closer to
    mt_bench, the headline benchmark; the documentation requests bring the code-heavy
    answers humaneval needs.
    """

    self_instruct: int = 1500  # meta-prompts: one invented user request each
    doc_prompts: int = 1000  # requests built from stdlib docstrings
    template_prompts: int = 1500  # requests from our templates over many topics
    task_prompts: int = 0  # multi-part task requests (tools/draft_tasks.py), first used in run 7
    request_tokens: int = 64  # token limit of one invented request
    request_temperature: float = 0.9  # sampling keeps self-instruct requests diverse
    response_tokens: int = 256  # token limit of one target answer (greedy)
    max_prompt_tokens: int = 256  # longer prompts are dropped (counted as too_long)
    gen_batch: int = 64  # sequences decoded together (64 measured 1.4x faster than 32, as fast as 128)
    shard_prompts: int = 256  # prompts per resumable generation shard
    max_answers: int = 0  # answer only the first N kept prompts (they are shuffled); 0 = all
    soft_top_k: int = 0  # keep the target's k likeliest tokens per answer token (soft labels); 0 = off


@dataclass(frozen=True)
class TrainConfig:
    """The head and its optimisation (EAGLE-3 recipe scaled to a CPU budget)."""

    draft_vocab: int = 8192
    vocab_swap: int = 0  # with --init-head: refresh up to this many of its draft tokens for this run's data
    ttt_steps: int = 4  # unrolled draft steps per position (training-time test)
    step_decay: float = 0.8  # loss weight of step j is decay**j
    epochs: int = 2
    max_steps: int = 0  # 0: epochs decide; otherwise stop after this many optimiser steps
    batch_tokens: int = 2048  # padded tokens per optimiser step
    max_seq_len: int = 512  # prompt + response tokens kept per sequence
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine schedule floor
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    soft_labels: float = 0.0  # weight of the soft-label (distillation) loss; 1 - it weighs the argmax label
    val_fraction: float = 0.02  # held-out sequences for the per-step accuracy log
    checkpoint_every: int = 200


@dataclass(frozen=True)
class EvalConfig:
    """Acceptance measurement: batch 1, greedy, first turn of each benchmark record."""

    prompts: int = 40  # per benchmark (mt_bench and humaneval have 80 each)
    max_new_tokens: int = 128
    tree: TreeShape = TreeShape(top_k=10, max_depth=6, num_verify_tokens=60)  # EAGLE-2 default
    chain_depth: int = 6  # top-1 chain for α


@dataclass(frozen=True)
class PipelineConfig:
    work_dir: Path = DEFAULT_WORK_DIR
    output_dir: Path = DEFAULT_OUTPUT
    benchmark_dir: Path = DEFAULT_BENCHMARKS
    seed: int = 0
    threads: int = 2
    init_head: Path | None = None  # continue training this exported head (its vocab and weights)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    @classmethod
    def quick(cls) -> PipelineConfig:
        """End to end in well under 2 minutes: a smoke test, not a useful head."""
        return cls(
            work_dir=DEFAULT_WORK_DIR / "quick",
            output_dir=DEFAULT_WORK_DIR / "quick" / "head",
            data=DataConfig(self_instruct=8, doc_prompts=8, template_prompts=8, request_tokens=24, response_tokens=24,
                            gen_batch=8, shard_prompts=8),
            train=TrainConfig(draft_vocab=1024, ttt_steps=3, epochs=100, max_steps=6, batch_tokens=512,
                              max_seq_len=256, warmup_steps=2, checkpoint_every=3, val_fraction=0.1),
            eval=EvalConfig(prompts=1, max_new_tokens=8),
        )


# ----------------------------------------------------------------- workspace

META = "meta.json"


def write_json(path: Path, payload: Any) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


# Config fields added after run 4 are recorded in a stage's settings only when set, so work
# dirs built before they existed stay valid (a changed record would discard their
# checkpoints).  `settings_of` applies this to the fields below; the data stages' settings
# are spelled out in `run_pipeline`, which adds `task_prompts`, `soft_top_k`, `init_head` and
# `vocab_swap` the same way.
LATE_FIELDS = ("soft_labels", "vocab_swap")


def settings_of(config: Any) -> dict[str, Any]:
    """A JSON-comparable record of a config dataclass."""
    record = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    return {key: value for key, value in record.items() if not (key in LATE_FIELDS and not value)}


def run_stage(work_dir: Path, name: str, settings: dict[str, Any], build: Callable[[Path], dict[str, Any]]) -> Path:
    """Run ``build(partial_dir)`` unless ``<work_dir>/<name>`` is already complete.

    The finished directory appears by one rename, so it is either complete or absent.
    A partial directory from an interrupted run is reused (stages resume inside it)
    unless it was started with other settings; a finished stage built with other
    settings is an error rather than silently reused.
    """
    final, partial = work_dir / name, work_dir / f"{name}.partial"
    if (final / META).is_file():
        stored = json.loads((final / META).read_text())["settings"]
        if stored != settings:
            raise SystemExit(f"stage {name!r} in {final} was built with other settings; "
                             f"delete that directory (and later stages) or use another --work-dir")
        print(f"[{name}] already complete, skipped", flush=True)
        return final
    started_file = partial / "settings.json"
    if partial.is_dir() and (not started_file.is_file() or json.loads(started_file.read_text()) != settings):
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    write_json(started_file, settings)
    print(f"[{name}] running", flush=True)
    began = time.time()
    summary = build(partial)
    seconds = time.time() - began
    write_json(partial / META, {"settings": settings, "summary": summary, "seconds": seconds})
    os.replace(partial, final)
    print(f"[{name}] done in {seconds:.0f} s: {json.dumps(summary)[:300]}", flush=True)
    return final


def stage_summary(work_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((work_dir / name / META).read_text())


# ------------------------------------------------------------------ the target

@dataclass
class Target:
    """The frozen target model and what every stage needs to drive it."""

    model: LlamaModel
    tokenizer: Any
    eos_token_ids: tuple[int, ...]

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def feature_layers(self) -> tuple[int, int, int]:
        return eagle3_feature_layers(self.config.num_layers)

    def engine(self, draft: Eagle3Draft | None, shape: TreeShape, max_batch: int, context: int) -> Engine:
        policy = "vanilla" if draft is None else "eagle2"
        settings = PolicySettings.single(CostModel.linear(1.0, 0.0), shape=shape)
        return Engine(self.model, self.tokenizer, draft, make_policy(policy, settings), max_batch_size=max_batch,
                      context_length=context, eos_token_ids=self.eos_token_ids,
                      eagle3_layers=self.feature_layers if draft is not None else ())


# ------------------------------------------------------------ data stages

def build_self_instruct(target: Target, cfg: PipelineConfig, out: Path) -> dict[str, Any]:
    """The target invents user requests for itself; resumable per shard."""
    metas = data.self_instruct_requests(cfg.data.self_instruct, cfg.seed)
    rows = []
    for gen in _generate_requests(target, metas, out, cfg.data, cfg.seed):
        text = target.tokenizer.decode(_strip_eos(gen.output_ids, target.eos_token_ids), skip_special_tokens=True)
        request = data.clean_request(text, gen.truncated)
        if request is not None:
            rows.append({"prompt": request})
    write_jsonl(out / "requests.jsonl", rows)
    return {"meta_prompts": len(metas), "usable_requests": len(rows)}


def build_prompts(target: Target, cfg: PipelineConfig, self_instruct_dir: Path, out: Path) -> dict[str, Any]:
    """Self-instruct, documentation, template and task requests, deduplicated and
    benchmark-filtered.

    Self-instruct and documentation requests are shuffled together; template requests
    (added in run 4) follow them, then task requests (run 7), so the first prompts, and
    the answer shards already generated for them, are the same without the later sources.
    """
    invented = [row["prompt"] for row in data.read_jsonl(self_instruct_dir / "requests.jsonl")]
    documented = data.doc_prompts(data.stdlib_doc_items(), cfg.data.doc_prompts, cfg.seed)
    templated = data.template_prompts(cfg.data.template_prompts, cfg.seed)
    tasks = draft_tasks.task_prompts(cfg.data.task_prompts, cfg.seed)
    benchmark = data.BenchmarkFilter.from_prompts(data.load_benchmark_prompts(cfg.benchmark_dir))
    candidates = [(p, "self_instruct") for p in invented] + [(p, "docs") for p in documented]
    random.Random(cfg.seed).shuffle(candidates)
    candidates += [(p, "templates") for p in templated] + [(p, "tasks") for p in tasks]
    source: dict[str, str] = {}
    for prompt, name in candidates:
        source.setdefault(prompt, name)
    kept, report = data.filter_prompts(
        (p for p, _ in candidates), benchmark,
        fits=lambda p: len(data.chat_ids(target.tokenizer, p)) <= cfg.data.max_prompt_tokens)
    write_jsonl(out / "prompts.jsonl", [{"prompt": p, "source": source[p]} for p in kept])
    names = ("self_instruct", "docs", "templates", "tasks")
    by_source = {name: sum(source[p] == name for p in kept) for name in names}
    counts = (len(invented), len(documented), len(templated), len(tasks))
    return {"candidates": dict(zip(names, counts)), "kept_by_source": by_source, **report.to_dict()}


def build_responses(target: Target, cfg: PipelineConfig, prompts_dir: Path, out: Path) -> dict[str, Any]:
    """The target's greedy answer to every kept prompt, with the target features of
    every token; resumable per shard (``shard_N.npy`` features, with ``--soft-top-k``
    ``shard_N.soft.npz`` soft labels, then ``shard_N.jsonl`` ids, whose presence marks
    the shard complete)."""
    prompts = [data.chat_ids(target.tokenizer, row["prompt"]) for row in data.read_jsonl(prompts_dir / "prompts.jsonl")]
    if cfg.data.max_answers:
        prompts = prompts[: cfg.data.max_answers]
    size = cfg.data.shard_prompts
    done = sum(1 for start in range(0, len(prompts), size) if (out / f"shard_{start // size:05d}.jsonl").is_file())
    with tqdm(total=len(prompts), initial=min(done * size, len(prompts)), desc="responses", unit="answer") as bar:
        for start in range(0, len(prompts), size):
            marker = out / f"shard_{start // size:05d}.jsonl"
            if marker.is_file():
                continue
            chunk = prompts[start : start + size]
            answers = []
            for answer in data.greedy_with_features(target.model, chunk, cfg.data.response_tokens, cfg.data.gen_batch,
                                                    target.feature_layers, target.eos_token_ids,
                                                    cfg.data.soft_top_k):
                answers.append(answer)
                bar.update(1)
            answers.sort(key=lambda answer: answer.index)
            tmp = marker.with_name(marker.stem + ".tmp.npy")
            np.save(tmp, np.concatenate([a.features for a in answers]))
            os.replace(tmp, marker.with_suffix(".npy"))
            if cfg.data.soft_top_k:
                with open(tmp, "wb") as handle:
                    np.savez(handle, logprobs=np.concatenate([a.top_logprobs for a in answers]),
                             ids=np.concatenate([a.top_ids for a in answers]))
                os.replace(tmp, soft_path(marker))
            write_jsonl(marker, [{"prompt_ids": chunk[a.index], "output_ids": a.output_ids, "truncated": a.truncated}
                                 for a in answers])
    gens = read_generations(out)
    return {"sequences": len(gens), "prompt_tokens": sum(len(g.prompt_ids) for g in gens),
            "response_tokens": sum(len(g.output_ids) for g in gens), "truncated": sum(g.truncated for g in gens),
            "feature_bytes": sum(p.stat().st_size for p in out.glob("shard_*.npy"))}


def soft_path(shard_jsonl: Path) -> Path:
    return shard_jsonl.with_suffix(".soft.npz")


def _strip_eos(ids: list[int], eos: tuple[int, ...]) -> list[int]:
    return ids[:-1] if ids and ids[-1] in eos else ids


def _generate_requests(target: Target, prompts: list[str], out: Path, cfg: DataConfig,
                       seed: int) -> list[data.Generation]:
    """Sampled generation with the vanilla engine in shards of ``cfg.shard_prompts``; a
    shard file is written atomically once complete and read back on a rerun."""
    encoded = [data.chat_ids(target.tokenizer, p) for p in prompts]
    context = max((len(ids) for ids in encoded), default=1) + cfg.request_tokens
    engine = target.engine(None, TreeShape(), cfg.gen_batch, context)
    results: list[data.Generation] = []
    starts = range(0, len(encoded), cfg.shard_prompts)
    for shard, start in enumerate(tqdm(starts, desc="self-instruct shards", unit="shard")):
        path = out / f"shard_{shard:05d}.jsonl"
        if not path.is_file():
            batch = encoded[start : start + cfg.shard_prompts]
            params = [SamplingParams(temperature=cfg.request_temperature, top_p=0.95,
                                     max_new_tokens=cfg.request_tokens, seed=seed * 1_000_003 + start + i)
                      for i in range(len(batch))]
            gens = data.generate(engine, batch, params, desc=f"self-instruct shard {shard}")
            write_jsonl(path, [dataclasses.asdict(g) for g in gens])
        results += [data.Generation(**row) for row in data.read_jsonl(path)]
    return results


def read_generations(stage_dir: Path) -> list[data.Generation]:
    return [data.Generation(**row) for path in sorted(stage_dir.glob("shard_*.jsonl"))
            for row in data.read_jsonl(path)]


def build_vocab(target: Target, cfg: PipelineConfig, responses_dir: Path, out: Path) -> dict[str, Any]:
    """The draft vocab: the ``draft_vocab`` most frequent tokens of the target's answers,
    or, when continuing ``--init-head``, that head's vocab (its LM-head rows are trained
    for exactly those tokens) with up to ``vocab_swap`` of its rarest tokens swapped for
    these answers' frequent ones; the summary says how much of these answers it covers.

    The initial head's weights are copied into this stage too (``init_head.pt``), so
    training reads the head as it was when the run began even if the export later
    overwrites the directory it came from (the default output is the shipped head)."""
    counts = torch.zeros(target.config.vocab_size, dtype=torch.long)
    for gen in read_generations(responses_dir):
        counts += torch.bincount(torch.tensor(gen.output_ids, dtype=torch.long), minlength=counts.numel())
    total = max(int(counts.sum()), 1)
    summary: dict[str, Any] = {"from_head": None if cfg.init_head is None else str(cfg.init_head)}
    if cfg.init_head is None:
        d2t, t2d = data.select_draft_vocab(counts, cfg.train.draft_vocab)
    else:
        head = head_state(cfg.init_head, target)
        d2t, t2d, rows = data.swap_draft_vocab(counts, head["t2d"], cfg.train.vocab_swap, target.eos_token_ids)
        swapped = int((rows < 0).sum())
        summary |= {"head_vocab_coverage": float(counts[head["t2d"]].sum()) / total, "swapped_tokens": swapped}
        head = with_vocab(head, d2t, t2d, rows)
        torch.save(head, out / "init_head.pt")
    torch.save({"d2t": d2t, "t2d": t2d}, out / "vocab.pt")
    return {"draft_vocab": d2t.numel(), **summary, "distinct_response_tokens": int((counts > 0).sum()),
            "response_token_coverage": float(counts[t2d].sum()) / total}


def with_vocab(head: dict[str, Tensor], d2t: Tensor, t2d: Tensor, rows: Tensor) -> dict[str, Tensor]:
    """``head`` moved onto a swapped draft vocab: each kept token keeps its trained
    LM-head row (``rows`` maps new draft ids to old ones); a token that came in starts
    from the mean row, i.e. with an average logit, so it is rarely proposed before
    training has seen it."""
    weight = head["lm_head.weight"]
    moved = weight[rows.clamp(min=0)]
    moved[rows < 0] = weight.mean(dim=0)
    return {**head, "lm_head.weight": moved, "d2t": d2t.to(head["d2t"].dtype), "t2d": t2d}


def head_state(path: Path, target: Target) -> dict[str, Tensor]:
    """An exported EAGLE-3 head's tensors, checked against the target, in float32."""
    path = path.expanduser()
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise SystemExit(f"--init-head: {weights} not found; pass a directory written by this tool's export")
    state = load_file(weights)
    if "d2t" not in state or "t2d" not in state:
        raise SystemExit(f"--init-head: {path} is not an EAGLE-3 head with a draft vocab (no d2t / t2d)")
    if state["t2d"].numel() != target.config.vocab_size:
        raise SystemExit(f"--init-head: {path} was trained for a target vocab of {state['t2d'].numel()} tokens, "
                         f"this target has {target.config.vocab_size}")
    try:  # the head training would build for this target and vocab must take these tensors as they are
        check_state_dict(new_draft(target, state["d2t"], state["t2d"]), state, weights)
    except ValueError as err:
        raise SystemExit(f"--init-head: {err}") from None
    return {key: value.float() if value.is_floating_point() else value for key, value in state.items()}


# ------------------------------------------------------------------ features

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
        features, sequences, soft = [], [], []
        for shard, path in enumerate(sorted(stage_dir.glob("shard_*.jsonl"))):
            features.append(np.load(path.with_suffix(".npy"), mmap_mode="r"))
            if soft_path(path).is_file():
                with np.load(soft_path(path)) as arrays:
                    soft.append((arrays["logprobs"], arrays["ids"]))
            row = soft_row = 0
            for record in data.read_jsonl(path):
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
        positions = torch.arange(self.targets.shape[1])
        return self.targets & (positions >= step)


def collate(fs: FeatureSet, indices: Sequence[int], to_draft: Tensor) -> Batch:
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


# -------------------------------------------------------------- the draft head

def new_draft(target: Target, d2t: Tensor, t2d: Tensor) -> Eagle3Draft:
    """A fresh EAGLE-3 head with PyTorch's default initialisation.

    Copying the target's last layer, final norm and embedding rows into the head was
    measured against this on the same data (80 steps): it reached a lower
    cross-entropy but a worse top-1 accuracy at every unrolled step (0.16 vs 0.19 at
    step 0, equal LR), and top-1 is what acceptance counts; see docs/draft_head.md.
    """
    layer = ModelConfig.from_hf({**target.config.to_hf(), "num_hidden_layers": 1})
    draft = Eagle3Draft(DraftConfig("eagle3", layer, fc_bias=False, draft_vocab_size=d2t.numel()), target.model)
    draft.d2t.copy_(d2t)
    draft.t2d.copy_(t2d)
    return draft


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


def _split_heads(x: Tensor, heads: int) -> Tensor:
    b, n, _ = x.shape
    return x.view(b, n, heads, -1).transpose(1, 2)


def ttt_forward(draft: Eagle3Draft, input_ids: Tensor, features: Tensor, steps: int) -> list[Tensor]:
    """Pre-norm hidden states ``[B, T, h]`` of ``steps`` unrolled draft steps.

    Step 0 is teacher-forced (``fc`` of the target features); step ``s > 0`` feeds at
    position ``t`` the draft's own step ``s - 1`` output at ``t - 1``, as a depth-``s``
    tree node receives its parent's hidden state.  Reuses the head's modules and
    weights; only the attention is spelled out, with `ttt_attention_mask`.
    """
    layer, attn = draft.midlayer, draft.midlayer.self_attn
    b, n = input_ids.shape
    positions = torch.arange(n, device=input_ids.device).expand(b, n)
    embeds = layer.input_layernorm(draft.embed(input_ids))
    cos, sin = rope_cos_sin(positions, draft.config.layer, embeds.dtype)
    hidden = draft.fc(features)
    keys: list[Tensor] = []
    values: list[Tensor] = []
    outputs: list[Tensor] = []
    for step in range(steps):
        if step:
            hidden = F.pad(outputs[-1][:, :-1], (0, 0, 1, 0))
        x = torch.cat((embeds, layer.hidden_norm(hidden)), dim=-1)
        q = apply_rope(_split_heads(attn.q_proj(x), attn.num_heads), cos, sin)
        keys.append(apply_rope(_split_heads(attn.k_proj(x), attn.num_kv_heads), cos, sin))
        values.append(_split_heads(attn.v_proj(x), attn.num_kv_heads))
        mask = ttt_attention_mask(n, step, input_ids.device)
        out = tree_attention(q, torch.cat(keys, dim=2), torch.cat(values, dim=2), mask)
        h = hidden + attn.o_proj(out.transpose(1, 2).reshape(b, n, -1))
        outputs.append(h + layer.mlp(layer.post_attention_layernorm(h)))
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
    saving on long prompts.
    """
    outputs = ttt_forward(draft, batch.input_ids, batch.features, steps)
    total = batch.features.new_zeros(())
    stats = StepStats.zeros(steps)
    for step, hidden in enumerate(outputs):
        mask = batch.step_mask(step)
        logits = draft.lm_head(draft.norm(hidden[mask]))
        labels = batch.labels[mask]
        known = labels >= 0
        loss = F.cross_entropy(logits[known], labels[known]) if bool(known.any()) else logits.sum() * 0.0
        objective = loss
        if soft_weight:
            objective = (1 - soft_weight) * loss + soft_weight * soft_cross_entropy(
                logits, batch.soft_ids[mask], batch.soft_probs[mask])
        total = total + decay**step * objective
        stats.loss[step] = loss.item() * int(known.sum())
        stats.known[step] = int(known.sum())
        stats.correct[step] = int(((logits.argmax(-1) == labels) & known).sum())
        stats.scored[step] = int(mask.sum())
    return total, stats


def soft_cross_entropy(logits: Tensor, ids: Tensor, probs: Tensor) -> Tensor:
    """Mean over rows of ``-sum_i p_i log q(ids_i)``, with ``p`` renormalised over the
    entries inside the draft vocab (``ids >= 0``); rows with none are skipped."""
    probs = probs * (ids >= 0)
    mass = probs.sum(-1, keepdim=True)
    rows = mass.squeeze(-1) > 0
    if not bool(rows.any()):
        return logits.sum() * 0.0
    log_q = torch.log_softmax(logits[rows], dim=-1).gather(-1, ids[rows].clamp(min=0))
    return -((probs[rows] / mass[rows]) * log_q).sum(-1).mean()


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(total - cfg.warmup_steps, 1)
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


# ------------------------------------------------------------------ training

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
    order = list(range(len(fs)))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(cfg.val_fraction * len(order))) if len(order) > 1 else 0
    lengths = [fs.length(i) for i in range(len(fs))]
    return Schedule(sorted(order[n_val:]), sorted(order[:n_val]), lengths, cfg.batch_tokens, seed)


@torch.no_grad()
def validate(draft: Eagle3Draft, fs: FeatureSet, schedule: Schedule, to_draft: Tensor, cfg: TrainConfig) -> StepStats:
    stats = StepStats.zeros(cfg.ttt_steps)
    for indices in schedule.val_batches():
        stats.add(ttt_loss(draft, collate(fs, indices, to_draft), cfg.ttt_steps, cfg.step_decay)[1])
    return stats


def build_train(target: Target, cfg: PipelineConfig, vocab_dir: Path, responses_dir: Path, out: Path) -> dict[str, Any]:
    """AdamW + cosine schedule over TTT batches, from a fresh head or ``--init-head``;
    checkpoints every ``checkpoint_every`` steps."""
    tc = cfg.train
    torch.manual_seed(cfg.seed)  # the head's random initialisation
    vocab = torch.load(vocab_dir / "vocab.pt")
    draft = new_draft(target, vocab["d2t"], vocab["t2d"])
    if (vocab_dir / "init_head.pt").is_file():
        draft.load_state_dict(torch.load(vocab_dir / "init_head.pt"), strict=True)
    to_draft = data.target_to_draft(vocab["t2d"])
    fs = FeatureSet.open(responses_dir, tc.max_seq_len)
    if tc.soft_labels and fs.soft is None:
        raise SystemExit("--soft-labels needs soft labels in every answer shard: generate the answers with "
                         "--soft-top-k > 0 (a new --work-dir, or delete its responses stage and later ones)")
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
    torch.save(draft.state_dict(), out / "draft.pt")
    last = json.loads(log.read_text().splitlines()[-1])
    return {"steps": state["step"], "steps_per_epoch": per_epoch, "train_seconds": state["seconds"],
            "scored_tokens": state["tokens"], "train_sequences": len(schedule.train),
            "val_sequences": len(schedule.val), "val_step_accuracy": last["val_acc"],
            "val_step_loss": last["val_loss"],
            "tokens_per_second": state["tokens"] / max(state["seconds"], 1e-9)}


# --------------------------------------------------------------- export / eval

def export_head(target: Target, vocab_dir: Path, train_dir: Path, output: Path) -> int:
    """Write the trained head as fp16 safetensors + config.json, replacing ``output``
    in one rename; fp16 keeps the 8k-vocab head under the 20 MB asset budget."""
    vocab = torch.load(vocab_dir / "vocab.pt")
    draft = new_draft(target, vocab["d2t"], vocab["t2d"])
    state = torch.load(train_dir / "draft.pt")
    draft.load_state_dict({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, assign=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_draft(draft, tmp)
    size = sum(p.stat().st_size for p in tmp.iterdir())
    if size > MAX_HEAD_BYTES:
        raise SystemExit(f"exported head is {size} bytes, over the {MAX_HEAD_BYTES} byte budget: lower --draft-vocab")
    shutil.rmtree(output, ignore_errors=True)
    os.replace(tmp, output)
    print(f"[export] {output} ({size / 1e6:.1f} MB)", flush=True)
    return size


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
                  desc: str) -> dict[str, Any]:
    """Greedy batch-1 decoding of every prompt; τ and per-iteration accepted counts."""
    draft = load_draft(head, target.model, "cpu", torch.float32)
    engine = target.engine(draft, shape, 1, max(len(p) for p in prompts) + max_new)
    params = SamplingParams(max_new_tokens=max_new)
    outputs = []
    began = time.time()
    for ids in tqdm(prompts, desc=desc, unit="prompt"):
        outputs.append(engine.generate([ids], params)[0].token_ids)
    seconds = time.time() - began
    accepted = [a for record in engine.history for a in record.accepted]
    committed = sum(accepted) + len(accepted)
    return {"tau": committed / max(len(accepted), 1), "iterations": len(accepted), "accepted": accepted,
            "generated_tokens": sum(len(o) for o in outputs), "seconds": seconds, "outputs": outputs}


def build_eval(target: Target, cfg: PipelineConfig, head: Path, out: Path) -> dict[str, Any]:
    """Tree τ and chain α per benchmark; one resumable file per (benchmark, mode)."""
    ec = cfg.eval
    chain = TreeShape(top_k=1, max_depth=ec.chain_depth, num_verify_tokens=ec.chain_depth + 1)
    summary: dict[str, Any] = {"prompts_per_benchmark": ec.prompts, "max_new_tokens": ec.max_new_tokens}
    for name in EVAL_DATASETS:
        texts = data.first_turns(cfg.benchmark_dir / f"{name}.jsonl", ec.prompts)
        prompts = [data.chat_ids(target.tokenizer, p) for p in texts]
        runs = {}
        for mode, shape in (("chain", chain), ("tree", ec.tree)):
            path = out / f"{name}.{mode}.json"
            if not path.is_file():
                write_json(path, evaluate_mode(target, head, prompts, shape, ec.max_new_tokens, f"eval {name} {mode}"))
            runs[mode] = json.loads(path.read_text())
        summary[name] = {
            "tree_tau": runs["tree"]["tau"],
            "chain_tau": runs["chain"]["tau"],
            **acceptance(runs["chain"]["accepted"], ec.chain_depth),
            "tree_tokens_per_second": runs["tree"]["generated_tokens"] / runs["tree"]["seconds"],
            "chain_tokens_per_second": runs["chain"]["generated_tokens"] / runs["chain"]["seconds"],
            "outputs_identical": sum(a == b for a, b in zip(runs["tree"]["outputs"], runs["chain"]["outputs"])),
            "prompts": len(prompts),
        }
    return summary


# ------------------------------------------------------------------ pipeline

def run_pipeline(target: Target, cfg: PipelineConfig) -> dict[str, Any]:
    """Every stage in order (skipping completed ones); returns the report it writes."""
    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    work = cfg.work_dir.expanduser()
    work.mkdir(parents=True, exist_ok=True)
    d = cfg.data
    # Each stage's settings are its own parameters plus its input stage's settings, so
    # changing a late parameter never invalidates earlier work.  Batch sizes are left
    # out: they change the order of floating-point sums, not what a stage means.
    s_requests = {"seed": cfg.seed, "self_instruct": d.self_instruct, "request_tokens": d.request_tokens,
                  "request_temperature": d.request_temperature, "shard_prompts": d.shard_prompts}
    s_prompts = {**s_requests, "doc_prompts": d.doc_prompts, "template_prompts": d.template_prompts,
                 "max_prompt_tokens": d.max_prompt_tokens, "benchmarks": str(cfg.benchmark_dir)}
    if d.task_prompts:
        s_prompts["task_prompts"] = d.task_prompts
    s_responses = {**s_prompts, "response_tokens": d.response_tokens, "max_answers": d.max_answers}
    if d.soft_top_k:
        s_responses["soft_top_k"] = d.soft_top_k
    s_vocab = {**s_responses, "draft_vocab": cfg.train.draft_vocab}
    if cfg.init_head is not None:
        s_vocab["init_head"] = str(cfg.init_head)
    if cfg.train.vocab_swap:
        s_vocab["vocab_swap"] = cfg.train.vocab_swap
    s_train = {**s_vocab, "train": settings_of(cfg.train)}
    s_eval = {**s_train, "eval": settings_of(cfg.eval)}
    requests = run_stage(work, "self_instruct", s_requests, lambda out: build_self_instruct(target, cfg, out))
    prompts = run_stage(work, "prompts", s_prompts, lambda out: build_prompts(target, cfg, requests, out))
    responses = run_stage(work, "responses", s_responses, lambda out: build_responses(target, cfg, prompts, out))
    vocab = run_stage(work, "vocab", s_vocab, lambda out: build_vocab(target, cfg, responses, out))
    trained = run_stage(work, "train", s_train, lambda out: build_train(target, cfg, vocab, responses, out))
    output = cfg.output_dir.expanduser()
    size = export_head(target, vocab, trained, output)
    run_stage(work, "eval", s_eval, lambda out: build_eval(target, cfg, output, out))
    stages = ("self_instruct", "prompts", "responses", "vocab", "train", "eval")
    report = {name: stage_summary(work, name) for name in stages}
    report["export"] = {"path": str(cfg.output_dir), "bytes": size}
    write_json(work / "report.json", report)
    print_report(report)
    return report


def print_report(report: dict[str, Any]) -> None:
    for name, entry in report.items():
        seconds = entry.get("seconds")
        timing = f" ({seconds / 60:.1f} min)" if seconds is not None else ""
        print(f"{name}{timing}: {json.dumps(entry.get('summary', entry))[:600]}")


# ----------------------------------------------------------------------- CLI

# flag -> (config section or None for the top level, field, type, help)
FLAGS: dict[str, tuple[str | None, str, type, str]] = {
    "--work-dir": (None, "work_dir", Path, "where every stage writes its output; delete a stage's directory "
                                         "to redo it (default ~/.cache/sglang_cast/train_draft, quick: .../quick)"),
    "--output": (None, "output_dir", Path, "directory that receives model.safetensors + config.json (default: "
                                           "the shipped sglang_cast/assets/smollm2-135m-eagle; quick: <work>/head)"),
    "--benchmark-dir": (None, "benchmark_dir", Path, "benchmark *.jsonl files: excluded from training data and "
                                                     "used for evaluation (default ../shared/datasets)"),
    "--seed": (None, "seed", int, "seed of every random choice: prompt sampling, data split, batch order (0)"),
    "--threads": (None, "threads", int, "torch CPU threads (2)"),
    "--init-head": (None, "init_head", Path, "continue training this exported head (a directory with "
                                             "model.safetensors) on this run's data, keeping its draft vocab; "
                                             "give the run a new --seed so its prompts are new (none: fresh head)"),
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
    "--ttt-steps": ("train", "ttt_steps", int, "unrolled draft steps per position in training (4)"),
    "--step-decay": ("train", "step_decay", float, "loss weight decay per unrolled step (0.8)"),
    "--epochs": ("train", "epochs", int, "passes over the training sequences (2)"),
    "--max-steps": ("train", "max_steps", int, "stop after this many optimiser steps; 0 = epochs decide (0)"),
    "--batch-tokens": ("train", "batch_tokens", int, "padded tokens per optimiser step (2048)"),
    "--max-seq-len": ("train", "max_seq_len", int, "prompt + answer tokens trained on per sequence (512)"),
    "--soft-labels": ("train", "soft_labels", float, "weight in [0, 1] of the cross-entropy against the target's "
                                                     "top-k distribution (needs --soft-top-k answers); the rest "
                                                     "weighs its argmax token (0)"),
    "--lr": ("train", "lr", float, "peak AdamW learning rate (1e-3)"),
    "--warmup-steps": ("train", "warmup_steps", int, "linear warm-up steps (50)"),
    "--checkpoint-every": ("train", "checkpoint_every", int, "checkpoint + validation interval in steps (200)"),
    "--eval-prompts": ("eval", "prompts", int, "first-turn prompts per benchmark (mt_bench, humaneval) (40)"),
    "--eval-tokens": ("eval", "max_new_tokens", int, "new tokens per evaluation prompt (128)"),
}


def parse_args(argv: Sequence[str] | None = None) -> tuple[PipelineConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description="Build data, extract target features, train, export and evaluate the EAGLE-3 draft head "
                    "for the embedded SmolLM2-135M-Instruct. Resumable: rerun the same command after an "
                    "interruption. Numbers in parentheses are the full-run defaults.")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes end to end (< 2 min): a smoke test whose head is not useful; explicit "
                             "flags still override its sizes")
    for flag, (_, _, kind, text) in FLAGS.items():
        parser.add_argument(flag, type=kind, default=None, help=text)
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
    if cfg.train.soft_labels > 1:
        parser.error(f"--soft-labels: must be in [0, 1], got {cfg.train.soft_labels}")
    if cfg.init_head is not None and not (cfg.init_head.expanduser() / "model.safetensors").is_file():
        parser.error(f"--init-head: no model.safetensors in {cfg.init_head}")
    if cfg.train.vocab_swap and cfg.init_head is None:
        parser.error("--vocab-swap: needs --init-head (a fresh head picks its whole vocab from the answers)")
    return cfg, args


def main(argv: Sequence[str] | None = None) -> None:
    cfg, _ = parse_args(argv)
    model, config, tokenizer = load_target(None, "cpu", torch.float32)
    run_pipeline(Target(model, tokenizer, config.eos_token_ids), cfg)


if __name__ == "__main__":
    main()
