"""τ of EAGLE-2's tree (depth 6, top-k 10, 60 tokens, full pool) with and without the
prompt-lookup branch (`cast.context_lookup`, depth 8), live in the native engine: the
eval stage's procedure (greedy, batch 1, the first 20 first turns, 128 new tokens), the
target (bf16, or the dtype given second) and the shipped head on this CPU, the two modes
interleaved per benchmark.  Usage: lookup_tau.py OUT.json [bfloat16|float32]"""
import json, sys, torch
from pathlib import Path
from sglang_cast.models import load_target
from sglang_cast.training.target import Target
from sglang_cast.training.evaluate import evaluate_mode, benchmark_prompts
from sglang_cast.training.config import DEFAULT_OUTPUT, DEFAULT_BENCHMARKS
from sglang_cast.cast import EAGLE2_SHAPE, ContextLookup

out = Path(sys.argv[1])
model, config, tok = load_target(None, "cpu", getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "bfloat16"))
t = Target(model, tok, config.eos_token_ids)
modes = {"tree": None, "tree + lookup 8": ContextLookup(depth=8)}
results = {}
for name in ("mt_bench", "humaneval"):
    prompts = benchmark_prompts(t, DEFAULT_BENCHMARKS, name, 20)
    runs = {label: evaluate_mode(t, DEFAULT_OUTPUT, prompts, EAGLE2_SHAPE, 128, f"{name} {label}", lookup)
            for label, lookup in modes.items()}
    base = runs["tree"]["outputs"]
    results[name] = {label: {"tau": round(r["tau"], 3), "iterations": r["iterations"],
                             "generated_tokens": r["generated_tokens"], "seconds": round(r["seconds"], 1),
                             "tokens_per_s": round(r["generated_tokens"] / r["seconds"], 2),
                             "outputs_as_tree": sum(a == b for a, b in zip(r["outputs"], base))}
                     for label, r in runs.items()}
    print(name, json.dumps(results[name]), flush=True)
    out.write_text(json.dumps(results, indent=1))
