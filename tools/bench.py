"""End-to-end speed of every tree policy on the native engine, in one process.

    python tools/bench.py --methods vanilla,eagle2,eagle2-best,cast,goodput \\
        --dataset datasets/mt_bench.jsonl --batch-size 1,8 --temperature 0,1 \\
        --num-prompts 16 --max-new-tokens 128 --json docs/results/bench_mt_bench.json

Every method decodes the same prompts (first turn of each record's ``turns``, in the
model's chat template) on the same loaded target and draft, one engine per (method,
batch size), warm-up excluded.  ``--batch-size B`` means continuous batching with at
most B running sequences; all prompts are submitted at once, so the batch stays full
until the queue drains.

Methods (docs/design/cast.md §7):

* ``vanilla`` – plain decoding, the baseline every speedup is relative to;
* ``eagle2`` – EAGLE-2's default static tree (depth 6, top-k 10, 60 tokens);
* ``eagle2-best`` – the best static (depth, top-k, tokens) for the batch size's
  profile bucket, chosen by trace replay over a grid on the autotuner's traces
  (tuning prompts, never the benchmark prompts): what a per-batch tree dispatcher
  would pick;
* ``cast``, ``goodput`` – the profile's tuned settings;
* ablation (the paper's Table 3): ``cast-rerank`` (EAGLE-2's tree + cost-aware
  rerank), ``cast-rerank-depth`` (+ depth pruning), ``cast`` (+ breadth pruning),
  and ``cast-depth-breadth`` (depth + breadth pruning, EAGLE-2's verify rule: the
  paper's EAGLE-3+DR+BP row).
  A suffix ``@eagle2`` runs a method on EAGLE-2's default tree shape instead of the
  profile's tuned shape (thresholds still from the profile; every bucket drafts, as
  the profile's ``speculate: false`` is ours, not one of the paper's components), so
  ``eagle2,cast-rerank@eagle2,cast-rerank-depth@eagle2,cast@eagle2`` adds one
  component at a time to the same tree.

* ``llamacpp`` – the anchor: llama.cpp (llama-cpp-python) on the same GGUF, the
  same prompt tokens and thread count, greedy, batch 1 only (it decodes one sequence
  at a time); see ``tools/llamacpp_anchor.py``.  Skipped with one line when the
  optional extra is absent (``bash run.sh anchors`` builds it) or the model is not a
  GGUF.  Every batch-1 greedy record then carries ``speedup_vs_llamacpp``.

The paper's figures, from EAGLE-2's default tree (depth 6, top-k 10) at every verify
budget ``--budgets`` m, with vanilla per batch size as baseline and lossless reference:

    python tools/bench.py --figure acceptance --dataset datasets/mt_bench.jsonl \\
        --num-prompts 4 --max-new-tokens 64 --json docs/results/figures/fig3_acceptance.json
    python tools/bench.py --figure verify-budget --batch-size 1,2 ...   # Fig. 4

* ``acceptance`` (Fig. 3): acceptance length τ per sequence and iteration against the
  cumulative value (summed path values) of the nodes it verified;
* ``verify-budget`` (Fig. 4): tokens/s against m per batch size, the best m marked.

The PNG goes to ``--plot`` (default: the ``--json`` path with ``.png``).

Greedy runs (temperature 0) check losslessness: every method's tokens must equal
vanilla's for every prompt.  A mismatch is printed to stderr, recorded in the JSON
(``lossless: false`` and where it diverged) and makes the exit status 1 after the
results are written.  ``--weight-format auto`` (the default) resolves as the server
does (``sglang_cast/engine/format_choice.py``: the profile's recorded format, else the
cheapest in a few timed forwards); every record names the format it ran.  With a packed
weight format a verified tree and a single
token run different kernels, so an argmax may flip where the target's top two logits
tie within the dtype's rounding: each first divergence is then rescored on the
target's logits (``models/numerics.py``), recorded with its gap and tolerance, and
only a divergence that is no near-tie fails the run (``near_ties_only``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import torch
from tqdm import tqdm

from autotune.cli import comma_list
from autotune.errors import AutotuneError
from autotune.models import ModelPair, load_model_pair
from autotune.prompts import load_prompts
from autotune.store import Store, default_db_path
from autotune.tuner import assign_buckets, even_sample, replay_settings
from sglang_cast.cast import EAGLE2_SHAPE, POLICIES, PolicySettings, SamplingParams, TreeShape, make_policy
from sglang_cast.engine import Engine, IterationRecord, StepLog
from sglang_cast.engine.build import DTYPES
from sglang_cast.engine.format_choice import FormatChoice, choose_weight_format, parse_requested, verify_sizes
from sglang_cast.hardware import cpu_name, device_name, isa_class
from sglang_cast.models.compiled import COMPILE_MODES, compile_models, compile_wanted
from sglang_cast.models.loader import embedded_gguf_path
from sglang_cast.models.numerics import NearTieRule, judge_divergence
from sglang_cast.models.weights import ACTIVATION_DTYPE, WeightFormat
from sglang_cast.profile import LoadedProfile, ProfileError, find_profile, load_profile

ANCHOR = "llamacpp"
DTYPE = "float32"  # the native engine's residual stream in every method (--weight-format sets the linears')
BEST_GRID = {"max_depth": (1, 2, 3, 4, 6), "top_k": (1, 2, 4, 8, 10), "num_verify_tokens": (2, 4, 8, 16, 32, 60)}
WARMUP_TOKENS = 8
DEFAULT_METHODS = "vanilla,eagle2,eagle2-best,cast,goodput"
DEFAULT_BUDGETS = "2,4,8,16,32,60"


class BenchError(Exception):
    """Bad input or missing prerequisite: one line, exit 2."""


@dataclass(frozen=True)
class Method:
    """A benchmarked method: a policy name and where its tree shape comes from."""

    label: str  # as given on the command line
    policy: str
    shape: str  # "profile" (tuned), "eagle2" (EAGLE-2's default), "best" (eagle2-best's grid choice), "anchor"

    @property
    def is_anchor(self) -> bool:
        return self.shape == "anchor"

    @classmethod
    def parse(cls, label: str) -> Method:
        name, _, suffix = label.partition("@")
        if name == ANCHOR:
            if suffix:
                raise BenchError(f"--methods: {label!r}: the llama.cpp anchor has no tree shape")
            return cls(label, ANCHOR, "anchor")
        if suffix not in ("", "eagle2"):
            raise BenchError(f"--methods: {label!r}: the only shape suffix is '@eagle2'")
        known = sorted(set(POLICIES) | {"eagle2-best", ANCHOR})
        if name not in known:
            raise BenchError(f"--methods: unknown method {name!r}; accepted: {known} (optionally with '@eagle2')")
        if name == "eagle2-best":
            if suffix:
                raise BenchError(f"--methods: {label!r}: eagle2-best chooses its own shape")
            return cls(label, "eagle2", "best")
        return cls(label, name, "eagle2" if name == "eagle2" or suffix == "eagle2" else "profile")


@dataclass
class Record:
    method: str
    batch_size: int
    temperature: float
    prompts: int
    tokens: int
    seconds: float
    tokens_per_s: float
    speedup_vs_vanilla: float | None
    tau: float  # committed tokens per sequence per iteration (accepted + bonus)
    mean_verified_tokens: float  # draft tokens sent to the target per sequence per iteration
    mean_depth: float
    draft_ms: float  # per iteration: draft forwards incl. catch-up
    verify_ms: float  # per iteration: target forward + commit
    iterations: int
    lossless: bool | None  # greedy only: tokens identical to vanilla's
    shape: dict | None  # the static tree of eagle2 / eagle2-best / @eagle2 runs
    mismatches: list[dict] | None = None
    speedup_vs_llamacpp: float | None = None  # batch 1, greedy, when the anchor ran
    # Packed weight formats: every divergence from vanilla is a near-tie of the target's
    # own logits (models/numerics.py), each mismatch then carries its gap and tolerance.
    near_ties_only: bool | None = None
    note: str | None = None
    weight_format: str | None = None  # the native target's; None for the llama.cpp anchor (its GGUF's own)


# ------------------------------------------------------- the llama.cpp anchor

# llama.cpp on the same GGUF: the speed a CPU user gets today.  It is an optional extra
# (`bash run.sh anchors` builds llama-cpp-python from source with flags chosen from this
# CPU's ISA; see `tools/install_anchors.sh`).
#
# Fairness rules (each one a way the comparison could silently favour one side):
#
# * the same GGUF file the native engine converts its weights from;
# * the same prompt tokens: prompts are tokenized once by our tokenizer (chat template
#   included) and handed to llama.cpp as token ids, so both decode identical inputs;
# * the same thread count as torch uses in the benchmark process;
# * greedy (llama.cpp's ``temp=0`` is argmax), the same ``max_new_tokens``, stopping
#   at the same EOS ids;
# * time from the prompt's submission to its last token, prefill included, prompts
#   one after another after one warm-up prompt, as `tools/bench.py` times its methods.
#
# llama-cpp-python decodes one sequence at a time, so the anchor is a batch-1 number.

@dataclass(frozen=True)
class AnchorRun:
    """What one anchor run produced: per-prompt new tokens and the time they took."""

    token_ids: list[list[int]]  # generated tokens per prompt (EOS excluded)
    seconds: float  # wall time over all prompts, prefill included, warm-up excluded
    version: str  # llama-cpp-python's version
    threads: int

    @property
    def tokens(self) -> int:
        return sum(len(t) for t in self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def llamacpp_missing() -> str | None:
    """None when llama-cpp-python imports, else the one line that says how to get it."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (build it once with `bash run.sh anchors`, ~5 min on 2 cores)"
    return None


def run_llamacpp(
    gguf_path: Path,
    prompt_token_ids: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    threads: int,
    context_length: int = 2048,
) -> AnchorRun:
    """Greedy-decode every prompt with llama.cpp; the first prompt is also run once as warm-up."""
    import llama_cpp

    if not prompt_token_ids:
        raise ValueError("prompt_token_ids: at least one prompt is needed")
    model = llama_cpp.Llama(
        model_path=str(gguf_path), n_ctx=context_length, n_threads=threads, n_threads_batch=threads,
        n_batch=512, verbose=False,
    )
    stop = set(eos_token_ids)
    _decode(model, prompt_token_ids[0], 8, stop)  # warm-up: page in weights, size buffers
    start = time.perf_counter()
    outputs = [_decode(model, prompt, max_new_tokens, stop) for prompt in prompt_token_ids]
    seconds = time.perf_counter() - start
    return AnchorRun(outputs, seconds, llama_cpp.__version__, threads)


def _decode(model, prompt: Sequence[int], max_new_tokens: int, stop: set[int]) -> list[int]:
    """Greedy tokens after ``prompt`` until an EOS id or ``max_new_tokens``."""
    out: list[int] = []
    for token in model.generate(list(prompt), top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                repeat_penalty=1.0, reset=True):
        if token in stop:
            break
        out.append(token)
        if len(out) >= max_new_tokens:
            break
    return out


# ---------------------------------------------------------------- inputs

def parse_list(text: str, kind: type, name: str, low: float, high: float) -> tuple:
    try:
        return comma_list(text, kind, "integers" if kind is int else "numbers", low, high, increasing=False)
    except ValueError as err:
        raise BenchError(f"{name}: {err}") from None


def load_settings(path: str | None) -> LoadedProfile:
    chosen = Path(path) if path else find_profile("cpu")
    if chosen is None:
        raise BenchError("--profile: no profiles/cpu.yaml; run cast-autotune tune --gpu cpu or pass a profile")
    try:
        return load_profile(chosen)
    except ProfileError as err:
        raise BenchError(f"--profile: {err}") from None


# ---------------------------------------------------------- eagle2-best

def best_static_shapes(pair: ModelPair, settings: PolicySettings, batch_sizes: list[int],
                       db: Path, max_traces: int) -> dict[int, TreeShape]:
    """Per batch size, the static EAGLE-2 shape with the highest replayed tokens/s
    on the stored traces of that batch size's profile bucket."""
    store = Store(db)
    try:
        stored = store.traces(pair.target_id, pair.draft_id)
    finally:
        store.close()
    if not stored:
        raise BenchError(f"eagle2-best: no traces for draft {pair.draft_id} in {db}; "
                         "run cast-autotune collect first (it records on the tuning prompts)")
    sizes = tuple(b.max_batch_size for b in settings.buckets)
    by_bucket = assign_buckets([s.trace for s in stored], sizes)
    chosen: dict[int, TreeShape] = {}
    for batch_size in batch_sizes:
        bucket = settings.for_batch(batch_size)
        traces = even_sample(by_bucket[bucket.max_batch_size], max_traces)
        if not traces:
            raise BenchError(f"eagle2-best: no traces in the bucket of batch size {batch_size} "
                             f"(max_batch_size {bucket.max_batch_size}); collect with a batch size in it")
        top_k, depth = min(t.top_k for t in traces), min(int(t.tree.depths.max()) for t in traces)
        grid = [TreeShape(k, h, m) for k, h, m in itertools.product(
            BEST_GRID["top_k"], BEST_GRID["max_depth"], BEST_GRID["num_verify_tokens"])
            if k <= top_k and h <= depth and m <= 1 + k * h]
        single = PolicySettings(buckets=(bucket,), costs=settings.costs)
        rates = {shape: replay_settings(traces, single.with_shape(shape), "eagle2").tokens_per_s
                 for shape in tqdm(grid, desc=f"eagle2-best grid, batch {batch_size}", leave=False)}
        chosen[batch_size] = max(rates, key=rates.get)
    return chosen


# ----------------------------------------------------------------- runs

def method_settings(method: Method, settings: PolicySettings, best: dict[int, TreeShape],
                    batch_size: int) -> tuple[PolicySettings, TreeShape | None]:
    if method.shape == "best":
        return settings.with_shape(best[batch_size]), best[batch_size]
    if method.shape == "eagle2":
        # The ablation adds the paper's components to EAGLE-2's tree at every batch
        # size; our per-bucket speculation switch is not one of them.
        return settings.with_shape(EAGLE2_SHAPE, speculate=True), EAGLE2_SHAPE
    return settings, None


def decode(pair: ModelPair, method: Method, settings: PolicySettings, prompts: list[str], batch_size: int,
           temperature: float, max_new_tokens: int, context_length: int,
           ) -> tuple[list[list[int]], float, list[IterationRecord]]:
    """Decode every prompt once (after a warm-up): tokens per prompt, wall seconds and
    the iteration records."""
    engine: Engine = pair.engine(make_policy(method.policy, settings), batch_size, context_length)
    engine.generate(prompts[:batch_size], SamplingParams(max_new_tokens=WARMUP_TOKENS, ignore_eos=True))
    params = [SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=i)
              for i in range(len(prompts))]
    log = StepLog()
    start = time.perf_counter()
    results = engine.generate(prompts, params, on_step=log)
    seconds = time.perf_counter() - start
    return [r.token_ids for r in results], seconds, log.records


def summarise(history: list[IterationRecord], tokens: int, seconds: float) -> dict:
    """The per-run metrics of docs/design/cast.md §9 from a run's iteration records."""
    sequences = sum(len(r.accepted) for r in history) or 1
    return {
        "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "iterations": len(history),
        "tau": sum(sum(r.accepted) + len(r.accepted) for r in history) / sequences,
        "mean_verified_tokens": sum(r.verified * len(r.accepted) for r in history) / sequences,
        "mean_depth": statistics.fmean(r.depth for r in history) if history else 0.0,
        "draft_ms": statistics.fmean(r.draft_ms for r in history) if history else 0.0,
        "verify_ms": statistics.fmean(r.verify_ms for r in history) if history else 0.0,
    }


def run_one(pair: ModelPair, method: Method, settings: PolicySettings, prompts: list[str], batch_size: int,
            temperature: float, max_new_tokens: int, context_length: int) -> tuple[list[list[int]], dict]:
    """Decode every prompt once (after a warm-up) and summarise its iteration records."""
    outputs, seconds, history = decode(pair, method, settings, prompts, batch_size, temperature, max_new_tokens,
                                       context_length)
    return outputs, summarise(history, sum(len(t) for t in outputs), seconds)


def run_anchor(pair: ModelPair, gguf: Path, prompts: list[str], max_new_tokens: int,
               context_length: int) -> tuple[list[list[int]], dict, str]:
    """llama.cpp on ``prompts`` tokenized exactly as the engine tokenizes them."""
    token_ids = [pair.tokenizer.encode(p) for p in prompts]
    run = run_llamacpp(gguf, token_ids, max_new_tokens, pair.eos_token_ids, torch.get_num_threads(),
                       context_length)
    stats = {"tokens": run.tokens, "seconds": run.seconds, "tokens_per_s": run.tokens_per_s,
             "iterations": run.tokens, "tau": 1.0, "mean_verified_tokens": 0.0, "mean_depth": 0.0,
             "draft_ms": 0.0, "verify_ms": 1000 * run.seconds / max(run.tokens, 1)}
    note = (f"llama.cpp via llama-cpp-python {run.version}, {gguf.name} in its own kernels, "
            f"{run.threads} threads, batch 1")
    return run.token_ids, stats, note


def judge_mismatches(pair: ModelPair, rule: NearTieRule, prompts: list[str], mismatches: list[dict],
                     reference: list[list[int]], outputs: list[list[int]]) -> None:
    """Add the near-tie verdict (logit gap, tolerance) to each mismatch, in place."""
    for mismatch in mismatches:
        i = mismatch["prompt"]
        verdict = judge_divergence(pair.target, rule, pair.tokenizer.encode(prompts[i]), reference[i], outputs[i])
        mismatch.update(gap=verdict.gap, tolerance=verdict.tolerance, near_tie=verdict.near_tie)


def greedy_check(pair: ModelPair, rule: NearTieRule | None, prompts: list[str], outputs: list[list[int]],
                 reference: list[list[int]]) -> tuple[list[dict], bool | None]:
    """Where ``outputs`` first differ from vanilla's ``reference``, and with ``rule``
    (packed weights) whether every difference is a near-tie (``None``: not judged)."""
    mismatches = divergences(outputs, reference)
    if not mismatches or rule is None:
        return mismatches, None
    judge_mismatches(pair, rule, prompts, mismatches, reference, outputs)
    return mismatches, all(m["near_tie"] for m in mismatches)


def near_tie_rule(pair: ModelPair) -> NearTieRule | None:
    """fp32 must be token-identical to vanilla (no rule); packed formats run bf16
    activations, whose kernels may flip near-ties."""
    if pair.target.weight_format == WeightFormat():
        return None
    return NearTieRule.for_model(pair.target.config, ACTIVATION_DTYPE)


def check_failed(record: Record | BudgetRun) -> bool:
    """Differs from vanilla in a way no near-tie explains (in fp32: differs at all)."""
    return record.lossless is False and not record.near_ties_only


def divergences(outputs: list[list[int]], reference: list[list[int]]) -> list[dict]:
    """Where each prompt's tokens first differ from the reference's."""
    found = []
    for index, (ours, theirs) in enumerate(zip(outputs, reference)):
        if ours != theirs:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            found.append({"prompt": index, "first_diff_token": at, "lengths": [len(ours), len(theirs)]})
    return found


def anchor_runs(method: Method, batch_size: int, temperature: float) -> bool:
    """The anchor is greedy and batch-1 only; every other method runs everywhere."""
    return not method.is_anchor or (batch_size == 1 and temperature == 0)


def bench(pair: ModelPair, methods: list[Method], settings: PolicySettings, best: dict[int, TreeShape],
          prompts: list[str], batch_sizes: list[int], temperatures: list[float], max_new_tokens: int,
          context_length: int, gguf: Path | None = None, near_tie_rule: NearTieRule | None = None) -> list[Record]:
    """Every method at every (temperature, batch size).  Greedy outputs are checked
    against vanilla's: token-identical, or with ``near_tie_rule`` (reduced-precision
    weights) every first divergence judged on the target's logits."""
    records: list[Record] = []
    runs = list(itertools.product(temperatures, batch_sizes))
    planned = sum(anchor_runs(m, b, t) for (t, b) in runs for m in methods)
    bar = tqdm(total=planned, desc="bench", unit="run")
    for temperature, batch_size in runs:
        outputs, rates = {}, {}
        current: list[Record] = []
        for method in (m for m in methods if anchor_runs(m, batch_size, temperature)):
            bar.set_postfix_str(f"{method.label} B={batch_size} T={temperature:g}")
            note = shape = None
            if method.is_anchor:
                outputs[method.label], stats, note = run_anchor(pair, gguf, prompts, max_new_tokens, context_length)
            else:
                chosen, shape = method_settings(method, settings, best, batch_size)
                outputs[method.label], stats = run_one(pair, method, chosen, prompts, batch_size, temperature,
                                                       max_new_tokens, context_length)
            rates[method.label] = stats["tokens_per_s"]
            current.append(Record(method=method.label, batch_size=batch_size, temperature=temperature,
                                  prompts=len(prompts), speedup_vs_vanilla=None, lossless=None,
                                  shape=asdict(shape) if shape else None, note=note,
                                  weight_format=None if method.is_anchor else str(pair.target.weight_format),
                                  **stats))
            bar.update()
        records += current
        for record in current:
            if "vanilla" in rates:
                record.speedup_vs_vanilla = record.tokens_per_s / rates["vanilla"]
            if ANCHOR in rates:
                record.speedup_vs_llamacpp = record.tokens_per_s / rates[ANCHOR]
            if record.method == ANCHOR:
                continue  # other kernels, other numerics: its tokens are not ours to match
            if temperature == 0 and "vanilla" in outputs:
                record.mismatches, record.near_ties_only = greedy_check(pair, near_tie_rule, prompts,
                                                                        outputs[record.method], outputs["vanilla"])
                record.lossless = not record.mismatches
                if check_failed(record):
                    print(f"LOSSLESS CHECK FAILED: {record.method} at batch {batch_size} differs from vanilla "
                          f"on {len(record.mismatches)} prompt(s): {record.mismatches[:3]}", file=sys.stderr)
    bar.close()
    return records


# -------------------------------------------------------------- outputs

def markdown(records: list[Record], dataset: str) -> str:
    """One table per temperature: rows are batch sizes, columns methods (tokens/s,
    speedup, tau)."""
    lines = []
    methods = list(dict.fromkeys(r.method for r in records))
    for temperature in sorted({r.temperature for r in records}):
        lines += [f"### {dataset}, temperature {temperature:g}", "",
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
                    flag = f" ≈ {len(r.mismatches)} near-tie divergence(s)"
                anchor = f", {r.speedup_vs_llamacpp:.2f}× llama.cpp" if r.speedup_vs_llamacpp is not None else ""
                cells.append(f"{r.tokens_per_s:.1f} tok/s, {speed}{anchor}, τ {r.tau:.2f}{flag}")
            lines.append(f"| {batch_size} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(records: list[Record], path: Path, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (method, temperature), group in itertools.groupby(
            sorted(records, key=lambda r: (r.method, r.temperature, r.batch_size)),
            key=lambda r: (r.method, r.temperature)):
        group = [r for r in group if r.speedup_vs_vanilla is not None and r.method != ANCHOR]
        ax.plot([r.batch_size for r in group], [r.speedup_vs_vanilla for r in group], marker="o",
                label=f"{method} (T={temperature:g})")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("speedup vs vanilla (tokens/s)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    _save(fig, path)


# ------------------------------------------------ the paper's Fig. 3 and Fig. 4

# Both figures come from one sweep: EAGLE-2's default tree (depth 6, top-k 10) at
# every verify budget m, on the same prompts, with vanilla per batch size as the
# baseline and, when greedy, the lossless reference.
#
# * Fig. 3 ("acceptance"): acceptance length τ (committed tokens of one sequence in
#   one iteration) against the cumulative value of the nodes it verified (the summed
#   path values: what the draft predicts will be accepted).  If the draft's
#   probabilities were calibrated, τ would average 1 + value (the bonus token).
# * Fig. 4 ("verify-budget"): tokens/s against m per batch size; the best m is marked.

FIGURES = ("acceptance", "verify-budget")
ACCEPTANCE_BIN_WIDTH = 0.5  # cumulative-value bins of the binned mean in Fig. 3


@dataclass
class BudgetRun:
    """One run of EAGLE-2's default depth and top-k at one verify budget ``m``."""

    num_verify_tokens: int
    batch_size: int
    tokens_per_s: float
    tau: float
    mean_verified_tokens: float
    iterations: int
    lossless: bool | None  # greedy only: tokens identical to vanilla's
    near_ties_only: bool | None  # packed weights: every divergence a near-tie (Record's field)
    # One per sequence per iteration: [cumulative value of the verified set, committed tokens]
    points: list[tuple[float, int]]


def acceptance_points(history: list[IterationRecord]) -> list[tuple[float, int]]:
    """(verified set's cumulative value, committed tokens) per sequence per iteration."""
    return [(value, accepted + 1) for r in history for value, accepted in zip(r.verified_value, r.accepted)]


def acceptance_bins(points: list[tuple[float, int]], width: float = ACCEPTANCE_BIN_WIDTH,
                    ) -> list[tuple[float, float, int]]:
    """Mean τ per cumulative-value bin ``[i·width, (i+1)·width)``: (mean value, mean τ,
    points), by increasing value; empty bins are left out."""
    bins: dict[int, list[tuple[float, int]]] = {}
    for value, tau in points:
        bins.setdefault(int(value // width), []).append((value, tau))
    return [(statistics.fmean(v for v, _ in group), statistics.fmean(t for _, t in group), len(group))
            for _, group in sorted(bins.items())]


def budget_sweep(pair: ModelPair, settings: PolicySettings, prompts: list[str], batch_sizes: Sequence[int],
                 budgets: Sequence[int], temperature: float, max_new_tokens: int,
                 context_length: int, rule: NearTieRule | None = None) -> tuple[list[BudgetRun], dict[int, float]]:
    """Every (batch size, m) run of the figures, and vanilla's tokens/s per batch size."""
    runs: list[BudgetRun] = []
    vanilla: dict[int, float] = {}
    bar = tqdm(total=len(batch_sizes) * (len(budgets) + 1), desc="figure sweep", unit="run")
    for batch_size in batch_sizes:
        bar.set_postfix_str(f"vanilla B={batch_size}")
        reference, stats = run_one(pair, Method.parse("vanilla"), settings, prompts, batch_size, temperature,
                                   max_new_tokens, context_length)
        vanilla[batch_size] = stats["tokens_per_s"]
        bar.update()
        for m in budgets:
            bar.set_postfix_str(f"m={m} B={batch_size}")
            shape = replace(EAGLE2_SHAPE, num_verify_tokens=m)
            outputs, seconds, history = decode(pair, Method.parse("eagle2"), settings.with_shape(shape, speculate=True),
                                               prompts, batch_size, temperature, max_new_tokens, context_length)
            stats = summarise(history, sum(len(t) for t in outputs), seconds)
            mismatches, near_ties_only = (greedy_check(pair, rule, prompts, outputs, reference) if temperature == 0
                                          else (None, None))
            run = BudgetRun(num_verify_tokens=m, batch_size=batch_size, tokens_per_s=stats["tokens_per_s"],
                            tau=stats["tau"], mean_verified_tokens=stats["mean_verified_tokens"],
                            iterations=stats["iterations"], lossless=None if mismatches is None else not mismatches,
                            near_ties_only=near_ties_only, points=acceptance_points(history))
            if check_failed(run):
                print(f"LOSSLESS CHECK FAILED: eagle2 m={m} at batch {batch_size} differs from vanilla "
                      f"on {len(mismatches)} prompt(s): {mismatches[:3]}", file=sys.stderr)
            runs.append(run)
            bar.update()
    bar.close()
    return runs, vanilla


def plot_acceptance(runs: list[BudgetRun], path: Path, title: str) -> None:
    """Fig. 3: τ against the verified set's cumulative value, every point faint, the
    mean of each m large, the binned mean as a line, and 1 + value for reference."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.get_cmap("viridis")
    budgets = sorted({r.num_verify_tokens for r in runs})
    points = [p for r in runs for p in r.points]
    for i, m in enumerate(budgets):
        mine = [p for r in runs if r.num_verify_tokens == m for p in r.points]
        colour = colours(i / max(len(budgets) - 1, 1))
        ax.scatter([v for v, _ in mine], [t for _, t in mine], s=6, alpha=0.15, color=colour)
        ax.scatter([statistics.fmean(v for v, _ in mine)], [statistics.fmean(t for _, t in mine)], s=60,
                   color=colour, edgecolor="black", zorder=3, label=f"m={m} (mean)")
    binned = acceptance_bins(points)
    ax.plot([b[0] for b in binned], [b[1] for b in binned], color="black", marker=".", label="binned mean τ")
    top = max(v for v, _ in points)
    ax.plot([0, top], [1, 1 + top], color="grey", lw=0.8, ls="--", label="1 + cumulative value")
    ax.set_xlabel("cumulative value of the verified set (predicted accepted draft tokens)")
    ax.set_ylabel("acceptance length τ (committed tokens per iteration)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    _save(fig, path)


def plot_verify_budget(runs: list[BudgetRun], vanilla: dict[int, float], path: Path, title: str) -> None:
    """Fig. 4: tokens/s against the verify budget m per batch size, best m starred,
    vanilla dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for batch_size in sorted({r.batch_size for r in runs}):
        mine = sorted((r for r in runs if r.batch_size == batch_size), key=lambda r: r.num_verify_tokens)
        line, = ax.plot([r.num_verify_tokens for r in mine], [r.tokens_per_s for r in mine], marker="o",
                        label=f"EAGLE-2 tree, batch {batch_size}")
        best = max(mine, key=lambda r: r.tokens_per_s)
        ax.scatter([best.num_verify_tokens], [best.tokens_per_s], marker="*", s=200, color=line.get_color(),
                   edgecolor="black", zorder=3, label=f"best m={best.num_verify_tokens}, batch {batch_size}")
        ax.axhline(vanilla[batch_size], color=line.get_color(), lw=0.8, ls="--", label=f"vanilla, batch {batch_size}")
    ax.set_xscale("log", base=2)
    budgets = sorted({r.num_verify_tokens for r in runs})
    ax.set_xticks(budgets, [str(m) for m in budgets])
    ax.set_xlabel("verify budget m (num_verify_tokens, root included)")
    ax.set_ylabel("tokens/s")
    ax.set_title(title)
    ax.legend(fontsize=7)
    _save(fig, path)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)


# ------------------------------------------------------------------ main

def anchor_model(methods: list[Method], model_path: str | None) -> tuple[Path | None, list[Method]]:
    """The GGUF the anchor runs, or drop the anchor with one line saying why it cannot run."""
    if not any(m.is_anchor for m in methods):
        return None, methods
    gguf = embedded_gguf_path() if model_path is None else Path(model_path)
    reason = llamacpp_missing()
    if reason is None and gguf.suffix != ".gguf":
        reason = f"the target {model_path} is not a GGUF file"
    if reason is None:
        return gguf, methods
    print(f"skipping {ANCHOR}: {reason}", file=sys.stderr)
    return None, [m for m in methods if not m.is_anchor]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=None,
                        help="comma-separated methods (see above); vanilla is needed for speedups and the "
                             f"lossless check (default: {DEFAULT_METHODS}); not used with --figure")
    parser.add_argument("--dataset", required=True, help="JSONL with 'turns' (first turn used), or one prompt per line")
    parser.add_argument("--batch-size", default="1", help="comma-separated batch sizes, 1..256 (default 1)")
    parser.add_argument("--temperature", default="0",
                        help="comma-separated temperatures, 0..2; 0 = greedy (default 0); one value with --figure")
    parser.add_argument("--num-prompts", type=int, default=16, help="prompts from the start of the dataset (16)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per prompt, 1..4096 (128)")
    parser.add_argument("--profile", help="CAST profile YAML (default profiles/cpu.yaml)")
    parser.add_argument("--db", type=Path, default=None,
                        help="autotune database with the traces eagle2-best is chosen on (default: cast-autotune's)")
    parser.add_argument("--best-traces", type=int, default=20, help="traces replayed per grid point (20)")
    parser.add_argument("--model-path", default=None, help="target model (default: embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--draft-path", default=None, help="draft head (default: the shipped head)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--weight-format", default="auto",
                        help="how the target's linears / LM head are stored: fp32, bf16, int8, int4 or "
                             "'<linears>/<lm_head>' such as int4/int8 (docs/precision.md), or auto: the profile's "
                             "recorded format, else the cheapest in a few timed forwards, as the server decides "
                             "(default: auto)")
    parser.add_argument("--compile", default="off", choices=COMPILE_MODES,
                        help="compile the target's and draft's layers (models/compiled.py): on, off, or auto = "
                             "packed --weight-format only (default: off); compiled before timing starts")
    parser.set_defaults(compile_s=None)  # seconds the compilation took, once done (load_inputs)
    parser.add_argument("--json", type=Path, required=True, help="where to write the records")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown")
    parser.add_argument("--plot", type=Path, help="also write a PNG of speedup vs batch size per method; with "
                                                  "--figure, the figure's PNG (default: --json with .png)")
    parser.add_argument("--figure", choices=FIGURES, default=None,
                        help="instead of the method table, the paper's Fig. 3 (acceptance: τ vs the verified set's "
                             "cumulative value) or Fig. 4 (verify-budget: tokens/s vs m), from EAGLE-2's default "
                             "tree at every --budgets m")
    parser.add_argument("--budgets", default=DEFAULT_BUDGETS,
                        help=f"with --figure: comma-separated verify budgets m, 2..{EAGLE2_SHAPE.pool_size + 1} "
                             "(default %(default)s)")
    parser.set_defaults(format_choice=None)  # set by load_inputs: how 'auto' was resolved
    return parser.parse_args(argv)


def machine_info() -> dict:
    """The machine a result was measured on, for every JSON this tool writes."""
    return {"cpu": cpu_name(), "isa": isa_class(), "device": device_name("cpu"), "cores": os.cpu_count(),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "load_average_1min_at_end": os.getloadavg()[0]}


def command_line(argv: list[str] | None) -> str:
    return " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:]))


def check_run_sizes(args: argparse.Namespace, batch_sizes: Sequence[int]) -> None:
    """Prompt count, new tokens and threads, shared by the table and the figures."""
    if not 1 <= args.num_prompts <= 10_000:
        raise BenchError(f"--num-prompts: must be in [1, 10000], got {args.num_prompts}")
    if args.num_prompts < max(batch_sizes):
        raise BenchError(f"--num-prompts: {args.num_prompts} prompts cannot fill batch size {max(batch_sizes)}; "
                         "give at least as many prompts as the largest --batch-size")
    if not 1 <= args.max_new_tokens <= 4096:
        raise BenchError(f"--max-new-tokens: must be in [1, 4096], got {args.max_new_tokens}")
    try:
        args.weight_format = parse_requested(args.weight_format)
    except ValueError as err:
        raise BenchError(f"--weight-format: {str(err).removeprefix('weight_format: ')}") from None
    if args.threads is not None:
        if not 1 <= args.threads <= (os.cpu_count() or 1):
            raise BenchError(f"--threads: must be in [1, {os.cpu_count()}], got {args.threads}")
        torch.set_num_threads(args.threads)


def timed_sizes(args: argparse.Namespace, settings: PolicySettings) -> tuple[int, ...]:
    """The Ms ``--weight-format auto`` times: 1, plus the largest tree this run verifies."""
    if args.figure:
        return (1, max(parse_list(args.budgets, int, "--budgets", 2, EAGLE2_SHAPE.pool_size + 1)))
    policies = {Method.parse(label.strip()).policy for label in (args.methods or DEFAULT_METHODS).split(",")
                if label.strip()}
    return verify_sizes("vanilla" if policies <= {"vanilla", ANCHOR} else "cast", settings)


def load_inputs(args: argparse.Namespace) -> tuple[list[str], PolicySettings, str, ModelPair]:
    """The dataset's first ``--num-prompts`` texts, the profile's settings and the model pair
    in the resolved weight format (``args.format_choice`` says how it was chosen)."""
    prompt_set = load_prompts(args.dataset)
    if len(prompt_set.texts) < args.num_prompts:
        raise BenchError(f"--num-prompts: {args.dataset} has only {len(prompt_set.texts)} prompts")
    loaded = load_settings(args.profile)
    settings = loaded.profile.settings
    args.format_choice = choose_weight_format(args.weight_format, device="cpu", profile=loaded.profile,
                                              sizes=timed_sizes(args, settings), model_path=args.model_path,
                                              dtype=DTYPES[DTYPE])
    print(args.format_choice.describe(), file=sys.stderr)
    pair = load_model_pair(args.model_path, args.draft_path, "cpu", DTYPE,
                           weight_format=args.format_choice.weight_format)
    if compile_wanted(args.compile, pair.target):
        started = time.perf_counter()
        compile_models(pair.target, pair.draft, max(parse_list(args.batch_size, int, "--batch-size", 1, 256)))
        args.compile_s = round(time.perf_counter() - started, 1)
    return prompt_set.texts[: args.num_prompts], settings, f"{loaded.path} (version {loaded.version})", pair


def model_record(pair: ModelPair, args: argparse.Namespace) -> dict:
    """What every JSON record says about the models: ids, the residual dtype, the weight
    format the target ran and how it was chosen (``--weight-format`` as given, the
    reason, and the measured ms per format and M when it was measured), and whether
    its layers were compiled (and in how many seconds)."""
    choice: FormatChoice | None = args.format_choice
    return {"target": pair.target_id, "draft": pair.draft_id, "dtype": DTYPE,
            "weight_format": str(pair.target.weight_format), "weight_format_requested": args.weight_format,
            "weight_format_reason": choice.reason if choice else None,
            "weight_format_costs_ms": choice.costs_ms if choice else {},
            "compiled": args.compile_s is not None, "compile_s": args.compile_s}


def context_for(pair: ModelPair, prompts: list[str], max_new_tokens: int) -> int:
    return max(len(pair.tokenizer.encode(p)) for p in prompts) + max_new_tokens + 8


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return figure_main(args, argv) if args.figure else table_main(args, argv)


def figure_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--figure``: the budget sweep, its JSON and the chosen figure's PNG."""
    try:
        if args.methods is not None:
            raise BenchError("--methods: not used with --figure (it runs EAGLE-2's tree at each --budgets m)")
        batch_sizes = parse_list(args.batch_size, int, "--batch-size", 1, 256)
        budgets = parse_list(args.budgets, int, "--budgets", 2, EAGLE2_SHAPE.pool_size + 1)
        temperatures = parse_list(args.temperature, float, "--temperature", 0, 2)
        if len(temperatures) != 1:
            raise BenchError(f"--temperature: --figure takes one temperature, got {args.temperature!r}")
        check_run_sizes(args, batch_sizes)
        texts, settings, profile_name, pair = load_inputs(args)
    except (BenchError, AutotuneError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if pair.random_draft:
        print(f"WARNING: no trained draft head; the figures use {pair.draft_id}", file=sys.stderr)
    prompts = [pair.format_prompt(text) for text in texts]
    runs, vanilla = budget_sweep(pair, settings, prompts, batch_sizes, budgets, temperatures[0], args.max_new_tokens,
                                 context_for(pair, prompts, args.max_new_tokens),
                                 near_tie_rule(pair))
    result = {
        "command": command_line(argv), "machine": machine_info(),
        "model": model_record(pair, args),
        "dataset": args.dataset, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
        "temperature": temperatures[0], "figure": args.figure,
        "tree": {"top_k": EAGLE2_SHAPE.top_k, "max_depth": EAGLE2_SHAPE.max_depth},
        "vanilla_tokens_per_s": {str(b): rate for b, rate in vanilla.items()},
        "runs": [asdict(r) for r in runs],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    png = args.plot or args.json.with_suffix(".png")
    dataset = Path(args.dataset).stem
    if args.figure == "acceptance":
        plot_acceptance(runs, png, f"{dataset}: acceptance length vs cumulative value (EAGLE-2 tree)")
    else:
        plot_verify_budget(runs, vanilla, png, f"{dataset}: tokens/s vs verify budget m (EAGLE-2 tree)")
    for run in runs:
        print(f"batch {run.batch_size} m={run.num_verify_tokens}: {run.tokens_per_s:.1f} tok/s, τ {run.tau:.2f}, "
              f"verified {run.mean_verified_tokens:.1f}, lossless {run.lossless}")
    return 1 if any(check_failed(r) for r in runs) else 0


def table_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The method table: every method at every batch size and temperature."""
    try:
        methods = [Method.parse(label.strip()) for label in (args.methods or DEFAULT_METHODS).split(",")
                   if label.strip()]
        if not methods:
            raise BenchError("--methods: give at least one method")
        batch_sizes = parse_list(args.batch_size, int, "--batch-size", 1, 256)
        temperatures = parse_list(args.temperature, float, "--temperature", 0, 2)
        check_run_sizes(args, batch_sizes)
        texts, settings, profile_name, pair = load_inputs(args)
        if pair.random_draft and any(m.policy != "vanilla" for m in methods):
            print(f"WARNING: no trained draft head; speculative methods use {pair.draft_id}", file=sys.stderr)
        gguf, methods = anchor_model(methods, args.model_path)
        if not methods:
            raise BenchError("--methods: nothing left to run")
        best = {}
        if any(m.shape == "best" for m in methods):
            best = best_static_shapes(pair, settings, batch_sizes, args.db or default_db_path(), args.best_traces)
    except (BenchError, AutotuneError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    prompts = [pair.format_prompt(text) for text in texts]
    records = bench(pair, methods, settings, best, prompts, batch_sizes, temperatures, args.max_new_tokens,
                    context_for(pair, prompts, args.max_new_tokens), gguf, near_tie_rule(pair))
    result = {
        "command": command_line(argv), "machine": machine_info(),
        "model": model_record(pair, args),
        "profile": profile_name,
        "dataset": args.dataset,
        "eagle2_best_shapes": {str(b): asdict(s) for b, s in best.items()},
        "records": [asdict(r) for r in records],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    table = markdown(records, Path(args.dataset).stem)
    print(table)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    if args.plot:
        plot(records, args.plot, f"{Path(args.dataset).stem}: speedup vs batch size")
    return 1 if any(check_failed(r) for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
