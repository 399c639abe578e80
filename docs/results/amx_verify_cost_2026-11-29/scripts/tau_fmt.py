"""τ (EAGLE-2's default tree) and chain α of the shipped head per draft format, on the
published target format; greedy B=1; benchmark first turns (evaluation only)."""
import sys, json
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, TreeShape, PolicySettings, CostModel, committed_tokens
from sglang_cast.cast.policies import Eagle2Policy
from sglang_cast.engine import StepLog
from sglang_cast.training.evaluate import acceptance
fmt, ds, n, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
texts = [pair.format_prompt(t) for t in load_prompts(f'/work/main/datasets/{ds}.jsonl').texts[:n]]
out = {"format": fmt, "dataset": ds, "prompts": n, "max_new_tokens": new}
for mode, shape in (("tree", TreeShape(10, 6, 60)), ("chain", TreeShape(1, 6, 7))):
    policy = Eagle2Policy(PolicySettings.single(CostModel.linear(1.0, 0.0), shape=shape))
    engine = pair.engine(policy, 1, 1024)
    log = StepLog(); toks = []
    for t in texts:
        toks.append(engine.generate([t], SamplingParams(max_new_tokens=new), on_step=log)[0].token_ids)
    acc = [a for r in log.records for a in r.accepted]
    out[mode] = {"tau": committed_tokens(acc) / len(acc), "iterations": len(acc)}
    if mode == "chain":
        out[mode].update(acceptance(acc, 6))
    out[mode + "_outputs"] = toks
print(json.dumps({k: v for k, v in out.items() if not k.endswith('outputs')}), flush=True)
json.dump(out, open(f'/tmp/s27/tau/{ds}_{fmt.split("+")[-1]}.json', 'w'))
