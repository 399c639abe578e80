import torch, time, statistics
torch.set_num_threads(2)
shapes=[(576,1536),(1536,576),(576,576),(576,192)]
L=[(i,o) for _ in range(30) for (i,o) in shapes]
Ms=(1,2,4,8,16)
def timeit(fn, reps=15):
    for _ in range(3): fn()
    ts=[]
    for _ in range(reps):
        t=time.perf_counter(); fn(); ts.append((time.perf_counter()-t)*1000)
    return statistics.median(ts)
res={}
# int4 weight-only baseline (bf16 acts)
gs=32
w4=[(torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.randint(0,16,(o,i),dtype=torch.int32),1), torch.randn(i//gs,o,2).bfloat16()) for i,o in L]
def int4(M):
    xs={i: torch.randn(M,i).bfloat16() for i,o in shapes}
    return lambda: [torch.ops.aten._weight_int4pack_mm_for_cpu(xs[i], p, gs, s) for (i,o),(p,s) in zip(L,w4)]
# fbgemm / x86 dynamic int8
def dyn(engine):
    torch.backends.quantized.engine=engine
    packs=[torch.ops.quantized.linear_prepack(torch.quantize_per_channel(torch.randn(o,i), torch.rand(o)*0.01+0.001, torch.zeros(o,dtype=torch.long),0,torch.qint8), None) for i,o in L]
    def f(M):
        xs={i: torch.randn(M,i) for i,o in shapes}
        return lambda: [torch.ops.quantized.linear_dynamic(xs[i], p, True) for (i,o),p in zip(L,packs)]
    return f
# onednn qlinear_pointwise: int8 weights (packed), dynamic per-tensor act quant by hand
def onednn_q():
    torch.backends.quantized.engine='onednn'
    ws=[]
    for i,o in L:
        w=torch.randint(-127,127,(o,i),dtype=torch.int8)
        packed=torch.ops.onednn.qlinear_prepack(w, [1,i])
        ws.append((packed, torch.rand(o)*0.01, torch.zeros(o,dtype=torch.long)))
    def f(M):
        xs={i: torch.randn(M,i) for i,o in shapes}
        def run():
            out=[]
            for (i,o),(p,sc,zp) in zip(L,ws):
                x=xs[i]
                s=float(x.abs().amax())/127.0
                xq=torch.clamp(torch.round(x/s),-128,127).to(torch.int8) if False else torch.quantize_per_tensor(x,s,0,torch.qint8).int_repr()
                out.append(torch.ops.onednn.qlinear_pointwise(xq, s, 0, p, sc, zp, None, 1.0, 0, torch.float32, "none", [], ""))
            return out
        return run
    return f
for name,f in [("int4 bf16",int4),("fbgemm dyn",dyn('fbgemm')),("x86 dyn",dyn('x86')),("onednn dyn",dyn('onednn')),("onednn qlinear",onednn_q())]:
    row=[]
    try:
        for M in Ms:
            row.append(timeit(f(M)))
        print(f"{name:16s}", " ".join(f"M={M}:{t:.2f}" for M,t in zip(Ms,row)), flush=True)
    except Exception as e:
        print(name, "error", repr(e)[:300], flush=True)
