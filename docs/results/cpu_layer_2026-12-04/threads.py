"""Does our kernel library split its work across torch's threads?  The int8vnni LM head
(49,152 x 576) on one activation row at 1 and 2 threads, alternating; medians of 30.
Before the libraries were built with -fopenmp, at::parallel_for ran every call on the
calling thread and the two read the same.  Usage: threads.py"""
import statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
from sglang_cast.models.vnni_dot import VnniInt8
from sglang_cast.models.weights import Format, int8_quantize

Format.INT8_VNNI.load_kernel()
head = VnniInt8.pack(*int8_quantize(torch.randn(49152, 576)))
x = torch.randn(1, 576)
times = {1: [], 2: []}
for _ in range(30):
    for threads in (1, 2):
        torch.set_num_threads(threads)
        head.matmul(x)
        t = time.perf_counter(); head.matmul(x); times[threads].append((time.perf_counter() - t) * 1e3)
for threads, ts in times.items():
    print(f"threads {threads}: LM head, one row, {statistics.median(ts):.3f} ms")
