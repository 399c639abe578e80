"""Judge draft heads against each other prompt by prompt, on the benchmarks' first turns.

A continued training run moves τ by a few hundredths, less than τ varies between prompts,
so heads are compared on the same prompts and the difference is read prompt by prompt:

  decode   decodes each first turn under every head, one prompt under all heads before the
           next (the eval stage's procedure: EAGLE-2's tree, full pool, batch 1, greedy), and
           keeps each prompt's accepted counts and output tokens in a JSON file. Resumable: a
           (prompt, head) pair already in the file is skipped, so a head can be added later.
           --weight-format F stores the target (and, with '+<draft>', the heads) as a profile
           serves them, e.g. int4vnni/int8vnni+int8vnni (default fp32, the eval stage's); a
           file holds one format.
  summary  prints, per head, τ pooled over the first 20 and all prompts; against a baseline
           head, the pooled difference, its 95 % bootstrap interval over prompts (2,000
           resamples, seed 0) and how many prompts it wins and loses; and how many prompts
           every head decoded to the same tokens (greedy decoding is lossless, so all should).
  eval     train_draft's eval stage on one finished head (a soup, a shipped head): tree τ and
           chain α on the first --prompts first turns, fp32 target, into a report JSON as
           train_draft's report carries it (`{"eval": {...}}`). Resumable: each (benchmark,
           mode) run is kept under $SGLANG_CAST_CACHE/eval/<head digest>-<prompts>.

Usage (repository root):
  .venv/bin/python tools/compare_heads.py decode OUT.json mt_bench --prompts 0:80 \\
      run22=sglang_cast/assets/smollm2-135m-eagle run23=~/.cache/sglang_cast/rebuild/run23/head
  .venv/bin/python tools/compare_heads.py summary OUT.json [OUT.json ...] [--baseline run22]
  .venv/bin/python tools/compare_heads.py eval docs/results/draft_head_report_NAME.json HEAD [--prompts 20]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_cast.cast import committed_tokens  # noqa: E402
from sglang_cast.models.weights import DraftFormat, WeightFormat, WeightFormatError  # noqa: E402

RESAMPLES = 2000
FIRST = 20  # the eval stage's prompt count, the other pooled column


class CompareError(ValueError):
    """Bad input, said in words that name the argument: printed, never a stack trace."""


@dataclass(frozen=True)
class Comparison:
    """One head against the baseline over the same prompts."""
    delta: float                   # pooled τ of the head minus the baseline's
    interval: tuple[float, float]  # 95 % bootstrap interval of ``delta`` over prompts
    up: int                        # prompts where the head's τ is higher
    level: int
    down: int


def pooled_tau(rows: list[dict], head: str) -> float:
    """Tokens committed per iteration over every iteration of ``rows`` (not a mean of per-prompt τ)."""
    accepted = [a for row in rows for a in row[head]["accepted"]]
    return committed_tokens(accepted) / max(len(accepted), 1)


def compare(rows: list[dict], head: str, baseline: str) -> Comparison:
    """``head`` against ``baseline``: the pooled difference, its interval over resampled prompts, wins and losses."""
    rng = random.Random(0)
    diffs = []
    for _ in range(RESAMPLES):
        sample = [rows[rng.randrange(len(rows))] for _ in rows]
        diffs.append(pooled_tau(sample, head) - pooled_tau(sample, baseline))
    diffs.sort()
    per_prompt = [row[head]["tau"] - row[baseline]["tau"] for row in rows]
    up, down = sum(d > 1e-9 for d in per_prompt), sum(d < -1e-9 for d in per_prompt)
    return Comparison(pooled_tau(rows, head) - pooled_tau(rows, baseline),
                      (diffs[int(0.025 * RESAMPLES)], diffs[int(0.975 * RESAMPLES) - 1]),
                      up, len(rows) - up - down, down)


def summary(data: dict, baseline: str | None) -> str:
    """The Markdown table of one ``decode`` file, over the prompts every head has decoded."""
    heads = list(data["heads"])
    baseline = baseline or heads[0]
    if baseline not in heads:
        raise CompareError(f"--baseline {baseline!r}: not a head of this file (its heads: {', '.join(heads)})")
    heads = [baseline] + [h for h in heads if h != baseline]
    rows = [data["prompts"][k] for k in sorted(data["prompts"], key=int)]
    rows = [row for row in rows if all(h in row for h in heads)]
    if not rows:
        raise CompareError(f"no prompt has been decoded under every head ({', '.join(heads)}) yet")
    served = "" if file_format(data) == "fp32" else f", weight format {file_format(data)}"
    lines = [f"## {data['benchmark']}: {len(rows)} prompts, heads {', '.join(heads)}{served}",
             f"| head | τ first {FIRST} | τ all | Δ vs {baseline} (all) | 95 % interval | prompts up / level / down |",
             "| --- | --- | --- | --- | --- | --- |",
             f"| {baseline} | {pooled_tau(rows[:FIRST], baseline):.3f} | {pooled_tau(rows, baseline):.3f} | | | |"]
    for head in heads[1:]:
        c = compare(rows, head, baseline)
        lines.append(f"| {head} | {pooled_tau(rows[:FIRST], head):.3f} | {pooled_tau(rows, head):.3f} | "
                     f"{c.delta:+.3f} | {c.interval[0]:+.3f} … {c.interval[1]:+.3f} | {c.up} / {c.level} / {c.down} |")
    same = sum(all(row[h]["tokens"] == row[baseline]["tokens"] for h in heads) for row in rows)
    lines.append(f"\nidentical outputs under every head: {same} / {len(rows)}\n")
    return "\n".join(lines)


def decode(out: Path, benchmark: str, first: int, last: int, heads: dict[str, Path],
           weight_format: WeightFormat = WeightFormat()) -> None:
    """Fill ``out`` with each prompt in ``[first, last)`` decoded under every head (skipping pairs already
    there), the target and the heads stored in ``weight_format``."""
    import torch

    from sglang_cast.training.config import EAGLE2_SHAPE, EvalConfig
    from sglang_cast.training.evaluate import benchmark_prompts, evaluate_mode
    from sglang_cast.training.target import Target

    done = load(out) if out.is_file() else {"benchmark": benchmark, "heads": {}, "prompts": {},
                                            "weight_format": str(weight_format)}
    if done["benchmark"] != benchmark:
        raise CompareError(f"{out} holds {done['benchmark']}, not {benchmark}")
    if file_format(done) != str(weight_format):
        raise CompareError(f"{out} holds rows decoded in weight format {file_format(done)}, not {weight_format} "
                           "(a file holds one format: give it its own file)")
    torch.set_num_threads(2)
    target = Target.embedded(str(replace(weight_format, draft=DraftFormat())))
    prompts = benchmark_prompts(target, Path("datasets"), benchmark, last)
    if len(prompts) < last:
        raise CompareError(f"--prompts: {benchmark} has {len(prompts)} first turns, asked up to {last}")
    done["heads"].update({name: str(path) for name, path in heads.items()})
    for i in range(first, last):
        row = done["prompts"].setdefault(str(i), {})
        for name, head in heads.items():
            if name not in row:
                run = evaluate_mode(target, head, [prompts[i]], EAGLE2_SHAPE, EvalConfig.max_new_tokens,
                                    f"{name} prompt {i}", draft_format=weight_format.draft)
                row[name] = {"tau": run["tau"], "accepted": run["accepted"], "tokens": run["outputs"][0]}
        out.write_text(json.dumps(done))  # after every prompt: an interrupted run resumes here
        print(i, " ".join(f"{name} {r['tau']:.3f}" for name, r in row.items()), flush=True)


def evaluate_head(report: Path, head: Path, prompts: int) -> dict:
    """train_draft's eval stage on ``head`` (its first ``prompts`` first turns a benchmark, fp32 target),
    written to ``report``; each (benchmark, mode) run is kept in a work dir named by the head's digest."""
    import time
    from dataclasses import asdict

    from sglang_cast.models.cache import cache_root
    from sglang_cast.models.digest import weights_digest
    from sglang_cast.training.config import EvalConfig, PipelineConfig
    from sglang_cast.training.evaluate import build_eval
    from sglang_cast.training.target import Target

    cfg = PipelineConfig(benchmark_dir=Path("datasets"), eval=EvalConfig(prompts=prompts))
    work = cache_root() / "eval" / f"{weights_digest(head).removeprefix('sha256:')}-{prompts}"
    work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    summary = build_eval(Target.embedded(), cfg, head, work)
    report.write_text(json.dumps({"eval": {"head": str(head), "settings": asdict(cfg.eval),
                                           "seconds": time.time() - start, "summary": summary}}, indent=1) + "\n")
    return summary


def parse_head(folder: str, name: str) -> Path:
    """A draft head folder (one with a config.json); ``name`` says which in the error."""
    path = Path(folder).expanduser()
    if not (path / "config.json").is_file():
        raise CompareError(f"head {name}: {path} is not a draft head folder (no config.json)")
    return path


def file_format(data: dict) -> str:
    """The weight format a file's rows were decoded in (files from before the flag: fp32)."""
    return data.get("weight_format", "fp32")


def parse_format(text: str) -> WeightFormat:
    try:
        return WeightFormat.parse(text)
    except WeightFormatError as error:
        raise CompareError(f"--weight-format: {error.reason}") from None


def load(path: Path) -> dict:
    """A ``decode`` file, checked enough that ``summary`` cannot fail halfway through it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CompareError(f"{path}: not a readable compare_heads JSON file ({error})") from None
    if not isinstance(data, dict) or not {"benchmark", "heads", "prompts"} <= set(data):
        raise CompareError(f"{path}: not a compare_heads file (needs keys benchmark, heads, prompts)")
    return data


def parse_heads(specs: list[str]) -> dict[str, Path]:
    """NAME=HEAD pairs, each HEAD a head folder with a config.json."""
    heads = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not folder:
            raise CompareError(f"head {spec!r}: expected NAME=FOLDER, e.g. run22=sglang_cast/assets/smollm2-135m-eagle")
        heads[name] = parse_head(folder, name)
    return heads


def parse_range(text: str) -> tuple[int, int]:
    """FIRST:LAST, 0 <= FIRST < LAST, as Python slices count."""
    first, sep, last = text.partition(":")
    try:
        bounds = int(first), int(last)
    except ValueError:
        bounds = None
    if not sep or bounds is None or not 0 <= bounds[0] < bounds[1]:
        raise CompareError(f"--prompts {text!r}: expected FIRST:LAST with 0 <= FIRST < LAST, e.g. 0:80")
    return bounds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("decode", help="decode first turns under every head into a JSON file (resumable)")
    run.add_argument("out", type=Path, help="the JSON file to fill (created, or resumed when it exists)")
    run.add_argument("benchmark", help="a benchmark of datasets/, e.g. mt_bench or humaneval")
    run.add_argument("--prompts", default="0:80", help="first turns FIRST:LAST to decode (default 0:80)")
    run.add_argument("--weight-format", default="fp32",
                     help="how the target (and, with '+<draft>', the heads) are stored, as a profile serves them, "
                          "e.g. int4vnni/int8vnni+int8vnni (default fp32: the eval stage's)")
    run.add_argument("heads", nargs="+", metavar="NAME=HEAD", help="head folders, each under a name for the table")
    table = commands.add_parser("summary", help="the Markdown table of one or more decode files")
    table.add_argument("files", nargs="+", type=Path)
    table.add_argument("--baseline", help="the head the others are compared with (default: the file's first)")
    stage = commands.add_parser("eval", help="train_draft's eval stage on one head, into a report JSON (resumable)")
    stage.add_argument("report", type=Path, help="the report JSON to write, e.g. docs/results/draft_head_report_X.json")
    stage.add_argument("head", help="the head folder")
    stage.add_argument("--prompts", type=int, default=20,
                       help="first turns a benchmark, 1 or more (default 20: train_draft --eval-prompts 20)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "decode":
            decode(args.out, args.benchmark, *parse_range(args.prompts), parse_heads(args.heads),
                   parse_format(args.weight_format))
        elif args.command == "eval":
            if args.prompts < 1:
                raise CompareError(f"--prompts: expected 1 or more first turns a benchmark, got {args.prompts}")
            print(json.dumps(evaluate_head(args.report, parse_head(args.head, "HEAD"), args.prompts), indent=1))
        else:
            print("\n".join(summary(load(path), args.baseline) for path in args.files))
    except CompareError as error:
        print(f"compare_heads: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
