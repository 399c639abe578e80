"""The same requests without the server: B = 1 engines on the main thread, the embedded
pair as profiles/cpu-avx512.yaml serves it, the first 4 mt_bench first turns x 64 tokens
(ignore_eos), CAST and plain decoding alternating, ROUNDS rounds.  Usage: anchor.py ROUNDS"""
import json
import statistics
import sys
import time

from served_pair import ROOT, load

from sglang_cast.cast import SamplingParams, make_policy

pair, settings = load()
texts = [pair.format_prompt(json.loads(line)["turns"][0]) for line in open(ROOT / "datasets/mt_bench.jsonl")][:4]
params = SamplingParams(max_new_tokens=64, ignore_eos=True)
engines = {policy: pair.engine(make_policy(policy, settings), 1, 2048) for policy in ("cast", "vanilla")}
for engine in engines.values():
    engine.generate(texts[:1], SamplingParams(max_new_tokens=8))
runs = {policy: [] for policy in engines}
for _ in range(int(sys.argv[1])):
    for policy, engine in engines.items():
        began = time.perf_counter()
        tokens = sum(len(engine.generate([t], params)[0].token_ids) for t in texts)
        runs[policy].append(tokens / (time.perf_counter() - began))
for policy, values in runs.items():
    print(f"engine {policy:8s} B1 median {statistics.median(values):6.1f} tok/s "
          f"(min {min(values):.1f}, max {max(values):.1f})")
print(json.dumps(runs))
