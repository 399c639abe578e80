"""Served output tok/s of each arm's server, interleaved: the first 8 first turns of a
benchmark (DATASET, default mt_bench) as chat completions, 64 tokens each (ignore_eos,
greedy); B = 1 (4 requests one after another) and 4 concurrent clients (8 requests).
Usage: [DATASET=humaneval] ab.py ROUNDS NAME=PORT [NAME=PORT ...]
The last line is every round's tok/s as JSON."""
import json
import os
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DATASET = os.environ.get("DATASET", "mt_bench")
texts = [json.loads(line)["turns"][0] for line in open(ROOT / f"datasets/{DATASET}.jsonl")][:8]


def ask(port: int, text: str, tokens: int = 64) -> int:
    body = json.dumps({"model": "default", "messages": [{"role": "user", "content": text}],
                       "max_tokens": tokens, "temperature": 0, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                     {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(request))["usage"]["completion_tokens"]


def sequential(port: int) -> float:
    began = time.perf_counter()
    return sum(ask(port, t) for t in texts[:4]) / (time.perf_counter() - began)


def concurrent(port: int) -> float:
    began = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        tokens = sum(pool.map(lambda t: ask(port, t), texts))
    return tokens / (time.perf_counter() - began)


def main() -> None:
    rounds = int(sys.argv[1])
    arms = {name: int(port) for name, port in (a.split("=") for a in sys.argv[2:])}
    for port in arms.values():
        ask(port, texts[0], 8)  # first use of each server
    runs = {f"{name} {level}": [] for name in arms for level in ("B1", "C4")}
    for r in range(rounds):
        order = list(arms.items()) if r % 2 == 0 else list(reversed(arms.items()))
        for name, port in order:
            runs[f"{name} B1"].append(sequential(port))
            runs[f"{name} C4"].append(concurrent(port))
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in runs.items()), flush=True)
    for key, values in runs.items():
        print(f"{key:14s} median {statistics.median(values):6.1f} tok/s (min {min(values):.1f}, max {max(values):.1f})")
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
