"""CAST (profiles/cpu.yaml) against plain decoding at B = 1 by output position: tokens
committed per iteration (tau), ms per token and the speed ratio per position window,
plain and CAST interleaved prompt by prompt, several rounds.

    .venv/bin/python docs/results/b1_length_2026-11-30/by_position.py mt_bench 8 256 2 [ignore-eos]

Also prints each answer's length and the share of its 4-grams seen earlier in it (a
repetition measure: a looping answer drafts easily).
"""
import collections
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]
import torch  # noqa: E402

from sglang_cast.cast import SamplingParams  # noqa: E402
from sglang_cast.engine import EngineArgs, build_engine  # noqa: E402
from sglang_cast.engine.engine import StepLog  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

torch.set_num_threads(2)
ds, n, new_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
ignore_eos = len(sys.argv) > 5 and sys.argv[5] == "ignore-eos"  # default: answers end at their EOS
lines = [json.loads(line) for line in (ROOT / f"datasets/{ds}.jsonl").read_text().splitlines()]
prompts = [x["turns"][0] if "turns" in x else x["prompt"] for x in lines][:n]
loaded = load_profile(str(ROOT / "profiles/cpu.yaml"))
engines = {name: build_engine(EngineArgs(policy=name, settings=loaded.profile.settings, profile=loaded.profile,
                                         max_batch_size=1))
           for name in ("vanilla", "cast")}
WINDOWS = [w for w in (0, 32, 64, 128, 256, 512, 1024) if w < new_tokens] + [new_tokens]
tokenizer = engines["cast"].tokenizer
prompts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
           for t in prompts]  # as a chat request, like the server and tools/bench.py
params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=ignore_eos)
for engine in engines.values():
    engine.generate([prompts[0]], SamplingParams(max_new_tokens=16, temperature=0.0))  # warm
# (method, round, window) -> [tokens, iterations, ms]
acc = collections.defaultdict(lambda: [0, 0, 0.0])
for r in range(rounds):
    for p in prompts:
        for name, engine in engines.items():
            log = StepLog()
            out = engine.generate([p], params, on_step=log)[0]
            if r == 0 and name == "cast":
                ids = list(out.token_ids)
                grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
                seen, repeated = set(), 0
                for g in grams:
                    repeated += g in seen
                    seen.add(g)
                print(f"answer of {len(ids)} tokens ({out.finish_reason}), {repeated / max(1, len(grams)):.2f} of its 4-grams repeated")
            done = 1  # the prefill's token
            for rec in log.records:
                window = max(i for i, w in enumerate(WINDOWS[:-1]) if done >= w)
                tokens = rec.accepted[0] + 1
                cell = acc[(name, r, window)]
                cell[0] += tokens
                cell[1] += 1
                cell[2] += rec.step_ms
                done += tokens
print(f"{ds}, {n} prompts x {new_tokens} new tokens ({'past EOS' if ignore_eos else 'to EOS'}), B = 1, {rounds} rounds; per output-position window: "
      "CAST tau, plain and CAST ms per token, CAST/plain speed (median of rounds [min-max])")
for i in range(len(WINDOWS) - 1):
    tau = [acc[("cast", r, i)][0] / max(1, acc[("cast", r, i)][1]) for r in range(rounds)]
    ms = {m: [acc[(m, r, i)][2] / max(1, acc[(m, r, i)][0]) for r in range(rounds)] for m in engines}
    ratio = [a / b for a, b in zip(ms["vanilla"], ms["cast"])]
    print(f"tokens {WINDOWS[i]:4d}-{WINDOWS[i + 1]:4d}: tau {statistics.median(tau):.3f} | plain "
          f"{statistics.median(ms['vanilla']):6.2f} ms/tok, CAST {statistics.median(ms['cast']):6.2f} | "
          f"{statistics.median(ratio):.3f}x [{min(ratio):.3f}-{max(ratio):.3f}]")
tot = {m: [sum(acc[(m, r, i)][2] for i in range(len(WINDOWS) - 1)) /
           sum(acc[(m, r, i)][0] for i in range(len(WINDOWS) - 1)) for r in range(rounds)] for m in engines}
ratio = [a / b for a, b in zip(tot["vanilla"], tot["cast"])]
print(f"all {new_tokens} tokens: {statistics.median(ratio):.3f}x [{min(ratio):.3f}-{max(ratio):.3f}] "
      "(step clocks, prefills excluded)")
