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
            print('between', i, [round((a - b).abs().max().item(), 4) for a, b in zip((h, q, k, v), ref)], flush=True)
        out = fl.leave(h, batch.attend(len(fl.between), q, k, v))
        return out, {}
fl.run_layers = traced
for n in (8, 16):
    print('n', n)
    cache = KVCache.for_model(m.config, 1, 64, "cpu", torch.float32)
    with torch.inference_mode():
        m(torch.arange(n)[None] * 13 % 1000, torch.arange(n)[None], cache, torch.tensor([0]), causal_tree_mask(1, n, "cpu"))
