# Micro-benchmark: ContextLookup.propose from a Python list (the engine: prompt_ids + output_ids) or a NumPy array.
import time, statistics, numpy as np, random
from sglang_cast.cast import ContextLookup
lk = ContextLookup(depth=7)
random.seed(0)
for n in (200, 1000):
    prompt=[random.randrange(2000) for _ in range(n)]; out=[random.randrange(2000) for _ in range(30)]
    arr=np.array(prompt+out)
    res={}
    for r in range(5):
        for name,f in (("list", lambda: lk.propose(prompt+out)), ("array", lambda: lk.propose(arr)), ("concat_only", lambda: np.asarray((prompt+out)[-4096:], dtype=np.int64))):
            t=time.perf_counter()
            for _ in range(2000): f()
            res.setdefault(name,[]).append((time.perf_counter()-t)/2000*1e6)
    print(n, {k: round(statistics.median(v),1) for k,v in res.items()})
