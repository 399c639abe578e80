# Micro-benchmark: the draft's root rows written by indexed assignment (cur) or index_copy_, and read by
# indexing (get_cur) or index_select. Usage: python root_rows_micro.py THREADS
import time, torch, statistics, sys
torch.set_num_threads(int(sys.argv[1]))
root_logits = torch.zeros(2, 8192); root_hidden = torch.zeros(2, 576)
logits = torch.randn(1,1,8192); hidden = torch.randn(1,3,576); last = torch.tensor([2])
from sglang_cast.models.eagle import rows_at
rows = torch.tensor([0])
def cur():
    root_hidden[rows] = rows_at(hidden, last).squeeze(1)
    root_logits[rows] = logits.squeeze(1)
def idx_copy():
    root_hidden.index_copy_(0, rows, rows_at(hidden, last).squeeze(1))
    root_logits.index_copy_(0, rows, logits.squeeze(1))
def get_cur(): return root_hidden[rows], root_logits[rows]
def get_sel(): return root_hidden.index_select(0, rows), root_logits.index_select(0, rows)
res={}
for r in range(7):
    for f in (cur, idx_copy, get_cur, get_sel):
        t=time.perf_counter()
        for _ in range(2000): f()
        res.setdefault(f.__name__,[]).append((time.perf_counter()-t)/2000*1e6)
print({k: round(statistics.median(v),1) for k,v in res.items()})
