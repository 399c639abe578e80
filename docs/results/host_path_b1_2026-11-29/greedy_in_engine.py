"""In the engine, after each real target forward: `SpeculativeRunner.verify`'s exclusive µs
per iteration with the blocked argmax (`cast.greedy_tokens`) against torch.argmax,
alternating round by round in one process.  Usage: greedy_in_engine.py PROFILE DATASET PROMPTS POLICY ROUNDS"""
import statistics, sys
sys.path.insert(0, '/work/main')
import torch
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.cast.sampling import greedy_tokens
from sglang_cast.engine import StepLog, runner as runner_module
from sglang_cast.engine.format_choice import choose_weight_format
from sglang_cast.engine.runner import SpeculativeRunner
from tools.benchkit.inputs import load_settings
from tools.host_work import StageTimer

profile, dataset, n, policy, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
torch.set_num_threads(2)
loaded = load_settings(profile, 'cpu').profile
wf = choose_weight_format('auto', device='cpu', profile=loaded).weight_format
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=wf)
texts = [pair.format_prompt(t) for t in load_prompts(dataset).texts[:n]]
ctx = max(len(pair.tokenizer.encode(t)) for t in texts) + 40
engine = pair.engine(make_policy(policy, loaded.settings), 1, ctx)
params = SamplingParams(max_new_tokens=32)
engine.generate(texts[:2], params)
variants = {'blocked': greedy_tokens, 'torch.argmax': lambda logits: torch.argmax(logits, dim=-1)}
us = {name: [] for name in variants}
for r in range(rounds):
    for name, fn in variants.items():
        runner_module.greedy_tokens = fn
        log, timer = StepLog(), StageTimer([(SpeculativeRunner, 'verify')])
        with timer.installed():
            engine.generate(texts, params, on_step=log)
        us[name].append(timer.us['SpeculativeRunner.verify'] / len(log.records))
for name, v in us.items():
    print(f"{policy} {name:14s} verify us/iter median {statistics.median(v):.0f} rounds {[round(x) for x in v]}")
