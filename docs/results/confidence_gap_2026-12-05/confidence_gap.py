"""Is the head's gap on mt_bench the data's or the target's? Draft accuracy by the target's confidence.

The shipped head predicts the target's next token far better on unseen answers of its own training kind than on
mt_bench's answers (step-0 accuracy ~0.69 against ~0.47). Two readings: the head has not learnt mt_bench's kind of
text (data would fix it), or mt_bench's answers have more positions where the target itself is unsure, where any
draft misses more often (no data fixes that). This scores the head teacher-forced (step 0, and the tree's top-k
recall) per position, bins the positions by the target's own probability of the token it chose, and splits the gap:

    gap = sum_b (share_heldout_b - share_bench_b) * acc_heldout_b     (the positions' mix: the target's confidence)
        + sum_b share_bench_b * (acc_heldout_b - acc_bench_b)         (within a bin: what the head has not learnt)

Data: the held-out seed 12 (never trained on; docs/draft_head.md), small and built in process with the online
trainer's prompt sources; the benchmarks' first turns. All answers greedy, 128 tokens, fp32 target on the CPU.

    .venv/bin/python docs/results/confidence_gap_2026-12-05/confidence_gap.py --out docs/results/confidence_gap_2026-12-05
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from sglang_cast.models import load_draft
from sglang_cast.training.benchmark_filter import BenchmarkFilter, categorised_first_turns, load_benchmark_prompts
from sglang_cast.training.config import DEFAULT_BENCHMARKS
from sglang_cast.training.online import OnlineConfig, Sequences, answer, generation_engine, round_prompts, teacher_forced
from sglang_cast.training.target import Target, chat_ids
from sglang_cast.training.ttt import ttt_forward
from sglang_cast.training.vocab import target_to_draft

BINS = (0.0, 0.5, 0.7, 0.9, 0.98, 1.0001)  # the target's probability of its own greedy token
TOPS = (1, 3, 10)
OTHER, COPY, OOV = 0, 1, 2
KINDS = {OTHER: "other", COPY: "copy", OOV: "outside draft vocab"}  # draft top-k recall of the target's token (EAGLE-2's tree branches up to 10 at its root)


def positions(target: Target, draft, seqs: Sequences, to_draft: torch.Tensor, batch: int = 8) -> dict[str, np.ndarray]:
    """Per scored answer position: the target's top-1 probability, and whether the target's token is in the
    draft's top 1 / 3 / 10 at step 0 (tokens outside the draft vocabulary are misses)."""
    p1, tokens, hits = [], [], {k: [] for k in TOPS}
    for start in range(0, len(seqs), batch):
        part = seqs.take(range(start, min(start + batch, len(seqs))))
        b = teacher_forced(target, part, to_draft, top_k=1)
        with torch.no_grad():
            hidden = ttt_forward(draft, b.input_ids, b.features, 1)[0]
            logits = draft.lm_head(draft.norm(hidden[b.targets]))  # [scored, draft vocab]
        labels = b.labels[b.targets]
        top = logits.topk(max(TOPS), dim=-1).indices
        for k in TOPS:
            hits[k].append(((top[:, :k] == labels[:, None]).any(-1) & (labels >= 0)).numpy())
        p1.append(b.soft_probs[b.targets][:, 0].numpy())
        tokens.append(b.input_ids[:, 1:][b.targets[:, :-1]].numpy())  # token t + 2: the target's own
    return {"p1": np.concatenate(p1), "token": np.concatenate(tokens),
            **{f"top{k}": np.concatenate(v) for k, v in hits.items()}}


def position_kinds(seqs: Sequences, to_draft: torch.Tensor) -> np.ndarray:
    """Per scored position, in `positions`' order: ``OOV`` (the token is outside the draft vocabulary), ``COPY``
    (it followed the same two tokens earlier in the context: prompt or answer) or ``OTHER``."""
    kinds = []
    for ids, start in zip(seqs.ids, seqs.starts):
        seen: dict[tuple[int, int], set[int]] = {}
        for t in range(len(ids) - 2):  # position t: context ids[: t + 2], token ids[t + 2]
            if t >= 1:
                seen.setdefault((ids[t - 1], ids[t]), set()).add(ids[t + 1])
            if t >= max(start - 2, 0):
                token = ids[t + 2]
                kinds.append(OOV if to_draft[token] < 0 else COPY if token in seen.get((ids[t], ids[t + 1]), ())
                             else OTHER)
    return np.array(kinds)


def by_kind(pos: dict[str, np.ndarray]) -> dict:
    """Share of positions and the head's recall per kind, and per kind among the target's surest (p1 >= 0.98)."""
    out = {}
    for kind, name in KINDS.items():
        for label, sel in ((name, pos["kind"] == kind), (f"{name}, p1>=0.98", (pos["kind"] == kind) & (pos["p1"] >= 0.98))):
            out[label] = {"share": float(sel.mean()), "mean_p1": float(pos["p1"][sel].mean()) if sel.any() else None,
                          **{f"top{k}": float(pos[f"top{k}"][sel].mean()) if sel.any() else None for k in TOPS}}
    return out


def binned(pos: dict[str, np.ndarray]) -> dict:
    index = np.digitize(pos["p1"], BINS) - 1
    rows = []
    for b in range(len(BINS) - 1):
        sel = index == b
        rows.append({"bin": f"{BINS[b]:.2f}-{min(BINS[b + 1], 1):.2f}", "share": float(sel.mean()),
                     **{f"top{k}": float(pos[f"top{k}"][sel].mean()) if sel.any() else None for k in TOPS}})
    return {"positions": int(len(pos["p1"])), "mean_p1": float(pos["p1"].mean()),
            **{f"top{k}": float(pos[f"top{k}"].mean()) for k in TOPS}, "bins": rows}


def split_gap(ref: dict, bench: dict, key: str = "top1") -> dict:
    """The held-out minus benchmark accuracy, split into the positions' mix and the within-bin difference."""
    mix = within = 0.0
    for r, b in zip(ref["bins"], bench["bins"]):
        if r[key] is None:
            continue
        mix += (r["share"] - b["share"]) * r[key]
        within += b["share"] * (r[key] - (b[key] if b[key] is not None else r[key]))
    return {"gap": ref[key] - bench[key], "target_confidence_mix": mix, "within_bins": within}


def answered_sets(target: Target, cfg: OnlineConfig, cache: Path) -> dict[str, Sequences]:
    """The held-out prompts' and the benchmarks' first turns' greedy answers (kept in ``cache``)."""
    if cache.is_file():
        return {name: Sequences(**entry) for name, entry in json.loads(cache.read_text()).items()}
    engine = generation_engine(target, cfg)
    sets = {"held_out": answer(engine, cfg, round_prompts(target, engine, cfg, 0, BenchmarkFilter.from_prompts(
        load_benchmark_prompts(DEFAULT_BENCHMARKS)))[0], 0)}
    long_engine = generation_engine(target, replace(cfg, max_prompt_tokens=1024))  # benchmark turns run longer
    for name in ("mt_bench", "humaneval"):
        records = categorised_first_turns(DEFAULT_BENCHMARKS / f"{name}.jsonl", 80)
        sets[name] = answer(long_engine, cfg, [chat_ids(target.tokenizer, t) for t, _ in records], 0)
    cache.write_text(json.dumps({name: {"ids": s.ids, "starts": s.starts} for name, s in sets.items()}))
    return sets


def summary(report: dict) -> str:
    """The report as the record's tables (markdown)."""
    lines = ["| set | positions | target p1 | top-1 | top-3 | top-10 |", "| --- | --- | --- | --- | --- | --- |"]
    groups = {**report["sets"], **{f"mt_bench {c}": v for c, v in report["mt_bench_by_category"].items()}}
    for name, s in groups.items():
        lines.append(f"| {name} | {s['positions']} | {s['mean_p1']:.3f} | "
                     + " | ".join(f"{s[f'top{k}']:.3f}" for k in TOPS) + " |")
    lines += ["", "| set | bin of target p1 | share | top-1 | top-3 | top-10 |", "| --- | --- | --- | --- | --- | --- |"]
    for name, s in report["sets"].items():
        for b in s["bins"]:
            lines.append(f"| {name} | {b['bin']} | {b['share']:.3f} | "
                         + " | ".join("-" if b[f'top{k}'] is None else f"{b[f'top{k}']:.3f}" for k in TOPS) + " |")
    lines += ["", "| set | gap (top-1) | target's confidence mix | within bins |", "| --- | --- | --- | --- |"]
    for name, s in groups.items():
        if "split" not in s:
            continue
        split = s["split"]["top1"] if "top1" in s["split"] else s["split"]
        lines.append(f"| {name} | {split['gap']:+.3f} | {split['target_confidence_mix']:+.3f} | "
                     f"{split['within_bins']:+.3f} |")
    lines += ["", "| set | kind | share | target p1 | top-1 | top-3 | top-10 |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, s in groups.items():
        for kind, k in s["by_kind"].items():
            cells = " | ".join("-" if k[f'top{t}'] is None else f"{k[f'top{t}']:.3f}" for t in TOPS)
            p1 = "-" if k["mean_p1"] is None else f"{k['mean_p1']:.3f}"
            lines.append(f"| {name} | {kind} | {k['share']:.3f} | {p1} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head", type=Path, default=Path("sglang_cast/assets/smollm2-135m-eagle"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=12, help="the held-out prompt seed (never trained on)")
    args = ap.parse_args()
    torch.manual_seed(0)
    target = Target.embedded()
    draft = load_draft(args.head, target.model, "cpu", torch.float32)
    to_draft = target_to_draft(draft.t2d)
    cfg = OnlineConfig(prompt_seed=args.seed, self_instruct=60, doc_prompts=20, template_prompts=40, task_prompts=60,
                       response_tokens=args.tokens, gen_batch=64)
    args.out.mkdir(parents=True, exist_ok=True)
    sets = answered_sets(target, cfg, args.out / "answers.json")
    categories = {name: [c for _, c in categorised_first_turns(DEFAULT_BENCHMARKS / f"{name}.jsonl", 80)]
                  for name in ("mt_bench", "humaneval")}
    report: dict = {"head": str(args.head), "tokens": args.tokens, "sets": {}}
    per_position = {name: {**positions(target, draft, seqs, to_draft), "kind": position_kinds(seqs, to_draft)}
                    for name, seqs in sets.items()}
    for name, pos in per_position.items():
        report["sets"][name] = {**binned(pos), "by_kind": by_kind(pos)}
    for name in ("mt_bench", "humaneval"):
        report["sets"][name]["split"] = {f"top{k}": split_gap(report["sets"]["held_out"], report["sets"][name],
                                                              f"top{k}") for k in TOPS}
    # mt_bench by category: the sequences' scored positions in order, so cut per sequence
    seqs, pos = sets["mt_bench"], per_position["mt_bench"]
    counts = [max(len(ids) - 2 - max(start - 2, 0), 0) for ids, start in zip(seqs.ids, seqs.starts)]
    edges = np.cumsum([0] + counts)
    assert edges[-1] == len(pos["p1"]), (edges[-1], len(pos["p1"]))
    by_cat: dict[str, dict[str, list]] = {}
    for i, cat in enumerate(categories["mt_bench"]):
        part = by_cat.setdefault(cat, {k: [] for k in pos})
        for k in pos:
            part[k].append(pos[k][edges[i]:edges[i + 1]])
    report["mt_bench_by_category"] = {}
    for cat, part in sorted(by_cat.items()):
        merged = {k: np.concatenate(v) for k, v in part.items()}
        b = {**binned(merged), "by_kind": by_kind(merged)}
        b["split"] = split_gap(report["sets"]["held_out"], b)
        report["mt_bench_by_category"][cat] = b
    (args.out / "confidence_gap.json").write_text(json.dumps(report, indent=1))
    np.savez_compressed(args.out / "positions.npz", **{f"{name}.{k}": v for name, pos in per_position.items()
                                                       for k, v in pos.items()})
    (args.out / "summary.md").write_text(summary(report) + "\n")
    print(summary(report))


if __name__ == "__main__":
    main()
