"""One int4 linear of the served target (layer 0's o_proj, 576 x 576, one row), us per call,
median of 5 x 2000 calls, where the call runs:
  main      on the main thread, which loaded the model (its OpenMP pool exists);
  second    on a second thread while the main thread's pool exists (the server before the fix);
  passing   in a fresh process, the model loaded on a thread that then exited, called from
            another thread (the server after the fix).
Usage: pools.py [passing]   (without the argument: main and second)"""
import statistics
import sys
import threading
import time

import torch
from served_pair import load

from sglang_cast.server.build_thread import run_on_passing_thread


def time_linear(linear, label):
    x = torch.randn(1, 576)
    for _ in range(50):
        linear(x)
    runs = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(2000):
            linear(x)
        runs.append((time.perf_counter() - began) / 2000 * 1e6)
    print(f"{label:8s} {statistics.median(runs):6.1f} us per call (min {min(runs):.1f}, max {max(runs):.1f})", flush=True)


def on_thread(fn):
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()


passing = sys.argv[1:] == ["passing"]
pair, _ = run_on_passing_thread(load) if passing else load()
linear = pair.target.layers[0].self_attn.o_proj
if passing:
    on_thread(lambda: time_linear(linear, "passing"))
else:
    time_linear(linear, "main")
    on_thread(lambda: time_linear(linear, "second"))
    time_linear(linear, "main")
