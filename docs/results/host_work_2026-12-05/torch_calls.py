"""Python-level torch calls per B = 1 CAST iteration outside its forwards, by calling line (TorchFunctionMode), on
the tiny random pair of tools/host_work.py (top-k 3, depth 6, 18 verified).  Usage (repository root): torch_calls.py"""
import collections, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch
from torch.overrides import TorchFunctionMode
from tools import host_work as hw
from sglang_cast.cast import SamplingParams
from sglang_cast.engine.runner import SpeculativeRunner
args = hw.parse_args(["--policies", "cast", "--batch-size", "1", "--top-k", "3", "--max-depth", "6", "--num-verify-tokens", "18"])
engine = hw.tiny_engine("cast", 1, args)
params = SamplingParams(max_new_tokens=args.max_new_tokens)
engine.generate(hw.PROMPTS, params)
state = {"in_fwd": 0, "in_it": 0, "its": 0}
c = collections.Counter()
class Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, a=(), kw=None):
        if state["in_it"] and not state["in_fwd"]:
            f = sys._getframe(1)
            while f and "sglang_cast/" not in f.f_code.co_filename:
                f = f.f_back
            where = f"{f.f_code.co_filename.split('sglang_cast/')[-1]}:{f.f_lineno} {f.f_code.co_name}" if f else "?"
            c[(getattr(func, '__name__', str(func)), where)] += 1
        return func(*a, **(kw or {}))
def wrap(name, key):
    f = getattr(SpeculativeRunner, name)
    def w(*a, **k):
        state[key] += 1
        try: return f(*a, **k)
        finally: state[key] -= 1
    setattr(SpeculativeRunner, name, w)
wrap("target_forward", "in_fwd"); wrap("draft_forward", "in_fwd")
it = SpeculativeRunner.iterate
def iterate(self, r):
    state["its"] += 1; state["in_it"] += 1
    try: return it(self, r)
    finally: state["in_it"] -= 1
SpeculativeRunner.iterate = iterate
with Mode():
    engine.generate(hw.PROMPTS, params)
n = state["its"]
print("iterations", n, "calls per iteration", sum(c.values()) / n)
for (name, where), k in c.most_common(70):
    print(f"{k / n:6.2f} {name:22s} {where}")
