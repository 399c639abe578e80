"""In the engine, after each real target forward: `SpeculativeRunner.verify`'s exclusive µs
per iteration with the blocked argmax (`cast.greedy_tokens`) against torch.argmax,
alternating round by round in one process.  Usage: greedy_in_engine.py PROFILE DATASET PROMPTS POLICY ROUNDS"""
import statistics, sys
import torch
from setup_b1 import setup
from sglang_cast.cast.sampling import greedy_tokens
from sglang_cast.engine import StepLog, runner as runner_module
from sglang_cast.engine.runner import SpeculativeRunner
from tools.host_work import StageTimer

profile, dataset, n, policy, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
run = setup(profile, dataset, n)
texts, params, engine = run.texts, run.params, run.engine(policy)
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
