"""The VNNI formats' activation rounding emulated in float64 in the engine's place: every int4 linear of
an int4/int8 model computes round-half-even(x * 127 / max|x|) per row and group of 32, times max|x| / 127,
against the dequantised GGUF weights; top-1 agreement with fp32 and the prompts' perplexity on the first
16 mt_bench first turns, beside the unchanged int4/int8 model and one with exact (bf16) inputs.
Prints one line per mode: None (torch's kernel), bf16x, q8.

Usage (repository root): .venv/bin/python docs/results/vnni_kernels_2026-12-04/emulation.py"""
import torch, copy, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / 'tools')]
from bench_kernels import DATASET, build_variants, prompt_ids, prompt_logits
from sglang_cast.models import load_target
from sglang_cast.models.weights import Int4Linear
torch.set_num_threads(2)
oinit=Int4Linear.__init__
def ninit(self, groups, bias=None):
    oinit(self, groups, bias); self.deq=groups.dequantize().double()
Int4Linear.__init__=ninit
fp32,_,tok=load_target(None,"cpu",torch.float32)
prompts=prompt_ids(tok,DATASET,16)
models=build_variants(fp32,["fp32","int4/int8"])
mode={"m":None}
orig=Int4Linear._matmul
def emul(self,x):
    if mode["m"] is None: return orig(self,x)
    W=self.deq; xf=x.double()
    if mode["m"]=="bf16x": return (xf@W.T).to(x.dtype)
    g=x.float().reshape(x.shape[0],-1,32)
    amax=g.abs().amax(-1,keepdim=True)
    inv=torch.where(amax>0,torch.tensor(127.0)/amax,torch.zeros_like(amax))
    q=torch.round(g*inv)
    xd=(q*(amax/127.0)).reshape(x.shape).double()
    return (xd@W.T).to(x.dtype)
Int4Linear._matmul=emul
with torch.no_grad():
    refs=[prompt_logits(models["fp32"],ids) for ids in prompts]
    for m in (None,"bf16x","q8"):
        mode["m"]=m; agree=n=0; nll=0.0
        for ids,ref in zip(prompts,refs):
            got=prompt_logits(models["int4/int8"],ids)
            agree+=int((got.argmax(-1)==ref.argmax(-1)).sum()); n+=ref.shape[0]
            nll+=float(torch.nn.functional.cross_entropy(got[:-1].double(),ids[0,1:],reduction="sum"))
        import math
        print(m, agree/n, math.exp(nll/sum(i.shape[1]-1 for i in prompts)))
