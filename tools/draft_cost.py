"""What one draft forward costs in each weight format on this CPU, and its parts' shares.

    python tools/draft_cost.py --target-format int4/int8 --rows 1,7 --json out.json

On a CPU a speculative step pays a draft forward per tree layer, so the draft's cost
counts as much as its acceptance (#48).  For each draft format (fp32, bf16, int8, and
int4, which re-quantises the trained head) and each row count (1: the catch-up of one
token at batch 1; the tree's top-k: one layer's frontier), this times, batch 1 at a
256-token context, the shipped head's whole forward as the engine calls it (target
features in), its LM head alone (``[rows, 576] → [rows, 8192]``) and its ``fc``
alone, beside one target forward of one token in ``--target-format`` (the unit a
plain step costs).  Everything is timed round-robin, one call of each per round, so
load on a shared machine hits all alike; medians over ``--rounds``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from sglang_cast.engine.format_choice import MEASURE_CONTEXT, measure_costs  # noqa: E402
from sglang_cast.engine.runner import feature_width  # noqa: E402
from sglang_cast.engine.timing import ForwardTimer, time_calls  # noqa: E402
from sglang_cast.hardware import cpu_name, isa_class  # noqa: E402
from sglang_cast.models import KVCache, load_draft, load_target  # noqa: E402
from sglang_cast.models.weights import DraftFormat, Format  # noqa: E402
from sglang_cast.training.config import DEFAULT_OUTPUT  # noqa: E402
from sglang_cast.flags import OneLineParser, int_at_least, int_list  # noqa: E402

PARTS = ("forward", "lm_head", "fc")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draft-path", type=Path, default=DEFAULT_OUTPUT, help="the head (default: the shipped one)")
    p.add_argument("--target-format", default="int4/int8", help="the target's weight format (int4/int8)")
    p.add_argument("--formats", default="fp32,bf16,int8,int4", help="draft formats, comma-separated")
    p.add_argument("--rows", type=int_list(1, 64), default=(1, 7),
                   help="draft rows per forward, increasing, comma-separated (1,7)")
    p.add_argument("--rounds", type=int_at_least(1), default=30, help="timed rounds (30)")
    p.add_argument("--threads", type=int_at_least(1), default=2, help="torch CPU threads (2)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    accepted = [f.value for f in Format]
    args.formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not args.formats or any(f not in accepted for f in args.formats):
        p.error(f"argument --formats: expected comma-separated formats of {', '.join(accepted)}, got {args.formats}")
    return args


def part_timers(draft, target, config, rows_max: int) -> dict[str, object]:
    """Per part: a ``time(rows) -> ms`` of one call (batch 1)."""
    cache = KVCache.for_model(config, 1, MEASURE_CONTEXT + rows_max, torch.device("cpu"), torch.float32,
                              num_layers=1)
    forward = ForwardTimer(draft, cache, config.vocab_size, feature_width(target, draft))
    hidden = config.hidden_size

    def alone(module, width):
        def time_once(rows):
            x = torch.randn(1, rows, width)
            with torch.inference_mode():
                return time_calls(lambda: module(x), torch.device("cpu"), 0, 1).median_ms
        return time_once

    return {"forward": lambda rows: forward.time_once(1, MEASURE_CONTEXT, rows),
            "lm_head": alone(draft.lm_head, hidden), "fc": alone(draft.fc, 3 * hidden)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    target, config, _ = load_target(None, "cpu", torch.float32, args.target_format)
    target_cache = KVCache.for_model(config, 1, MEASURE_CONTEXT + 1, torch.device("cpu"), torch.float32)
    target_timer = ForwardTimer(lambda *a: target.logits(target(*a).hidden), target_cache, config.vocab_size)
    timers = {"target": lambda rows: target_timer.time_once(1, MEASURE_CONTEXT, 1)}
    for fmt in args.formats:
        draft = load_draft(args.draft_path, target, "cpu", torch.float32, DraftFormat.parse(fmt))
        for part, timer in part_timers(draft, target, config, max(args.rows)).items():
            timers[f"{fmt}:{part}"] = timer
    costs = measure_costs(lambda key, rows: timers[key](rows), list(timers), args.rows, rounds=args.rounds,
                          warmup=3, budget_s=float("inf"))
    plain = costs["target"][args.rows[0]]  # the target runs one token whatever the rows (timed once per row count)
    print(f"target forward, 1 token, {args.target_format}: {plain:.2f} ms  ({cpu_name()}, "
          f"ISA class {isa_class()}, {args.threads} threads)")
    rows = []
    for fmt in args.formats:
        for m in args.rows:
            row = {"format": fmt, "rows": m, **{part: costs[f"{fmt}:{part}"][m] for part in PARTS}}
            row["lm_head_share"] = row["lm_head"] / row["forward"]
            row["of_target_step"] = row["forward"] / plain
            rows.append(row)
            print(f"draft {fmt:>5} rows {m:>2}: forward {row['forward']:.3f} ms ({100 * row['of_target_step']:.0f} % "
                  f"of a target step), lm_head {row['lm_head']:.3f} ms ({100 * row['lm_head_share']:.0f} %), "
                  f"fc {row['fc']:.3f} ms")
    if args.json is not None:
        args.json.write_text(json.dumps({"command": sys.argv, "cpu": cpu_name(), "isa_class": isa_class(), "threads": args.threads,
                                         "target_format": args.target_format, "target_forward_ms": plain,
                                         "rounds": args.rounds, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
