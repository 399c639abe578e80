"""The two new ops warm, against the torch reads they replace: greedy tokens of [1, rows, 49152] fp32 logits,
and a draft layer's top-8 children of [1, rows, 8192]; 2 threads, median of 7 x 500 back-to-back calls.
Usage (repository root): ops_warm.py"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch  # noqa: E402

from sglang_cast.cast import sampling  # noqa: E402
from sglang_cast.engine.draft_expander import on_host, torch_children  # noqa: E402
from sglang_cast.models import cpu_layer  # noqa: E402

torch.set_num_threads(2)
cpu_layer.KERNEL.load()
offsets = torch.randint(0, 40000, (8192,))
to_target = lambda ids: ids + offsets[ids]  # noqa: E731
CALLS = {
    "greedy, torch blocked": (sampling.greedy_tokens, 49152),
    "greedy, op": (cpu_layer.step_op("greedy_tokens"), 49152),
    "children k 8, torch": (lambda x: torch_children(to_target)(x, 8), 8192),
    "children k 8, op": (lambda x: on_host(cpu_layer.step_op("top_children")(x, 8, offsets), 8), 8192),
}
for rows in (1, 6, 13):
    cells = []
    for name, (call, vocab) in CALLS.items():
        x = torch.randn(1, rows, vocab)
        samples = []
        for _ in range(7):
            started = time.perf_counter()
            for _ in range(500):
                call(x)
            samples.append((time.perf_counter() - started) / 500 * 1e6)
        cells.append(f"{name} {statistics.median(samples):6.1f}")
    print(f"rows {rows:2d}: " + " | ".join(cells) + " us")
