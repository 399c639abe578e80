"""Lossless in fp32: EAGLE-2's tree with and without the lookup branch emit the same
tokens on the real model (fp32 target and head on the CPU, greedy, batch 1)."""
import json, sys, torch
from pathlib import Path
from sglang_cast.models import load_target
from sglang_cast.training.target import Target
from sglang_cast.training.evaluate import evaluate_mode, benchmark_prompts
from sglang_cast.training.config import DEFAULT_OUTPUT, DEFAULT_BENCHMARKS
from sglang_cast.cast import EAGLE2_SHAPE, ContextLookup

model, config, tok = load_target(None, "cpu", torch.float32)
t = Target(model, tok, config.eos_token_ids)
results = {}
for name in ("mt_bench", "humaneval"):
    prompts = benchmark_prompts(t, DEFAULT_BENCHMARKS, name, 8)
    a = evaluate_mode(t, DEFAULT_OUTPUT, prompts, EAGLE2_SHAPE, 96, f"{name} tree")
    b = evaluate_mode(t, DEFAULT_OUTPUT, prompts, EAGLE2_SHAPE, 96, f"{name} tree + lookup 8", ContextLookup())
    results[name] = {"prompts": len(prompts), "identical_outputs": sum(x == y for x, y in zip(a["outputs"], b["outputs"])),
                     "tau_tree": round(a["tau"], 3), "tau_tree_lookup": round(b["tau"], 3)}
    print(name, json.dumps(results[name]), flush=True)
Path(sys.argv[1]).write_text(json.dumps(results, indent=1))
