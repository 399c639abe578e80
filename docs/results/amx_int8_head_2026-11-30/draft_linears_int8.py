"""The draft head's nine linear shapes (EAGLE-3 head: fc, q/k/v/o, gate/up/down, the 8,192-token LM head,
random weights) in int8 and int8amx, per row count, median ms of 15.
Usage: .venv/bin/python docs/results/amx_int8_head_2026-11-30/draft_linears_int8.py"""
import torch, sys
sys.path.insert(0,'.')
from sglang_cast.models.weights import pack_linear, Format
from sglang_cast.engine.timing import time_calls
torch.set_num_threads(2)
shapes=[(576,1728),(576,576),(192,576),(192,576),(576,576),(1536,576),(1536,576),(576,1536),(8192,576)]
ws=[torch.randn(*s)*0.05 for s in shapes]
A=[pack_linear(Format.INT8_AMX,w,None) for w in ws]; B=[pack_linear(Format.INT8,w,None) for w in ws]
def run(ls,x):
    for l,(n,k) in zip(ls,shapes): l._matmul(x[:, :k])
def t(f,reps=15):
    return time_calls(f, torch.device('cpu'), 3, reps).median_ms
for M in (1,4,5,8,12,16,32):
    x=torch.randn(M,1728).bfloat16()
    print(f"M={M:2d} draft linears int8 {t(lambda: run(B,x)):5.2f} ms  tiles-from-5 {t(lambda: run(A,x)):5.2f} ms")
