"""The shipped draft head (EAGLE-3, one layer, an 8,192-token LM head) per weight format on
this CPU, and its LM head's share: whole draft forwards at batch 1 and 1-16 rows (a tree
layer's frontier) on a 256-token context, as the engine times them (`role_timer`), and the LM
head alone on the same rows, every (format, part, rows) timed round-robin (`measure_costs`).
The target, whose embedding the head reads, runs int4/int8 (what profiles/cpu-avx512.yaml
ships) and is not timed.

Usage (repository root): .venv/bin/python docs/results/draft_formats_avx512_2026-12-04/draft_formats.py ROUNDS JSON
[FORMATS, comma-separated: default fp32,bf16,int8,int4] [TARGET FORMAT: default int4/int8; with int4vnni/int8vnni
the heads run the target's fused CPU layers, as the engine loads them]"""
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from sglang_cast.engine.format_choice import MEASURE_CONTEXT, measure_costs  # noqa: E402
from sglang_cast.engine.table_calibration import role_timer  # noqa: E402
from sglang_cast.hardware import cpu_name, isa_class  # noqa: E402
from sglang_cast.models import load_draft, load_target  # noqa: E402
from sglang_cast.models.weights import DraftFormat  # noqa: E402
from sglang_cast.training.config import DEFAULT_OUTPUT  # noqa: E402

rounds, out = int(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(2)
FORMATS = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("fp32", "bf16", "int8", "int4")
TARGET = sys.argv[4] if len(sys.argv) > 4 else "int4/int8"
ROWS = (1, 4, 8, 16)
target, config, _ = load_target(None, "cpu", torch.float32, TARGET)
drafts = {fmt: load_draft(DEFAULT_OUTPUT, target, "cpu", torch.float32, DraftFormat.parse(fmt)) for fmt in FORMATS}
timers = {fmt: role_timer(target, draft, "draft", 1, MEASURE_CONTEXT + max(ROWS), None) for fmt, draft in drafts.items()}
hidden = {rows: torch.randn(1, rows, config.hidden_size) for rows in ROWS}


def lm_head_once(fmt: str, rows: int) -> float:
    """Milliseconds of one call of the head's LM head on ``rows`` hidden states."""
    with torch.inference_mode():
        start = time.perf_counter()
        drafts[fmt].lm_head(hidden[rows])
        return (time.perf_counter() - start) * 1e3


def once(key: str, rows: int) -> float:
    fmt, part = key.split(":")
    return timers[fmt].time_once(1, MEASURE_CONTEXT, rows) if part == "forward" else lm_head_once(fmt, rows)


keys = [f"{fmt}:{part}" for fmt in FORMATS for part in ("forward", "lm_head")]
ms = measure_costs(once, keys, ROWS, rounds=rounds, warmup=3, budget_s=float("inf"))
record = {"cpu": cpu_name(), "isa_class": isa_class(), "threads": 2, "rounds": rounds, "context": MEASURE_CONTEXT,
          "target_format": TARGET,
          "draft": str(DEFAULT_OUTPUT), "median_ms": {key: {str(r): v for r, v in by_rows.items()} for key, by_rows in ms.items()}}
print(f"{'format':6} " + " ".join(f"{f'{r} rows: forward (lm_head share)':>30}" for r in ROWS))
for fmt in FORMATS:
    print(f"{fmt:6} " + " ".join(f"{ms[f'{fmt}:forward'][r]:16.3f} ms ({ms[f'{fmt}:lm_head'][r] / ms[f'{fmt}:forward'][r]:5.1%})"
                                 for r in ROWS))
out.write_text(json.dumps(record, indent=1))
