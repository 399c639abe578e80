import sys, copy, numpy as np
from dataclasses import replace
from autotune.store import Store
from sglang_cast.cast import make_policy
from sglang_cast.cast.trace import replay_iteration
from sglang_cast.profile import load_profile
from sglang_cast.sglang_plugin.lookup_branch import iteration_depth
settings = load_profile(sys.argv[2] if len(sys.argv) > 2 else "profiles/cpu.yaml").profile.settings
DRAFT_ID = "/work/main/sglang_cast/assets/smollm2-135m-eagle#sha256:c443ad1a096e"  # as the traces were stored
st = Store(str(__import__("pathlib").Path.home() / ".cache/sglang_cast/autotune.db"))
traces = [s.trace for s in st.traces("embedded:SmolLM2-135M-Instruct", DRAFT_ID)]
B = int(sys.argv[1])
traces = [t for t in traces if t.batch_size == B]

def predict(plan, root_values, ratio):
    if plan.max_depth == 0: return 0
    probe = replace(plan, kept=[], utility=[], draft_cost=[], draft_ms=0.0, draft_forward_ms=0.0, verified=0, learns=False)
    values, layer = np.asarray(root_values, dtype=np.float64)[:, :plan.top_k], 1
    while True:
        probe.keep(layer, values)
        if not probe.grow(layer): return layer
        values = values * ratio(plan.depth_ratios, layer); layer += 1

RATIOS = {"mean": lambda r, l: r.mean(l), "max": lambda r, l: max(r.history(l) or (1.0,)),
          "p75": lambda r, l: float(np.quantile(r.history(l) or (1.0,), 0.75)), "one": lambda r, l: 1.0}
def run(variant):
    pol = make_policy("cast", settings)
    toks = seqs = unused = statesum = 0
    for t in traces:
        plan0 = pol.begin(t.batch_size, int(t.context_lens.max()))
        if variant == "free":
            limit, exp = 99, predict(plan0, t.child_probs[:, 0, :], RATIOS["mean"])
        else:
            exp = predict(plan0, t.child_probs[:, 0, :], RATIOS["mean"])
            state = predict(plan0, t.child_probs[:, 0, :], RATIOS[variant])
            limit = iteration_depth(max(exp, state), plan0.lookup, t.proposals)
        orig = pol.begin
        def begin(*a, **k):
            p = orig(*a, **k); g = p.grow
            p.grow = lambda layer, p=p, g=g: g(layer) if layer < limit else (type(p).grow(copy.copy(p), layer) and False)
            return p
        pol.begin = begin
        out = replay_iteration(t, pol)
        pol.begin = orig
        toks += out.tokens; seqs += len(out.num_accepted)
        unused += max(0, min(exp, limit) - out.depth); statesum += min(limit, 99) if variant != "free" else out.depth
    return toks / seqs, unused, statesum / len(traces)
for v in ["free", "mean", "p75", "max", "one"]:
    tau, unused, st_ = run(v)
    print(f"B={B} {v:5s} tau {tau:.3f} unused early forwards {unused} mean state depth {st_:.2f} ({len(traces)} its)")
