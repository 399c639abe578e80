"""Are the rows of a verify forward (a chain of n = 2-16 tokens after a 120-token prompt) bit for
bit the logits of plain steps feeding the same tokens?  Under the CPU's attention rule before 2026-11-30 (three kernels below
64 grouped rows) and since (the fused masked SDPA kernel); first, whether the packed linears'
row 0 depends on how many rows share the call.

    .venv/bin/python docs/results/sdpa_cpu_2026-11-30/row_exact.py "int4/int8:dense16:bf16+int8"
"""
import sys; sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.cast import make_policy
from tools.benchkit.inputs import load_settings
import sglang_cast.models.attention as A
from sglang_cast.models.weights import PackedLinear
from rules import FUSED, kernels3  # this folder

fmt = sys.argv[1]
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format=fmt)
prof = load_settings('profiles/cpu.yaml', 'cpu').profile
eng = pair.engine(make_policy('vanilla', prof.settings), 1, 1024)
r = eng.runner
# linears alone: row 0 of an M-row product against the 1-row product
lin = [m for m in pair.target.modules() if isinstance(m, PackedLinear)][:3]
for m in lin:
    x = torch.randn(8, m.in_features if hasattr(m, 'in_features') else 576)
    one = m.forward(x[:1]); many = [m.forward(x[:k])[0] for k in (2, 3, 4, 8)]
    print(type(m).__name__, [torch.equal(one[0], y) for y in many])
ctx = 120
slots = torch.tensor([0])
gen = torch.Generator().manual_seed(0)
prompt = torch.randint(0, 30000, (1, ctx), generator=gen)
def fill():
    r.target_cache.lens[0] = 0
    with torch.inference_mode():
        r.target_forward(prompt, torch.arange(ctx).view(1, -1), slots, A.causal_tree_mask(1, ctx, 'cpu'))
    r.target_cache.lens[0] = ctx
toks = torch.randint(0, 30000, (1, 16), generator=gen)


def chain(n):
    """Logits [n, V] of one verify forward over a chain of n tokens after the prompt."""
    fill()
    with torch.inference_mode():
        logits, _ = r.target_forward(toks[:, :n], ctx + torch.arange(n).view(1, n), slots, A.causal_tree_mask(1, n, 'cpu'))
    return logits[0].clone()


def stepwise(n):
    """Logits [n, V] of n plain steps feeding the same tokens, each committed before the next."""
    fill()
    out = []
    with torch.inference_mode():
        for i in range(n):
            logits, _ = r.target_forward(toks[:, i:i + 1], torch.tensor([[ctx + i]]), slots,
                                         torch.ones(1, 1, 1, dtype=torch.bool))
            out.append(logits[0, 0].clone())
            r.target_cache.lens[0] += 1
    return torch.stack(out)


for name, rule in (("kernels3", kernels3), ("sdpa", FUSED)):
    A.grouped_attention = rule
    steps = stepwise(16)
    for n in (2, 4, 8, 12, 16):
        verified = chain(n)
        exact = [bool(torch.equal(verified[i], steps[i])) for i in range(n)]
        spread = float((verified - steps[:n]).abs().max())
        print(f"{name}: chain of {n:2d}: rows equal to the plain steps' bit for bit {sum(exact)}/{n}, "
              f"largest |dlogit| {spread:.4f}", flush=True)
