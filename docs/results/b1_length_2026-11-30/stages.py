"""B = 1 iterations split into the engine's own stages (set-up, drafting, verify, draft
catch-up, the rest) for CAST with profiles/cpu.yaml and for EAGLE-2 trees of fixed shape,
interleaved per prompt, each set against what the profile charges.
Prompts go in as raw text (no chat template), as in b1_step_gap_2026-11-30/step_gap.py:
this times stages; acceptance is measured with the chat template in by_position.py.

    .venv/bin/python docs/results/b1_length_2026-11-30/stages.py mt_bench 4 [rounds]
"""
import collections
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
import torch  # noqa: E402

from sglang_cast.cast import PolicySettings, SamplingParams, TreeShape, charge  # noqa: E402
from sglang_cast.engine import EngineArgs, build_engine  # noqa: E402
from sglang_cast.engine import runner as runner_module  # noqa: E402
from sglang_cast.engine.engine import StepLog  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

torch.set_num_threads(2)
ds, n = sys.argv[1], int(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
lines = [json.loads(line) for line in (ROOT / f"datasets/{ds}.jsonl").read_text().splitlines()]
prompts = [x["turns"][0] if "turns" in x else x["prompt"] for x in lines][:n]
loaded = load_profile(str(ROOT / "profiles/cpu.yaml"))
costs = loaded.profile.settings.costs

STAGES: list[list[float]] = []  # every iteration's stage list, in order
_read = runner_module.StageClock.read


def recording_read(self):
    stages = _read(self)
    STAGES.append(stages)
    return stages


runner_module.StageClock.read = recording_read

variants = {
    "vanilla": ("vanilla", loaded.profile.settings),
    "cast": ("cast", loaded.profile.settings),
    "eagle2-k1d1": ("eagle2", PolicySettings.single(costs, shape=TreeShape(1, 1, 2))),
    "eagle2-k1d2": ("eagle2", PolicySettings.single(costs, shape=TreeShape(1, 2, 3))),
}
engines = {name: build_engine(EngineArgs(policy=p, settings=s, profile=loaded.profile, max_batch_size=1))
           for name, (p, s) in variants.items()}
params = SamplingParams(max_new_tokens=64, temperature=0.0, ignore_eos=True)
for engine in engines.values():
    engine.generate([prompts[0]], SamplingParams(max_new_tokens=16, temperature=0.0))  # warm
rows = collections.defaultdict(list)  # (variant, depth, verified) -> per-iteration tuples
for r in range(rounds):
    for p in prompts:
        for name, engine in engines.items():
            log = StepLog()
            STAGES.clear()
            engine.generate([p], params, on_step=log)
            spec = [s for s in STAGES if len(s) == 5]  # speculative iterations' clocks
            for rec, st in zip(log.records, spec if len(spec) == len(log.records) else [None] * len(log.records)):
                depth = len(rec.plan.kept)
                top = max(rec.accepted) if rec.accepted else 0
                ch_d, ch_v = charge(rec.plan, rec.verified, depth, top)
                fw_d, fw_v = charge(rec.plan, rec.verified, depth, top, host=False)
                rows[(name, depth, rec.verified)].append((rec.step_ms, ch_d + ch_v, fw_d + fw_v, st))
print(f"{ds}, {n} prompts x 64 tokens x {rounds} rounds, B = 1; ms medians")
print("variant depth verified n | step charge forwards-charged | setup drafting verify catch-up rest")
for key in sorted(rows):
    v = rows[key]
    med = lambda f: statistics.median(f(x) for x in v)  # noqa: E731
    stages = "" if v[0][3] is None else " ".join(f"{med(lambda x, i=i: x[3][i]):6.2f}" for i in range(5))
    print(f"{key[0]:12s} {key[1]} {key[2]:2d} {len(v):4d} | {med(lambda x: x[0]):6.2f} {med(lambda x: x[1]):6.2f} "
          f"{med(lambda x: x[2]):6.2f} | {stages}")
