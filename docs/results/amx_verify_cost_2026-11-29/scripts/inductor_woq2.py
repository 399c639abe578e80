import torch, time, statistics, re, io, sys, contextlib, logging
torch.set_num_threads(2)
import torch._inductor.config as cfg
cfg.freezing = True
cfg.max_autotune = True
cfg.max_autotune_gemm_backends = "CPP,ATEN"
gs = 32
class Lin(torch.nn.Module):
    def __init__(self, K, N):
        super().__init__()
        q = torch.randint(0, 16, (N, K), dtype=torch.int32)
        self.register_buffer('packed', torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))
        self.register_buffer('sz', torch.randn(K // gs, N, 2).bfloat16())
    def forward(self, x):
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, gs, self.sz)
with torch.no_grad():
    for K, N in ((576, 1536), (1536, 576), (576, 576)):
        m = Lin(K, N).eval()
        for M in (1, 2, 4, 8, 16, 32):
            torch._dynamo.reset()
            c = torch.compile(m, dynamic=False)
            c(torch.randn(M, K).bfloat16())
