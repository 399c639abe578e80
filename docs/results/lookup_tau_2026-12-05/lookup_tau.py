"""τ of EAGLE-2's tree (depth 6, top-k 10, 60 tokens, full pool) with and without the
prompt-lookup branch (`cast.context_lookup`, depth 8, match-length values), with the shipped
head: the eval stage's procedure (greedy, batch 1, fp32 target, the first 20 first turns,
128 new tokens), the two modes one after the other per benchmark, outputs compared.
Usage (repository root): lookup_tau.py OUT.json"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from sglang_cast.cast import EAGLE2_SHAPE  # noqa: E402
from sglang_cast.training.config import DEFAULT_BENCHMARKS, DEFAULT_OUTPUT  # noqa: E402
from sglang_cast.training.evaluate import benchmark_prompts, evaluate_mode  # noqa: E402
from sglang_cast.training.target import Target  # noqa: E402

out = Path(sys.argv[1])
target = Target.embedded()
results = {}
for name in ("mt_bench", "humaneval"):
    prompts = benchmark_prompts(target, DEFAULT_BENCHMARKS, name, 20)
    runs = {label: evaluate_mode(target, DEFAULT_OUTPUT, prompts, EAGLE2_SHAPE, 128, f"{name} {label}", depth)
            for label, depth in (("tree", 0), ("tree + lookup 8", 8))}
    base = runs["tree"]["outputs"]
    results[name] = {label: {"tau": round(r["tau"], 3), "iterations": r["iterations"],
                             "generated_tokens": r["generated_tokens"], "seconds": round(r["seconds"], 1),
                             "outputs_as_tree": sum(a == b for a, b in zip(r["outputs"], base))}
                     for label, r in runs.items()}
    print(name, json.dumps(results[name]), flush=True)
    out.write_text(json.dumps(results, indent=1))
