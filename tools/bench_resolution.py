"""How far apart can two identical engines measure?  The resolution of tools/bench.py.

    python tools/bench_resolution.py --batch-size 1,2 --rounds 6 --profile profiles/cpu-avx512.yaml \\
        --json docs/results/live_gate/resolution_avx512.json

At each batch size it builds three engines on one loaded model pair: ``vanilla``, a
second, identical ``vanilla'`` and ``cast`` on ``--profile``, and runs them in
tools/bench.py's interleaved rounds (warm-up excluded, order alternating each round).
``vanilla'/vanilla`` is what the bench reads when nothing differs: a ``cast/vanilla``
inside its range is not a measured difference.  Each ratio is also split by which
engine ran first in the round, which shows a bias by position.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from autotune.models import load_model_pair  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import make_policy  # noqa: E402
from sglang_cast.engine.format_choice import choose_weight_format  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402
from tools.benchkit.records import machine_info  # noqa: E402
from tools.benchkit.inputs import parse_device  # noqa: E402
from tools.benchkit.rounds import EngineRunner, interleave, sampling  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", type=Path, required=True, help="the CAST profile the cast engine runs")
    parser.add_argument("--dataset", default="datasets/mt_bench.jsonl", help="prompts (default: mt_bench)")
    parser.add_argument("--batch-size", default="1,2", help="comma-separated batch sizes (default: 1,2)")
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts per decode (default: 8)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per prompt (default: 32)")
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds, even >= 4 (default: 6)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--json", type=Path, required=True, help="where to write the record")
    args = parser.parse_args(argv)
    if args.rounds < 4 or args.rounds % 2:
        parser.error(f"--rounds must be even and >= 4 (each order runs half of them), got {args.rounds}")
    try:
        args.batch_sizes = [int(b) for b in args.batch_size.split(",")]
    except ValueError:
        parser.error(f"--batch-size: expected comma-separated integers, got {args.batch_size!r}")
    if not all(1 <= b <= 256 for b in args.batch_sizes):
        parser.error(f"--batch-size: each must be in [1, 256], got {args.batch_size!r}")
    return args


def ratios(ours: list[float], theirs: list[float]) -> dict:
    """Round-by-round ratios, their median, and the medians of even rounds (the
    given order) and odd rounds (reversed) separately."""
    paired = [a / b for a, b in zip(ours, theirs)]
    return {"rounds": [round(r, 4) for r in paired], "median": round(statistics.median(paired), 4),
            "min": round(min(paired), 4), "max": round(max(paired), 4),
            "median_even_rounds": round(statistics.median(paired[0::2]), 4),
            "median_odd_rounds": round(statistics.median(paired[1::2]), 4)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_profile(args.profile)
    settings = loaded.profile.settings
    choice = choose_weight_format("auto", device="cpu", profile=loaded.profile, sizes=(1,), model_path=None,
                                  dtype=torch.float32)
    pair = load_model_pair(None, None, "cpu", "float32", weight_format=choice.weight_format)
    prompts = [pair.format_prompt(t) for t in load_prompts(args.dataset).texts[: args.num_prompts]]
    params = sampling(len(prompts), 0.0, args.max_new_tokens)
    context = max(len(pair.tokenizer.encode(p)) for p in prompts) + args.max_new_tokens + 8
    results = []
    for batch in args.batch_sizes:
        runners = {label: EngineRunner(pair.engine(make_policy(policy, settings), batch, context), prompts, params)
                   for label, policy in (("vanilla", "vanilla"), ("vanilla'", "vanilla"), ("cast", "cast"))}
        measured = interleave(runners, args.rounds)
        base = measured["vanilla"].rates
        row = {"batch_size": batch, "tokens_per_s": {k: [round(r, 2) for r in m.rates] for k, m in measured.items()},
               "vanilla'/vanilla": ratios(measured["vanilla'"].rates, base),
               "cast/vanilla": ratios(measured["cast"].rates, base)}
        print(json.dumps(row), flush=True)
        results.append(row)
    record = {"command": " ".join(["tools/bench_resolution.py"] + (argv or sys.argv[1:])),
              "machine": machine_info(parse_device("cpu", "float32")), "profile": str(args.profile),
              "weight_format": choice.weight_format, "dataset": args.dataset, "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "results": results}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
