import sys, copy
from autotune.store import Store
from sglang_cast.cast import make_policy
from sglang_cast.cast.trace import replay_iteration
from sglang_cast.profile import load_profile
from sglang_cast.sglang_plugin.lookup_branch import iteration_depth
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.plugin_config import StaticShape
from sglang_cast.sglang_plugin.runtime_shapes import fills, max_nodes, choose_width
settings = load_profile("profiles/cpu.yaml").profile.settings
DRAFT_ID = "/work/main/sglang_cast/assets/smollm2-135m-eagle#sha256:c443ad1a096e"  # as the traces were stored
st = Store(str(__import__("pathlib").Path.home() / ".cache/sglang_cast/autotune.db"))
traces = [s.trace for s in st.traces("embedded:SmolLM2-135M-Instruct", DRAFT_ID)]
B = int(sys.argv[1]); traces = [t for t in traces if t.batch_size == B]
shape = StaticShape.covering(settings)
print("startup shape", shape)
base = CastDecider(make_policy("cast", settings), shape)
topks = {b.shape.top_k for b in settings.buckets if b.speculate}
def grid(kind):
    cat = {d: set(base.widths_at(d)) for d in base.depths}
    for d in cat:
        if kind in ("layer1", "full"):
            cat[d] |= {1 + k for k in topks if 1 + k <= shape.num_draft_tokens}
        if kind == "full":
            cat[d] |= {1 + max_nodes(k, d) for k in topks if 1 + max_nodes(k, d) <= shape.num_draft_tokens}
        if kind == "dense":
            cat[d] = {w for w in range(2, shape.num_draft_tokens + 1) if fills(w, d, shape.topk)}
    return {d: tuple(sorted(ws)) for d, ws in cat.items()}
from sglang_cast.sglang_plugin.runtime_shapes import choose_depth
for kind in ["current", "layer1", "full", "dense"]:
    cat = grid(kind); pol = make_policy("cast", settings)
    toks = seqs = cut = widths = 0; nits = 0
    for t in traces:
        plan0 = pol.begin(t.batch_size, int(t.context_lens.max()))
        reach = plan0.reachable_depth(t.child_probs[:, 0, :])
        if reach == 0:
            out = replay_iteration(t, pol); toks += out.tokens; seqs += len(out.num_accepted); continue
        depth = choose_depth(iteration_depth(reach, plan0.lookup, t.proposals), tuple(cat))
        orig = pol.begin; info = {}
        def begin(*a, **k):
            p = orig(*a, **k); g = p.grow; vc = p.verify_count
            p.grow = lambda layer, p=p, g=g: g(layer) if layer < depth else (type(p).grow(copy.copy(p), layer) and False)
            def verify_count(tree, p=p, vc=vc):
                wanted = vc(tree); avail = min(tree.size - 1, cat[depth][-1] - 1)
                w = choose_width(wanted, avail, cat[depth]); info['w'] = w; info['wanted'] = wanted
                p.verified = w - 1
                return w - 1
            p.verify_count = verify_count
            return p
        pol.begin = begin
        out = replay_iteration(t, pol); pol.begin = orig
        toks += out.tokens; seqs += len(out.num_accepted); nits += 1
        cut += info['w'] - 1 < info['wanted']; widths += info['w']
    print(f"B={B} {kind:8s} tau {toks/seqs:.3f} cut {cut}/{nits} mean width {widths/max(nits,1):.2f} states {sum(len(v) for v in cat.values())}")
