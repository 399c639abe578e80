"""Per-prompt τ with EAGLE-2's tree (full pool, batch 1, greedy: the eval stage's procedure)
for several heads on the same benchmark prompts, so a τ difference can be read prompt by prompt.

Usage (repository root): .venv/bin/python docs/results/run21_2026-12-01/per_prompt.py \
    OUT.json BENCHMARK FIRST LAST NAME=HEAD [NAME=HEAD ...]
Resumable: a (prompt, head) pair already in OUT.json is skipped, so a head can be added later.
"""

import json
import sys
from pathlib import Path

import torch

from sglang_cast.training.config import EAGLE2_SHAPE, EvalConfig
from sglang_cast.training.evaluate import benchmark_prompts, evaluate_mode
from sglang_cast.training.target import Target


def main() -> None:
    out, benchmark, first, last = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    heads = dict(arg.split("=", 1) for arg in sys.argv[5:])
    torch.set_num_threads(2)
    target = Target.embedded()
    max_new = EvalConfig.max_new_tokens
    prompts = benchmark_prompts(target, Path("datasets"), benchmark, last)
    done = json.loads(out.read_text()) if out.is_file() else {"benchmark": benchmark, "heads": {}, "prompts": {}}
    done["heads"].update(heads)
    for i in range(first, last):
        row = done["prompts"].setdefault(str(i), {})
        for name, head in heads.items():  # interleaved: each prompt under every head before the next
            if name in row:
                continue
            run = evaluate_mode(target, Path(head), [prompts[i]], EAGLE2_SHAPE, max_new, f"{name} prompt {i}")
            row[name] = {"tau": run["tau"], "accepted": run["accepted"], "tokens": run["outputs"][0]}
        out.write_text(json.dumps(done))
        print(i, " ".join(f"{name} {r['tau']:.3f}" for name, r in row.items()), flush=True)


if __name__ == "__main__":
    main()
