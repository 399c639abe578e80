"""B=8 mt_bench 16x32: vanilla vs cast engine; total, admit, iterate, retire time per round."""
import resource, sys, time, statistics, torch, collections
sys.path.insert(0, "/work/main")
from autotune.models import load_model_pair
from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from tools.benchkit.inputs import load_settings
torch.set_num_threads(2)
prof = load_settings("profiles/cpu-avx2.yaml", "cpu").profile
pair = load_model_pair(None, None, "cpu", "float32", weight_format="int4/int8+int8")
texts = [pair.format_prompt(t) for t in load_prompts("datasets/mt_bench.jsonl").texts[:16]]
B = int(sys.argv[1]) if len(sys.argv) > 1 else 8
engines = {m: pair.engine(make_policy(m, prof.settings), B, 1024) for m in ("vanilla", "cast")}
acc = {m: collections.defaultdict(list) for m in engines}
def timed(m, obj, name):
    f = getattr(obj, name)
    def w(*a, **k):
        t = time.perf_counter(); f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; r = f(*a, **k); acc[m][name].append(time.perf_counter() - t)
        acc[m][name + "_flt"].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0); return r
    setattr(obj, name, w)
for m, e in engines.items():
    timed(m, e, "_admit"); timed(m, e.runner, "iterate"); timed(m, e, "_retire"); timed(m, e.runner, "prefill")
params = [SamplingParams(max_new_tokens=32, ignore_eos=True)] * len(texts)
for e in engines.values(): e.generate(texts, params)
res = {m: collections.defaultdict(list) for m in engines}
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    for m in (list(engines) if i % 2 == 0 else list(engines)[::-1]):
        acc[m].clear(); t = time.perf_counter(); engines[m].generate(texts, params); tot = time.perf_counter() - t
        res[m]["total"].append(tot)
        for k, v in acc[m].items(): res[m][k].append(sum(v))
        res[m]["n_iter"].append(len(acc[m]["iterate"]))
for m, d in res.items():
    print(m, {k: (round(statistics.median(v), 3), [round(x, 2) for x in v]) for k, v in d.items()})
