"""A/B: head training step (ttt_loss fwd+bwd) fp32 vs CPU bf16 autocast, target bf16."""
import time, statistics, torch, json
from pathlib import Path
from sglang_cast.models import load_target
from sglang_cast.training.target import Target
from sglang_cast.training.online import teacher_forced, Sequences
from sglang_cast.training.head import head_state, new_draft
from sglang_cast.training.vocab import target_to_draft
from sglang_cast.training.ttt import ttt_loss
from sglang_cast.training.config import DEFAULT_OUTPUT
torch.set_num_threads(2)
model, config, tok = load_target(None, "cpu", torch.bfloat16)
t = Target(model, tok, config.eos_token_ids)
st = head_state(DEFAULT_OUTPUT, t); d = new_draft(t, st["d2t"], st["t2d"]); d.load_state_dict(st); d.train()
to_draft = target_to_draft(d.t2d)
g = torch.Generator().manual_seed(0)
ids = [torch.randint(100, 40000, (256,), generator=g).tolist() for _ in range(16)]
seqs = Sequences(ids, [40] * 16)
for tokens_per in (4096,):
    res = {"fp32": [], "bf16": []}
    for r in range(4):
        for mode in ("fp32", "bf16"):
            t0 = time.perf_counter()
            b = teacher_forced(t, seqs, to_draft, 16)
            t1 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
                loss, stats = ttt_loss(d, b, 4, 0.8, 0.5)
            loss.backward(); d.zero_grad()
            t2 = time.perf_counter()
            res[mode].append((t1 - t0, t2 - t1))
            print(mode, r, round(t1 - t0, 2), round(t2 - t1, 2), float(loss), flush=True)
    for m, v in res.items():
        print(m, "features med", statistics.median(x for x, _ in v[1:]), "train med", statistics.median(y for _, y in v[1:]))
