"""One layer's attention at B = 1 (9 query heads over 3 KV heads of 64, the embedded model's):
the fused op (RoPE + cache write + tree attention, models/cpu_layer.py) against the eager
layer's RoPE and `AttentionBatch.attend` (torch SDPA; the batch built once, outside the
timing, as a forward builds it once for all layers), n new tokens under a causal mask after
a committed context.  The two alternate call by call; medians of 40.
Usage: attention.py [THREADS]"""
import statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
from sglang_cast.models import cpu_layer
from sglang_cast.models.attention import AttentionBatch, causal_tree_mask
from sglang_cast.models.kv_cache import KVCache
from sglang_cast.models.llama import apply_rope

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
cpu_layer.KERNEL.load()
ops = torch.ops.sglang_cast_layer
H, KV, D = 9, 3, 64
for ctx in (128, 512):
    for n in (1, 4, 13, 32):
        cache = KVCache(1, 1, KV, ctx + 64, D, 'cpu', torch.float32)
        cache.k.normal_(); cache.v.normal_(); cache.lens[0] = ctx
        slots, mask = torch.tensor([0]), causal_tree_mask(1, n, 'cpu')
        contiguous = mask.contiguous()
        qkv = torch.randn(n, (H + 2 * KV) * D)
        angles = torch.randn(1, 1, n, D)
        cos, sin = angles.cos(), angles.sin()
        batch = AttentionBatch.build(cache, slots, mask)

        def fused():
            return ops.rope_attention(qkv, cos, sin, cache.k, cache.v, 0, slots, cache.lens[slots], contiguous, H, KV)

        def eager():
            qk, v = qkv.split(((H + KV) * D, KV * D), -1)
            qk = apply_rope(qk.view(1, n, H + KV, D).transpose(1, 2), cos, sin)
            out = batch.attend(0, qk[:, :H], qk[:, H:], v.view(1, n, KV, D).transpose(1, 2))
            return out.transpose(1, 2).reshape(n, H * D)

        for _ in range(3):
            fused(); eager()
        times = {'fused': [], 'eager': []}
        for _ in range(40):
            for name, fn in (('fused', fused), ('eager', eager)):
                t = time.perf_counter(); fn(); times[name].append((time.perf_counter() - t) * 1e6)
        f, e = statistics.median(times['fused']), statistics.median(times['eager'])
        print(f"context {ctx} n {n}: fused {f:.1f} us ({4 * n * H * (ctx + n) * D / f / 1e3:.0f} GFLOPS), "
              f"eager {e:.1f} us, fused/eager {f / e:.2f}", flush=True)
