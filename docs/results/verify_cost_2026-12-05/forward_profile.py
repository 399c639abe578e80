"""One int4vnni/int8vnni target forward of M new tokens after 128 committed: median ms, then
the torch profiler's table of ops by self time (PROFILE=0: timings only)."""
import sys, time, torch
import os
from pathlib import Path
R = str(Path(__file__).resolve().parents[3]); sys.path.insert(0, R); sys.path.insert(0, R + "/tools")
torch.set_num_threads(2)
from bench_kernels import build_variants, prefilled_cache, load_target
from sglang_cast.models.attention import causal_tree_mask
fp32, config, tok = load_target(None, "cpu", torch.float32)
model = build_variants(fp32, ["int4vnni/int8vnni"])["int4vnni/int8vnni"]
del fp32
gen = torch.Generator().manual_seed(0)
prefix = torch.randint(0, config.vocab_size, (1, 128), generator=gen)
slots = torch.tensor([0])
with torch.inference_mode():
    cache = prefilled_cache(model, prefix)
    for rows in [int(r) for r in sys.argv[1].split(",")]:
        tokens = torch.randint(0, config.vocab_size, (1, rows), generator=gen)
        pos, mask = 128 + torch.arange(rows)[None], causal_tree_mask(1, rows, "cpu")
        run = lambda: model.logits(model(tokens, pos, cache, slots, mask).hidden)
        for _ in range(3): run()
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(5): run()
            ts.append((time.perf_counter()-t)/5*1e3)
        import statistics
        print(f"M={rows}: {statistics.median(ts):.2f} ms per forward (median of 5 x 5)", flush=True)
        if os.environ.get("PROFILE", "1") == "0": continue
        with torch.profiler.profile() as prof:
            for _ in range(10): run()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=50))
