"""Per B=1 iteration: measured draft / verify / step ms against what profiles/cpu.yaml charges.

    .venv/bin/python docs/results/b1_step_gap_2026-11-30/step_gap.py mt_bench 6 cast [weight-format]
"""
import json, sys, statistics, collections
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the repository
sys.path[:0] = [str(ROOT)]
import torch
from sglang_cast.profile import load_profile
from sglang_cast.cast import SamplingParams, charge
from sglang_cast.engine import EngineArgs, build_engine
from sglang_cast.engine.engine import StepLog
torch.set_num_threads(2)
ds = sys.argv[1]; n = int(sys.argv[2]); policy = sys.argv[3] if len(sys.argv) > 3 else "cast"
prompts = [json.loads(l)["turns"][0] if "turns" in json.loads(l) else json.loads(l)["prompt"] for l in (ROOT / f"datasets/{ds}.jsonl").read_text().splitlines()][:n]
loaded = load_profile(str(ROOT / "profiles/cpu.yaml"))
fmt = sys.argv[4] if len(sys.argv) > 4 else "auto"
engine = build_engine(EngineArgs(policy=policy, settings=loaded.profile.settings, profile=loaded.profile, max_batch_size=1, weight_format=fmt))
params = SamplingParams(max_new_tokens=64, temperature=0.0, ignore_eos=True)
engine.generate([prompts[0]], SamplingParams(max_new_tokens=16, temperature=0.0))  # warm
log = StepLog()
for p in prompts:
    engine.generate([p], params, on_step=log)
rows = collections.defaultdict(list)
for r in log.records:
    depth = len(r.plan.kept)
    ch_draft, ch_verify = charge(r.plan, r.verified, depth, max(r.accepted) if r.accepted else 0)
    fw_draft, fw_verify = charge(r.plan, r.verified, depth, max(r.accepted) if r.accepted else 0, host=False)
    rows[(depth, r.verified)].append((r.step_ms, r.draft_ms, r.verify_ms, ch_draft + ch_verify, ch_draft, ch_verify, fw_draft + fw_verify))
tot_step = sum(x[0] for v in rows.values() for x in v); tot_ch = sum(x[3] for v in rows.values() for x in v)
print(f"{ds} {policy} iterations {len(log.records)} step/charge {tot_step / tot_ch:.3f}")
print("depth verified n | step ms charge ms | draft meas/charge | verify meas/charge | host beyond forwards meas/charge")
for k in sorted(rows):
    v = rows[k]; med = lambda i: statistics.median(x[i] for x in v)
    host_meas = med(0) - med(1) - med(2)
    print(f"{k[0]} {k[1]:2d} {len(v):3d} | {med(0):6.2f} {med(3):6.2f} | {med(1):6.2f} {med(4):6.2f} | {med(2):6.2f} {med(5):6.2f} | rest {host_meas:5.2f} charged-host {med(3) - med(6):5.2f}")
