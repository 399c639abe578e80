"""Target forwards at B = 1 with the VNNI linears, the layers eager (torch ops between the
linears, as before the fused ops) against fused (models/cpu_layer.py), torch's int4/int8
alongside; M new tokens under a causal mask after a committed context, LM head on every row.
Interleaved round by round; medians (and p10-p90) of REPS rounds of ITERS back-to-back calls.
Then where a one-token forward's time goes, eager and fused (torch.profiler, self time per op).
Usage: forwards.py REPS ITERS JSON"""
import json, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
from autotune.models import load_model_pair
from sglang_cast.models.attention import causal_tree_mask
from sglang_cast.models.kv_cache import KVCache

reps, iters, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(2)
vnni = load_model_pair(None, None, 'cpu', 'float32', weight_format='int4vnni/int8vnni').target
torch_int4 = load_model_pair(None, None, 'cpu', 'float32', weight_format='int4/int8').target
fused = vnni.layer_stack
assert fused is not None, 'this CPU cannot run the fused ops'
config = vnni.config
gen = torch.Generator().manual_seed(0)
variants = {'int4/int8 (torch)': (torch_int4, None), 'int4vnni/int8vnni eager': (vnni, None),
            'int4vnni/int8vnni fused': (vnni, fused)}
record = {'cpu': open('/proc/cpuinfo').read().split('model name')[1].split('\n')[0].strip(': '),
          'torch': torch.__version__, 'reps': reps, 'iters': iters, 'ms': {}}


def step_of(model, rows, context):
    cache = KVCache.for_model(config, 1, context + rows, 'cpu', torch.float32)
    cache.lens[0] = context  # committed keys: random contents, the cost is the same
    cache.k.normal_(generator=gen)
    cache.v.normal_(generator=gen)
    tokens = torch.randint(0, config.vocab_size, (1, rows), generator=gen)
    positions, mask = context + torch.arange(rows)[None], causal_tree_mask(1, rows, 'cpu')
    return lambda: model.logits(model(tokens, positions, cache, torch.tensor([0]), mask).hidden)


with torch.inference_mode():
    for context in (128, 512):
        for rows in (1, 2, 4, 8, 13, 16, 32):
            steps = {}
            for name, (model, stack) in variants.items():
                model.layer_stack = stack
                steps[name] = (model, stack, step_of(model, rows, context))
            times = {name: [] for name in steps}
            for _ in range(reps):
                for name, (model, stack, step) in steps.items():
                    model.layer_stack = stack
                    step()
                    t = time.perf_counter()
                    for _ in range(iters):
                        step()
                    times[name].append((time.perf_counter() - t) * 1e3 / iters)
            row = {}
            for name, ts in times.items():
                ts.sort()
                row[name] = {'median': statistics.median(ts), 'p10': ts[len(ts) // 10], 'p90': ts[(9 * len(ts)) // 10]}
            record['ms'][f'ctx{context}_m{rows}'] = row
            print(f'context {context} M {rows}: ' + ', '.join(f"{n} {v['median']:.2f}" for n, v in row.items())
                  + f"; fused/eager {row['int4vnni/int8vnni fused']['median'] / row['int4vnni/int8vnni eager']['median']:.2f}",
                  flush=True)
    for name, stack in (('eager', None), ('fused', fused)):  # where a one-token forward's time goes
        vnni.layer_stack = stack
        step = step_of(vnni, 1, 128)
        for _ in range(3):
            step()
        with torch.profiler.profile() as prof:
            for _ in range(20):
                step()
        print(f'int4vnni/int8vnni {name}, M = 1, context 128: self time per forward')
        print(prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=12))
        record[f'{name}_m1_profile'] = {e.key: {'self_ms_per_forward': e.self_cpu_time_total / 1000 / 20,
                                                'calls_per_forward': e.count / 20} for e in prof.key_averages()}
Path(out_path).write_text(json.dumps(record, indent=1))
