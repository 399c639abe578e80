import sys
sys.path.insert(0, '/work/main')
import torch
torch.set_num_threads(2)
from autotune.models import load_model_pair
from sglang_cast.models import KVCache, causal_tree_mask
from sglang_cast.models import frozen as F
pair = load_model_pair(None, None, 'cpu', 'float32', weight_format='int4/int8')
m = pair.target
fl = F.freeze_large_rows(m, 8)
def traced(model, h, cos, sin, batch, capture):
    with torch.compiler.set_stance(fl.stance):
        q, k, v = fl.enter(h, cos, sin)
        rq = F._enter(model.layers[0], h, cos, sin)
        print('enter', [round((a - b).abs().max().item(), 4) for a, b in zip((q, k, v), rq)], flush=True)
        for i, between in enumerate(fl.between):
            att = batch.attend(i, q, k, v)
            ref = F._between(model.layers[i], model.layers[i + 1], h.clone(), att, cos, sin)
            h, q, k, v = between(h, att, cos, sin)
            d = (h - ref[0]).abs(); j = int(d.argmax()); print('between', i, 'max|dh| %.4f at |h_ref| %.1f, max|h_ref| %.1f, rel %.2e, bf16 step there %.3f' % (float(d.flatten()[j]), float(ref[0].flatten()[j].abs()), float(ref[0].abs().max()), float(d.flatten()[j] / ref[0].flatten()[j].abs().clamp(min=1e-6)), 2.0 ** (torch.floor(torch.log2(ref[0].flatten()[j].abs())) - 7).item()), flush=True)
        out = fl.leave(h, batch.attend(len(fl.between), q, k, v))
        return out, {}
fl.run_layers = traced
for n in (8,):
    print('n', n)
    cache = KVCache.for_model(m.config, 1, 64, "cpu", torch.float32)
    with torch.inference_mode():
        m(torch.arange(n)[None] * 13 % 1000, torch.arange(n)[None], cache, torch.tensor([0]), causal_tree_mask(1, n, "cpu"))
