"""The int8 LM head alone (49,152 x 576, random weights) on torch's int8 kernel and the tile kernel,
per row count: median ms of 20 and the largest error against the fp64 product (relative to the
largest output).  Usage: .venv/bin/python docs/results/amx_int8_head_2026-11-30/lm_head_int8.py"""
import torch, time, sys
sys.path.insert(0,'.')
from sglang_cast.models.weights import pack_linear, Format
from sglang_cast.engine.timing import time_calls
torch.set_num_threads(2)
t0=time.time()
w=torch.randn(49152,576)*0.05
a=pack_linear(Format.INT8_AMX,w,None); b=pack_linear(Format.INT8,w,None)
print("pack+build", time.time()-t0)
def t(f,reps=20):
    return time_calls(f, torch.device('cpu'), 3, reps).median_ms
for M in (1,4,5,8,12,16,17,32):
    x=torch.randn(M,576).bfloat16()
    ref=x.double()@ (b.codes.double()*b.scales.double()[:,None]).T
    got=a.tiled.matmul(x).double(); tor=b._matmul(x).double()
    err=((got-ref).abs().max()/ref.abs().max()).item(); err2=((tor-ref).abs().max()/ref.abs().max()).item()
    print(f"M={M:2d} tiles {t(lambda: a.tiled.matmul(x)):6.2f} torch {t(lambda: b._matmul(x)):6.2f} ms  err {err:.2e} torch {err2:.2e}")
