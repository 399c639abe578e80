"""Live tau of CAST (profiles/cpu.yaml) at B = 1 on the tuning prompts `collect` recorded
(autotune/prompts.txt, first N, 48 new tokens, as the traces), to set against replay.

    .venv/bin/python docs/results/b1_length_2026-11-30/live_tau.py 16 48
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
import torch  # noqa: E402

from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import SamplingParams  # noqa: E402
from sglang_cast.engine import EngineArgs, build_engine  # noqa: E402
from sglang_cast.engine.engine import StepLog  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

torch.set_num_threads(2)
count, new_tokens = int(sys.argv[1]), int(sys.argv[2])
loaded = load_profile(str(ROOT / "profiles/cpu.yaml"))
engine = build_engine(EngineArgs(policy="cast", settings=loaded.profile.settings, profile=loaded.profile,
                                 max_batch_size=1))
texts = load_prompts().texts[:count]
prompts = [engine.tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                                tokenize=False) for t in texts]
log = StepLog()
for p in prompts:
    engine.generate([p], SamplingParams(max_new_tokens=new_tokens), on_step=log)
tokens = sum(r.accepted[0] + 1 for r in log.records)
print(f"{count} tuning prompts x {new_tokens} tokens, B = 1: {len(log.records)} iterations, live tau "
      f"{tokens / len(log.records):.3f}")
