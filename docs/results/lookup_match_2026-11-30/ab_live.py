"""Interleaved live A/B at B = 1 on one machine: CAST with the prompt-lookup branch as it
was (the latest 2-token match, every token valued 0.75 · 0.9^(i-1)) against the longest
match valued by its measured rates (`context_lookup.MATCH_VALUES`), on the shipped
profile's trees (its branch depth) and with the branch forced to depth 8; plain decoding
alongside.  Per round tokens/s; per variant τ, verified nodes per step and the share of
outputs equal to plain decoding's.

Usage: ab_live.py PROFILE DATASET PROMPTS TOKENS ROUNDS"""
import contextlib
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch  # noqa: E402
from autotune.models import load_model_pair  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import ContextLookup, MatchValue, SamplingParams, make_policy  # noqa: E402
from sglang_cast.cast import settings as settings_module  # noqa: E402
from sglang_cast.engine import StepLog  # noqa: E402
from sglang_cast.engine.format_choice import choose_weight_format  # noqa: E402
from tools.benchkit.inputs import load_settings  # noqa: E402

OLD = functools.partial(ContextLookup, max_ngram=2, match_values=(MatchValue(2, 0.75, 0.9),))


@contextlib.contextmanager
def lookup_rule(old: bool):
    """Buckets build their branch as ``ContextLookup(depth=...)`` at every plan: swap the class."""
    settings_module.ContextLookup = OLD if old else ContextLookup
    try:
        yield
    finally:
        settings_module.ContextLookup = ContextLookup


profile, dataset, n, tokens, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(2)
loaded = load_settings(profile, 'cpu').profile
fmt = choose_weight_format('auto', device='cpu', profile=loaded).weight_format
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
texts = [pair.format_prompt(t) for t in load_prompts(dataset).texts[:n]]
ctx = max(len(pair.tokenizer.encode(t)) for t in texts) + tokens + 8
params = SamplingParams(max_new_tokens=tokens)
shipped, deep = loaded.settings, loaded.settings.with_lookup(8)
variants = {'vanilla': (shipped, 'vanilla', False), 'cast old': (shipped, 'cast', True),
            'cast new': (shipped, 'cast', False), 'cast+lookup8 old': (deep, 'cast', True),
            'cast+lookup8 new': (deep, 'cast', False)}
engines = {name: pair.engine(make_policy(policy, s), 1, ctx) for name, (s, policy, _) in variants.items()}
for name, engine in engines.items():
    with lookup_rule(variants[name][2]):
        engine.generate(texts[:2], params)
results = {name: [] for name in engines}
outputs = {}
for r in range(rounds):
    for name, engine in engines.items():
        log = StepLog()
        with lookup_rule(variants[name][2]):
            t = time.perf_counter(); out = engine.generate(texts, params, on_step=log); wall = time.perf_counter() - t
        recs = log.records
        tau = sum(sum(x.accepted) + x.batch_size for x in recs) / sum(x.batch_size for x in recs)
        results[name].append((sum(len(o.token_ids) for o in out) / wall, tau, statistics.fmean(x.verified for x in recs)))
        outputs[name] = [o.token_ids for o in out]
    print(f"round {r}: " + ", ".join(f"{k} {v[-1][0]:.1f}" for k, v in results.items()), flush=True)
print(f"== {dataset} B=1 {n} prompts x {tokens} tokens, {rounds} rounds, {fmt}, {profile}")
for name, rs in results.items():
    ratios = [x[0] / v[0] for x, v in zip(rs, results['vanilla'])]
    same = sum(a == b for a, b in zip(outputs[name], outputs['vanilla']))
    print(f"  {name:17s} tok/s {statistics.median(x[0] for x in rs):6.1f}  vs plain median {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}, {max(ratios):.3f}]  tau {statistics.median(x[1] for x in rs):.3f}  "
          f"verified/step {statistics.median(x[2] for x in rs):.2f}  outputs = plain {same}/{len(texts)}")
