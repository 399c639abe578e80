"""What one small op costs the first time after the process did something else for a while,
and right after (warm): a 4-element torch add, a 4-element numpy add, a 20-entry dict in
Python, after nothing, a sleep, 5 ms of Python, and a 100 MB torch sum (what a forward's
weight stream does to the caches).  30 repetitions, medians.
Usage: cold_ops.py THREADS"""
import statistics
import sys
import time

import numpy as np
import torch

torch.set_num_threads(int(sys.argv[1]))
small, array = torch.zeros(4), np.zeros(4)
big = torch.randn(25_000_000)


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e6


def busy_python() -> None:
    end = time.perf_counter() + 0.005
    while time.perf_counter() < end:
        pass


BEFORE = {"nothing": lambda: None, "sleep 1 ms": lambda: time.sleep(0.001), "sleep 10 ms": lambda: time.sleep(0.01),
          "5 ms of Python": busy_python, "100 MB torch sum": lambda: big.sum()}
OPS = {"torch add": lambda: small.add(1), "numpy add": lambda: array + 1,
       "python dict": lambda: {i: i for i in range(20)}}
print(f"threads {torch.get_num_threads()}; us, median of 30: first call after X / the same op again at once")
for name, before in BEFORE.items():
    cells = []
    for op_name, op in OPS.items():
        first, again = [], []
        for _ in range(30):
            before()
            first.append(timed(op))
            again.append(timed(op))
        cells.append(f"{op_name} {statistics.median(first):6.1f} / {statistics.median(again):4.1f}")
        # each op measured after its own `before`: one op's cold path does not warm the next one's
    print(f"{name:18s} " + " | ".join(cells))
