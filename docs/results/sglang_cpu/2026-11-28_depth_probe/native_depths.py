"""Native CAST at batch 1 with a profile: per iteration, the depth the SGLang plugin would predict vs the depth the exact rule drafts (the script run for docs/results/2026-11-28_sglang_depth_probe.md; args: profile, prompts, warm-up prompts)."""
import json, sys, collections
from pathlib import Path
from sglang_cast.cast import policies
from sglang_cast.profile import load_profile
from sglang_cast.cast import SamplingParams
from sglang_cast.engine import EngineArgs, build_engine
from sglang_cast.models.loader import resolve_model_dir
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[4]
profile = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "profiles/cpu.yaml")
n_prompts = int(sys.argv[2]) if len(sys.argv) > 2 else 4
settings = load_profile(Path(profile)).profile.settings
records = []
orig_keep = policies.IterationPlan.keep
def wrap(cls):
    keep, grow = cls.keep, cls.grow
    def k(self, layer, values):
        if layer == 1 and self.learns:
            self._pred = self.predict_depth(values)
            self._layers = 1
        return keep(self, layer, values)
    def g(self, layer):
        r = grow(self, layer)
        if self.learns:
            if r:
                self._layers = layer + 1
            else:
                self._rec = (self._pred, self._layers)
        return r
    cls.keep, cls.grow = k, g
vc = policies.IterationPlan.verify_count
vrec = []
def v(self, tree):
    r = vc(self, tree)
    if getattr(self, "_rec", None):
        records.append(self._rec); vrec.append((self._rec[1], r))
        with open("native_plan.jsonl", "a") as f:
            f.write(json.dumps({"pred": self._pred, "kept": self.kept, "u": self.utility, "c": self.draft_cost,
                                "A": {k: list(q) for k, q in self.depth_ratios._fifos.items()}, "verified": r}) + "\n")
    return r
policies.IterationPlan.verify_count = v
for name in dir(policies):
    obj = getattr(policies, name)
    if isinstance(obj, type) and issubclass(obj, policies.IterationPlan) and obj is not policies.IterationPlan:
        if "keep" in obj.__dict__:
            wrap(obj)
tok = AutoTokenizer.from_pretrained(resolve_model_dir(None))
prompts = [json.loads(l)["turns"][0] for l in (ROOT / "datasets/mt_bench.jsonl").read_text().splitlines()][:n_prompts]
ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=False) for p in prompts]
engine = build_engine(EngineArgs(policy="cast", settings=settings, weight_format="fp32", max_batch_size=1))
params = SamplingParams(max_new_tokens=64, temperature=0.0, ignore_eos=True)
warm = int(sys.argv[3]) if len(sys.argv) > 3 else 0
allp = [json.loads(l)["turns"][0] for l in (ROOT / "datasets/mt_bench.jsonl").read_text().splitlines()]
for p in allp[10:10 + warm]:
    engine.generate([tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=False)], params)
records.clear(); vrec.clear()
res = [engine.generate([i], params)[0] for i in ids]
print("tau", sum(r.completion_tokens for r in res) / sum(r.stats.iterations for r in res))
c = collections.Counter(records)
print("(predicted, drafted): count", sorted(c.items()))
under = sum(v for (p, d), v in c.items() if p < d)
print(f"under-predicted {under}/{len(records)}")
print("(depth, verified):", sorted(collections.Counter(vrec).items()))
