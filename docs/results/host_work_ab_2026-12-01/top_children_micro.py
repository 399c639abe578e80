# Micro-benchmark: the draft expander's top children (softmax then top-k, the engine) against top-k then
# log-sum-exp variants. Usage: python top_children_micro.py THREADS
import time, statistics, torch, numpy as np, sys
torch.set_num_threads(int(sys.argv[1]))
d2t = torch.randint(0, 100, (8192,))
to_target = lambda ids: ids + d2t[ids]
def cur(logits, k):
    probs = torch.softmax(logits.float(), dim=-1)
    top = torch.topk(probs, k, dim=-1, sorted=True)
    host = torch.cat([top.values.double(), to_target(top.indices).double()], dim=-1).cpu().numpy()
    return host[..., :k], host[..., k:].astype(np.int64)
def alt(logits, k):
    top = torch.topk(logits, k, dim=-1, sorted=True)
    probs = (top.values - torch.logsumexp(logits, dim=-1, keepdim=True)).exp_()
    host = torch.cat([probs.double(), to_target(top.indices).double()], dim=-1).numpy()
    return host[..., :k], host[..., k:].astype(np.int64)
def alt2(logits, k):
    top = torch.topk(logits, k, dim=-1, sorted=True)
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    vals = (top.values - lse).numpy(); idx = top.indices.numpy()
    return np.exp(vals.astype(np.float64)), idx + d2t.numpy()[idx]
for n in (1,3,9):
    lg = torch.randn(1,n,8192)
    a=cur(lg,3); b=alt2(lg,3); assert np.allclose(a[0],b[0],atol=1e-6) and (a[1]==b[1]).all()
    res={}
    for r in range(7):
        for f in (cur, alt, alt2):
            t=time.perf_counter()
            for _ in range(2000): f(lg,3)
            res.setdefault(f.__name__,[]).append((time.perf_counter()-t)/2000*1e6)
    print(n, {k: round(statistics.median(v),1) for k,v in res.items()})
