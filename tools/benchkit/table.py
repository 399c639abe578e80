"""The method table: every method at every (temperature, batch size), timed in
interleaved rounds (``rounds.py``), checked for greedy losslessness (``lossless.py``)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from autotune.models import ModelPair
from autotune.overhead import shape_key
from sglang_cast.cast import PolicySettings, TreeShape, make_policy
from sglang_cast.engine.format_choice import running_format
from sglang_cast.hardware import device_name

from .anchor import LlamaCppRunner, anchor_summary
from .lossless import Judge, check_failed, greedy_check, largest_gap, report_failure
from .methods import ANCHOR, Method, method_settings
from .rounds import DEFAULT_ROUNDS, EngineRunner, Measured, Runner, interleave, sampling, summarise


@dataclass
class Record:
    """One method at one (batch size, temperature): medians over its interleaved rounds."""

    method: str
    batch_size: int
    temperature: float
    prompts: int
    tokens: int
    seconds: float  # the round closest to the median's
    tokens_per_s: float  # median over rounds
    speedup_vs_vanilla: float | None  # median over median, same interleaved run
    tau: float  # committed tokens per sequence per iteration (accepted + bonus)
    mean_verified_tokens: float  # draft tokens sent to the target per sequence per iteration
    mean_depth: float
    draft_ms: float  # per iteration: draft forwards incl. catch-up
    verify_ms: float  # per iteration: target forward + commit
    host_ms: float  # per iteration: the rest of the step (IterationRecord.host_ms)
    iterations: int
    lossless: bool | None  # greedy only: tokens identical to vanilla's
    shape: dict | None  # the static tree of eagle2 / eagle2-best / @eagle2 runs
    step_ms: float | None = None  # per iteration: the whole step measured (None for the llama.cpp anchor)
    charged_step_ms: float | None = None  # per iteration: what the profile's cost model charged for it
    # per verify width (tokens per sequence, root included): iterations, mean step measured and charged
    by_width: dict[str, dict] | None = None
    rounds: int = 0
    tokens_per_s_rounds: list[float] | None = None  # every timed round, in the order run
    tokens_per_s_min: float | None = None
    tokens_per_s_max: float | None = None
    spread_pct: float | None = None  # (max - min) / median, percent
    speedup_vs_vanilla_rounds: list[float] | None = None  # round r over vanilla's round r
    mismatches: list[dict] | None = None
    speedup_vs_llamacpp: float | None = None  # batch 1, greedy, when the anchor ran
    # Where greedy runs may flip near-ties (lossless.needs_judge): every divergence from
    # vanilla is a near-tie by the measured kernel-path rule; each mismatch carries its
    # gap and tolerance, and largest_gap the largest gap seen.
    near_ties_only: bool | None = None
    largest_gap: float | None = None
    note: str | None = None
    weight_format: str | None = None  # what the native target runs; None for the llama.cpp anchor (its GGUF's own)
    device: str | None = None  # the GPU's or CPU's name
    # CUDA graphs of this engine (engine/cuda_graphs.py): captured, startup seconds,
    # memory, replays and eager fallbacks per model; None when every forward ran eagerly.
    cuda_graphs: dict | None = None


def anchor_runs(method: Method, batch_size: int, temperature: float) -> bool:
    """The anchor is greedy and batch-1 only; every other method runs everywhere."""
    return not method.is_anchor or (batch_size == 1 and temperature == 0)


def runner_for(pair: ModelPair, method: Method, settings: PolicySettings, best: dict[int, TreeShape],
               prompts: list[str], batch_size: int, temperature: float, max_new_tokens: int,
               context_length: int, gguf: Path | None) -> tuple[Runner, TreeShape | None, str | None]:
    """The runner of ``method`` at ``batch_size``, its static tree (if any) and a note."""
    if method.is_anchor:
        token_ids = [pair.tokenizer.encode(p) for p in prompts]
        anchor = LlamaCppRunner(gguf, token_ids, max_new_tokens, pair.eos_token_ids, torch.get_num_threads(),
                                context_length)
        return anchor, None, anchor.note
    chosen, shape = method_settings(method, settings, best, batch_size)
    engine = pair.engine(make_policy(method.policy, chosen), batch_size, context_length)
    return EngineRunner(engine, prompts, sampling(len(prompts), temperature, max_new_tokens)), shape, None


def bench(pair: ModelPair, methods: list[Method], settings: PolicySettings, best: dict[int, TreeShape],
          prompts: list[str], batch_sizes: list[int], temperatures: list[float], max_new_tokens: int,
          context_length: int, gguf: Path | None = None, judge: Judge | None = None,
          rounds: int = DEFAULT_ROUNDS) -> list[Record]:
    """Every method at every (temperature, batch size), in interleaved rounds.  Greedy
    outputs are checked against vanilla's: token-identical, or with ``judge`` every first
    divergence judged a near-tie or not."""
    records: list[Record] = []
    runs = list(itertools.product(temperatures, batch_sizes))
    fmt = running_format(str(pair.target.weight_format), pair.torch_dtype)
    where = device_name(pair.device)
    bar = tqdm(runs, desc="bench", unit="batch size")
    for temperature, batch_size in bar:
        bar.set_postfix_str(f"B={batch_size} T={temperature:g}, {rounds} rounds")
        here = [m for m in methods if anchor_runs(m, batch_size, temperature)]
        built = {m.label: runner_for(pair, m, settings, best, prompts, batch_size, temperature, max_new_tokens,
                                     context_length, gguf) for m in here}
        measured = interleave({label: runner for label, (runner, _, _) in built.items()}, rounds)
        current = [record_of(m, measured[m.label], built[m.label][1], built[m.label][2], batch_size,
                             temperature, len(prompts), None if m.is_anchor else fmt, where) for m in here]
        for m, record in zip(here, current):
            runner = built[m.label][0]
            record.cuda_graphs = runner.engine.graph_report() if isinstance(runner, EngineRunner) else None
        compare(current, measured)
        if temperature == 0 and "vanilla" in measured:
            reference = measured["vanilla"].typical.outputs
            for record in current:
                if record.method == ANCHOR:
                    continue  # other kernels, other numerics: its tokens are not ours to match
                record.mismatches, record.near_ties_only = greedy_check(
                    pair, judge, prompts, measured[record.method].typical.outputs, reference)
                record.lossless = not record.mismatches
                record.largest_gap = largest_gap(record.mismatches)
                if check_failed(record):
                    report_failure(f"{record.method} at batch {batch_size}", record.mismatches)
        records += current
    return records


def record_of(method: Method, measured: Measured, shape: TreeShape | None, note: str | None, batch_size: int,
              temperature: float, prompts: int, weight_format: str | None, device: str) -> Record:
    """The record of one method's rounds: median tokens/s, its spread, the typical round's stats."""
    typical = measured.typical
    stats = anchor_summary(typical) if method.is_anchor else summarise(typical)
    return Record(method=method.label, batch_size=batch_size, temperature=temperature, prompts=prompts,
                  tokens_per_s=measured.tokens_per_s, speedup_vs_vanilla=None, lossless=None,
                  shape=asdict(shape) if shape else None, rounds=len(measured.rounds), note=note,
                  weight_format=weight_format, device=device, **measured.spread(), **stats)


def compare(records: list[Record], measured: dict[str, Measured]) -> None:
    """Speedups over vanilla (and the anchor) within one interleaved run, in place."""
    for record in records:
        if "vanilla" in measured:
            record.speedup_vs_vanilla = record.tokens_per_s / measured["vanilla"].tokens_per_s
            record.speedup_vs_vanilla_rounds = measured[record.method].ratios_to(measured["vanilla"])
        if ANCHOR in measured:
            record.speedup_vs_llamacpp = record.tokens_per_s / measured[ANCHOR].tokens_per_s


def markdown(records: list[Record], dataset: str) -> str:
    """One table per temperature: rows are batch sizes, columns methods (median tokens/s
    with the rounds' [min–max], speedup, tau, and the static tree of a method that has one)."""
    lines = []
    methods = list(dict.fromkeys(r.method for r in records))
    rounds = sorted({r.rounds for r in records})
    for temperature in sorted({r.temperature for r in records}):
        lines += [f"### {dataset}, temperature {temperature:g}", "",
                  f"tokens/s: median of {'/'.join(map(str, rounds))} interleaved rounds [min–max]", "",
                  "| batch | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
        for batch_size in sorted({r.batch_size for r in records}):
            cells = []
            for method in methods:
                r = next((x for x in records if (x.method, x.batch_size, x.temperature) == (method, batch_size,
                                                                                            temperature)), None)
                if r is None:  # the anchor runs at batch 1, greedy, only
                    cells.append("–")
                    continue
                speed = f"{r.speedup_vs_vanilla:.2f}×" if r.speedup_vs_vanilla is not None else "–"
                flag = " ⚠ not lossless" if check_failed(r) else ""
                if r.near_ties_only:
                    flag = f" ≈ {len(r.mismatches)} near-tie divergence(s), gap ≤ {r.largest_gap:.3g}"
                anchor = f", {r.speedup_vs_llamacpp:.2f}× llama.cpp" if r.speedup_vs_llamacpp is not None else ""
                spread = (f" [{r.tokens_per_s_min:.1f}–{r.tokens_per_s_max:.1f}]"
                          if r.tokens_per_s_min is not None else "")
                tree = f", tree {shape_key(TreeShape(**r.shape))}" if r.shape else ""
                cells.append(f"{r.tokens_per_s:.1f} tok/s{spread}, {speed}{anchor}, τ {r.tau:.2f}{tree}{flag}")
            lines.append(f"| {batch_size} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
