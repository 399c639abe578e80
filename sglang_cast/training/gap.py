"""Where a draft head loses acceptance: teacher-forced accuracy on benchmark answers,
per benchmark category, against data like its training data that it never saw.

Chain α on a benchmark can be low because the head fits its kind of data poorly, or
because the benchmark's answers look unlike that data.  This measures both with the
training code's own scoring (`ttt.ttt_loss`, unrolled steps 0–3 by default; a head
trained with more steps is judged on as many with ``--ttt-steps``):

- per benchmark and category (mt_bench's writing, roleplay, …): the target's greedy
  answers to the first-turn prompts, their features captured as in training; the
  share of answer tokens outside the draft vocabulary (guaranteed misses) and the
  commonest of them;
- per training source (self-instruct, docs, templates, tasks) of a held-out work dir:
  a ``train_draft --until responses`` run with a seed the head was not trained on
  (every sequence counts), or the work dir the head was trained in (its validation
  split only);
- with ``chain_depth``: the engine's own α at each depth of a top-1 chain, per
  category (`evaluate.evaluate_mode`), the number the tree's acceptance is made of;
- per benchmark, how often the draft's top 1, 2, 4 and 10 hold the target's token, by
  the target's own confidence in it (what a chain can accept against what a tree can);
- what a draft vocabulary of N tokens chosen from the held-out answers would cover of
  each benchmark's answers (the vocabulary-size question without training a head);
- with ``tau_prompts``: τ with EAGLE-2's tree on the first held-out prompts, the
  engine's own measure on data that is neither training nor benchmark (what a recipe
  A/B is judged on, beside the held-out accuracy);
- with ``benchmark_tau``: τ with EAGLE-2's tree on the first prompts of each
  benchmark, the eval stage's procedure, so a shipped head and a new one are judged by
  one command on one machine.

Usage: ``python tools/draft_gap.py --head DIR --held-out WORK_DIR`` (``--help``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sglang_cast.cast import EAGLE2_SHAPE, TreeShape
from sglang_cast.flags import OneLineParser, int_at_least
from sglang_cast.models import Eagle3Draft, load_draft

from .benchmark_filter import categorised_first_turns
from .config import DEFAULT_BENCHMARKS, EVAL_DATASETS, TrainConfig
from .evaluate import acceptance, evaluate_mode
from .features import FeatureSet, collate
from .responses import greedy_with_features, soft_path, write_shard
from .target import Target, chat_ids
from .train import split
from .ttt import StepStats, ttt_forward, ttt_loss
from .vocab import select_draft_vocab, target_to_draft
from .workspace import META, read_jsonl

TOP_OUTSIDE = 12  # commonest out-of-vocabulary answer tokens listed per benchmark
SOFT_TOP_K = 4  # the target's likeliest tokens kept with benchmark answers: [0] is its confidence in its own token
CONFIDENCE_EDGES = (0.0, 0.3, 0.5, 0.7, 0.9, 1.0)  # bins of that confidence
RECALL_KS = (1, 2, 4, 10)  # top-k of the draft's step 0 searched for the target's token; 10 is EAGLE-2's top-k
RECALL_KS_LABELS = tuple(str(k) for k in RECALL_KS)  # the report's keys


@dataclass(frozen=True)
class GapConfig:
    """What to score: the head, its held-out work dir, and the benchmark sample."""

    head: Path
    held_out: Path
    benchmark_dir: Path = DEFAULT_BENCHMARKS
    prompts: int = 80  # first-turn prompts per benchmark (each has 80; mt_bench's 8 categories have 10 each)
    tokens: int = 128  # greedy answer tokens per prompt
    chain_depth: int = 0  # > 0: also the engine's chain α per depth (batch 1; minutes per benchmark)
    tau_prompts: int = 0  # > 0: also EAGLE-2's tree τ on this many held-out prompts (batch 1)
    benchmark_tau: int = 0  # > 0: also EAGLE-2's tree τ on the first this-many prompts of each benchmark
    ttt_steps: int = 4  # unrolled steps scored (the training default; 7 for EAGLE-3's recipe)
    max_seq_len: int = 512
    vocab_sizes: tuple[int, ...] = (4096, 8192, 12288, 16384)  # draft vocabularies whose coverage is reported


def score(draft: Eagle3Draft, fs: FeatureSet, indices: list[int], to_draft: torch.Tensor, steps: int) -> dict:
    """Top-1 accuracy per unrolled step and the out-of-vocabulary share of answer tokens."""
    stats = StepStats.zeros(steps)
    with torch.no_grad():
        for start in range(0, len(indices), 8):
            stats.add(ttt_loss(draft, collate(fs, indices[start : start + 8], to_draft), steps, 1.0)[1])
    answers = [answer_ids(fs, i) for i in indices]
    outside = sum(int((to_draft[a] < 0).sum()) for a in answers)
    tokens = sum(len(a) for a in answers)
    return {"sequences": len(indices), "answer_tokens": tokens, "scored_positions": stats.scored,
            "step_accuracy": stats.accuracy(), "outside_draft_vocab": outside / max(tokens, 1)}


def confidence_recall(draft: Eagle3Draft, fs: FeatureSet, to_draft: torch.Tensor) -> dict[str, Any]:
    """How often the draft's teacher-forced step 0 holds the target's greedy token among
    its top k (`RECALL_KS`), per bin of the target's own probability of that token.

    A chain accepts only the draft's top 1; EAGLE-2's tree searches its top 10.  Where the
    target itself is unsure (a near tie), its argmax turns on details the draft cannot
    see, so top-1 accuracy there has a low ceiling while recall at 10 need not: this
    separates what a better head buys a chain from what it buys a tree.
    """
    confidence, ranks = [], []
    with torch.no_grad():
        for start in range(0, len(fs), 8):
            batch = collate(fs, range(start, min(start + 8, len(fs))), to_draft)
            mask = batch.step_mask(0)
            hidden = ttt_forward(draft, batch.input_ids, batch.features, 1)[0]
            logits = draft.lm_head(draft.norm(hidden[mask])).float()  # [n, V_draft]
            labels = batch.labels[mask]  # [n]; -1: outside the draft vocab, never found
            rank = (logits > logits.gather(-1, labels.clamp(min=0)[:, None])).sum(-1)  # [n]; 0: the top 1
            ranks.append(torch.where(labels >= 0, rank, logits.shape[-1]))
            confidence.append(batch.soft_probs[mask][:, 0])
    rank, p = torch.cat(ranks), torch.cat(confidence)  # [N], [N]

    def recall(chosen: torch.Tensor) -> dict[str, float]:
        return {label: float((rank[chosen] < k).float().mean()) for k, label in zip(RECALL_KS, RECALL_KS_LABELS)}

    bins = []
    for low, high in zip(CONFIDENCE_EDGES, CONFIDENCE_EDGES[1:]):
        chosen = (p >= low) & ((p < high) if high < CONFIDENCE_EDGES[-1] else (p <= high))
        bins.append({"confidence": [low, high], "share": float(chosen.float().mean()),
                     "recall": recall(chosen) if chosen.any() else None})
    return {"positions": len(rank), "mean_confidence": float(p.mean()),
            "recall": recall(torch.ones_like(p, dtype=torch.bool)), "by_confidence": bins}


def answer_ids(fs: FeatureSet, i: int) -> torch.Tensor:
    """``[n]``: sequence ``i``'s answer tokens (within ``max_seq_len``)."""
    seq = fs.sequences[i]
    return torch.from_numpy(seq.token_ids[seq.response_start :])


def benchmark_answers(target: Target, prompts: list[list[int]], tokens: int, out: Path) -> Path:
    """The target's greedy answers to ``prompts`` with their features and its
    `SOFT_TOP_K` likeliest tokens, in the responses stage's format (one shard), cached in
    ``out`` (a cache from before the soft labels is rebuilt)."""
    marker = out / "shard_00000.jsonl"
    if not (marker.is_file() and soft_path(marker).is_file()):
        out.mkdir(parents=True, exist_ok=True)
        write_shard(marker, prompts, list(greedy_with_features(target.model, prompts, tokens, len(prompts),
                                                               target.feature_layers, target.eos_token_ids,
                                                               SOFT_TOP_K)))
    return out


def held_out_indices(work_dir: Path, fs: FeatureSet) -> list[int]:
    """The sequences of ``work_dir`` a head can be scored on: its validation split when
    a head was trained there (``train/`` finished), else all of them."""
    meta = work_dir / "train" / META
    if not meta.is_file():
        return list(range(len(fs)))
    settings = json.loads(meta.read_text())["settings"]
    return split(fs, TrainConfig(**settings["train"]), settings["seed"]).val


def by_group(groups: list[str], indices: list[int]) -> dict[str, list[int]]:
    """``indices`` grouped by ``groups[i]``, groups in sorted order."""
    grouped: dict[str, list[int]] = {}
    for i in indices:
        grouped.setdefault(groups[i], []).append(i)
    return dict(sorted(grouped.items()))


def outside_tokens(target: Target, fs: FeatureSet, to_draft: torch.Tensor) -> list[dict[str, Any]]:
    """The commonest answer tokens of ``fs`` outside the draft vocabulary."""
    counts: Counter[int] = Counter()
    for i in range(len(fs)):
        ids = answer_ids(fs, i)
        counts.update(ids[to_draft[ids] < 0].tolist())
    return [{"token": target.tokenizer.decode([t]), "id": t, "count": n} for t, n in counts.most_common(TOP_OUTSIDE)]


def vocab_coverage(vocab_size: int, sizes: tuple[int, ...], held_out: FeatureSet,
                   benchmarks: dict[str, FeatureSet]) -> dict[str, dict]:
    """Per draft vocabulary size in ``sizes``: the share of each benchmark's answer tokens
    inside the ``size`` commonest held-out answer tokens (how `vocab.select_draft_vocab`
    picks a fresh head's vocabulary)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for i in range(len(held_out)):
        counts += torch.bincount(answer_ids(held_out, i), minlength=vocab_size)
    answers = {name: torch.cat([answer_ids(fs, i) for i in range(len(fs))]) for name, fs in benchmarks.items()}
    coverage = {}
    for size in sizes:
        _, t2d = select_draft_vocab(counts, size)
        coverage[str(size)] = {name: float(t2d[ids].float().mean()) for name, ids in answers.items()}
    return coverage


def chain_alpha(target: Target, head: Path, prompts: list[list[int]], categories: list[str], depth: int,
                tokens: int, name: str) -> dict[str, dict]:
    """The engine's chain α (overall and per depth) and chain τ per category."""
    chain = TreeShape(top_k=1, max_depth=depth, num_verify_tokens=depth + 1)
    result = {}
    for category, indices in by_group(categories, list(range(len(prompts)))).items():
        run = evaluate_mode(target, head, [prompts[i] for i in indices], chain, tokens, f"{name} {category} chain")
        result[category] = {"prompts": len(indices), "chain_tau": run["tau"], **acceptance(run["accepted"], depth)}
    return result


def tree_tau(target: Target, head: Path, prompts: list[list[int]], tokens: int, name: str) -> dict[str, Any]:
    """τ with EAGLE-2's tree (full pool) at batch 1, greedy: the eval stage's measure."""
    run = evaluate_mode(target, head, prompts, EAGLE2_SHAPE, tokens, f"{name} tree")
    return {"prompts": len(prompts), "tau": run["tau"]}


def gap_report(target: Target, cfg: GapConfig) -> dict[str, Any]:
    """Teacher-forced accuracy per benchmark category and per held-out training source,
    out-of-vocabulary tokens, vocabulary coverage and (``cfg.chain_depth``) chain α."""
    draft = load_draft(cfg.head, target.model, "cpu", torch.float32)
    to_draft = target_to_draft(draft.t2d)
    report: dict[str, Any] = {"head": str(cfg.head), "held_out": str(cfg.held_out),
                              "draft_vocab": int(draft.t2d.sum()), "benchmarks": {}}
    answered = {}
    for name in EVAL_DATASETS:
        records = categorised_first_turns(cfg.benchmark_dir / f"{name}.jsonl", cfg.prompts)
        prompts = [chat_ids(target.tokenizer, turn) for turn, _ in records]
        categories = [category for _, category in records]
        cache = cfg.held_out / "gap" / f"{name}-{len(records)}x{cfg.tokens}"
        fs = answered[name] = FeatureSet.open(benchmark_answers(target, prompts, cfg.tokens, cache), cfg.max_seq_len)
        entry = {"all": score(draft, fs, list(range(len(fs))), to_draft, cfg.ttt_steps),
                 "by_category": {c: score(draft, fs, idx, to_draft, cfg.ttt_steps)
                                 for c, idx in by_group(categories, list(range(len(fs)))).items()},
                 "outside_tokens": outside_tokens(target, fs, to_draft),
                 "confidence": confidence_recall(draft, fs, to_draft)}
        if cfg.chain_depth:
            entry["chain"] = chain_alpha(target, cfg.head, prompts, categories, cfg.chain_depth, cfg.tokens, name)
        if cfg.benchmark_tau:
            entry["tree_tau"] = tree_tau(target, cfg.head, prompts[: cfg.benchmark_tau], cfg.tokens, name)
        report["benchmarks"][name] = entry
    fs = FeatureSet.open(cfg.held_out / "responses", cfg.max_seq_len)
    indices = held_out_indices(cfg.held_out, fs)
    sources = [row["source"] for row in read_jsonl(cfg.held_out / "prompts" / "prompts.jsonl")]
    report["held_out_data"] = {"all": score(draft, fs, indices, to_draft, cfg.ttt_steps),
                               "by_source": {s: score(draft, fs, idx, to_draft, cfg.ttt_steps)
                                             for s, idx in by_group(sources, indices).items()}}
    if cfg.tau_prompts:
        prompts = [fs.sequences[i].token_ids[: fs.sequences[i].response_start].tolist()
                   for i in indices[: cfg.tau_prompts]]
        report["held_out_data"]["tree_tau"] = tree_tau(target, cfg.head, prompts, cfg.tokens, "held-out")
    report["vocab_coverage"] = vocab_coverage(target.config.vocab_size, cfg.vocab_sizes, fs, answered)
    return report


def table(report: dict[str, Any]) -> str:
    """The report's accuracies as one Markdown table (rows: benchmark categories, then
    held-out sources)."""
    steps = len(report["held_out_data"]["all"]["step_accuracy"])
    header = " / ".join(str(s) for s in range(steps))
    lines = [f"| data | sequences | answer tokens | acc. step {header} | outside vocab | chain α (per depth) |",
             "| --- | --- | --- | --- | --- | --- |"]

    def row(label: str, entry: dict, chain: dict | None = None) -> None:
        acc = " / ".join(f"{a:.3f}" for a in entry["step_accuracy"])
        alpha = (f"{chain['alpha']:.3f} ({', '.join(f'{a:.2f}' for a in chain['alpha_per_depth'])})"
                 if chain else "")
        lines.append(f"| {label} | {entry['sequences']} | {entry['answer_tokens']} | {acc} | "
                     f"{100 * entry['outside_draft_vocab']:.1f} % | {alpha} |")

    for name, bench in report["benchmarks"].items():
        chains = bench.get("chain", {})
        for category, entry in bench["by_category"].items():
            row(f"{name} / {category}", entry, chains.get(category))
        row(f"**{name}**", bench["all"])
    for source, entry in report["held_out_data"]["by_source"].items():
        row(f"held-out / {source}", entry)
    row("**held-out**", report["held_out_data"]["all"])
    taus = [(f"the first {bench['tree_tau']['prompts']} {name}", bench["tree_tau"]["tau"])
            for name, bench in report["benchmarks"].items() if "tree_tau" in bench]
    held_out = report["held_out_data"].get("tree_tau")
    if held_out:
        taus.append((f"{held_out['prompts']} held-out", held_out["tau"]))
    lines += ["", *(f"τ with EAGLE-2's tree on {label} prompts: {tau:.3f}" for label, tau in taus)]
    return "\n".join(lines)


def confidence_table(report: dict[str, Any]) -> str:
    """Per benchmark and bin of the target's confidence in its own token: the bin's share of
    answer positions and the draft's step-0 recall at each k (Markdown)."""
    ks = " / ".join(RECALL_KS_LABELS)
    lines = [f"| benchmark | target's confidence | share of positions | draft's step 0 holds it in top {ks} |",
             "| --- | --- | --- | --- |"]

    def recall(entry: dict[str, float] | None) -> str:
        return " / ".join(f"{entry[k]:.3f}" for k in RECALL_KS_LABELS) if entry else "-"

    for name, bench in report["benchmarks"].items():
        conf = bench["confidence"]
        for row in conf["by_confidence"]:
            low, high = row["confidence"]
            lines.append(f"| {name} | {low:.1f}-{high:.1f} | {100 * row['share']:.1f} % | {recall(row['recall'])} |")
        lines.append(f"| **{name}** | mean {conf['mean_confidence']:.3f} | {conf['positions']} positions | "
                     f"{recall(conf['recall'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head", type=Path, required=True, help="exported head (config.json + model.safetensors)")
    parser.add_argument("--held-out", type=Path, required=True,
                        help="a train_draft work dir with finished prompts and responses stages: one built with "
                             "--until responses and a seed the head never trained on (every sequence scored), or "
                             "the one the head was trained in (its validation split); benchmark answers are cached "
                             "in <held-out>/gap")
    parser.add_argument("--benchmark-dir", type=Path, default=DEFAULT_BENCHMARKS, help="benchmark *.jsonl")
    parser.add_argument("--prompts", type=int_at_least(1), default=GapConfig.prompts,
                        help=f"first-turn prompts per benchmark ({GapConfig.prompts}: all)")
    parser.add_argument("--tokens", type=int_at_least(1), default=GapConfig.tokens,
                        help=f"greedy answer tokens per prompt ({GapConfig.tokens})")
    parser.add_argument("--chain-depth", type=int_at_least(0), default=0,
                        help="also measure the engine's top-1 chain α per depth and category, batch 1 (0: off; 6 is "
                             "the eval stage's chain)")
    parser.add_argument("--tau-prompts", type=int_at_least(0), default=0,
                        help="also measure τ with EAGLE-2's tree on this many held-out prompts, batch 1 (0: off)")
    parser.add_argument("--benchmark-tau", type=int_at_least(0), default=0,
                        help="also measure τ with EAGLE-2's tree on the first this-many prompts of each benchmark, "
                             "batch 1, as the eval stage does (0: off; run 10's eval used 20)")
    parser.add_argument("--ttt-steps", type=int_at_least(1), default=GapConfig.ttt_steps,
                        help=f"unrolled draft steps scored teacher-forced ({GapConfig.ttt_steps}, the training "
                             "default; score a head trained with more steps on as many)")
    parser.add_argument("--threads", type=int_at_least(1), default=2, help="torch CPU threads (2)")
    parser.add_argument("--json", type=Path, default=None, help="write the report here too")
    args = parser.parse_args(argv)
    held_out = args.held_out.expanduser()
    for stage in ("prompts", "responses"):
        if not (held_out / stage / META).is_file():
            parser.error(f"argument --held-out: {held_out} has no finished {stage} stage (build one with "
                         f"`tools/train_draft.py --until responses --work-dir {held_out} --seed N`)")
    torch.set_num_threads(args.threads)
    cfg = GapConfig(args.head, held_out, args.benchmark_dir, args.prompts, args.tokens, args.chain_depth,
                    args.tau_prompts, args.benchmark_tau, ttt_steps=args.ttt_steps)
    report = gap_report(Target.embedded(), cfg)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    print(table(report))
    print()
    print(confidence_table(report))
    for name, bench in report["benchmarks"].items():
        print(f"{name}: commonest answer tokens outside the draft vocab: "
              + ", ".join(f"{t['token']!r} {t['count']}" for t in bench["outside_tokens"]))
    for size, cover in report["vocab_coverage"].items():
        print(f"a {size}-token vocab from the held-out answers covers "
              + ", ".join(f"{name} {100 * share:.1f} %" for name, share in cover.items()))
