"""Where a training step's time goes, and what bf16 autocast makes of it: the shipped recipe (7 training-time-test
steps, soft labels 0.5, LM-head basis 24) on the first N batches of run 35's data (its work dir, which is not
committed: ~/.cache/sglang_cast/rebuild/run35), one step warm, two under the torch profiler (the table), then the
N steps timed four times, fp32 and bf16 autocast alternating (collate, forward, backward, optimiser seconds).
The weights keep training through the passes (lr 1e-5), so the losses printed are not comparable.

    .venv/bin/python docs/results/bf16_training_2026-12-07/train_profile.py 4   # ~2 min on 2 idle cores

With --time-only the profiled steps are left out: run it once per checkout to compare two versions of the training
code (loss_once.log):

    for tree in /work/main /tmp/wt; do (cd $tree && PYTHONPATH=$tree .venv/bin/python \
        docs/results/bf16_training_2026-12-07/train_profile.py 4 --time-only); done
"""
import sys, time, random, contextlib
from pathlib import Path
import torch
from sglang_cast.training.target import Target
from sglang_cast.training.train import split
from sglang_cast.training.config import TrainConfig
from sglang_cast.training.features import FeatureSet, collate
from sglang_cast.training.ttt import ttt_loss
from sglang_cast.training.head import new_draft
from sglang_cast.training.lm_head_basis import with_basis
from sglang_cast.training.vocab import target_to_draft

torch.set_num_threads(2)
W = Path.home() / ".cache/sglang_cast/rebuild/run35"
tc = TrainConfig(ttt_steps=7, soft_labels=0.5, lm_head_basis=24, lr=2.5e-4, warmup_steps=20)
target = Target.embedded()
vocab = torch.load(W / "vocab/vocab.pt")
draft = new_draft(target, vocab["d2t"], vocab["t2d"])
draft.load_state_dict(torch.load(W / "vocab/init_head.pt"), strict=True)
with_basis(draft, target.model.lm_head_weight, tc.lm_head_basis)
to_draft = target_to_draft(vocab["t2d"])
fs = FeatureSet.open_many([W / "responses"], tc.max_seq_len)
schedule = split(fs, tc, 35)
counts = [int(a) for a in sys.argv[1:] if a.isdigit()]
batches = schedule.epoch(0)[:counts[0] if counts else 6]
params = [p for p in draft.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95))
draft.train()

def step(b, autocast):
    t0 = time.perf_counter()
    batch = collate(fs, b, to_draft)
    t1 = time.perf_counter()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        loss, _ = ttt_loss(draft, batch, tc.ttt_steps, tc.step_decay, tc.soft_labels)
    t2 = time.perf_counter()
    opt.zero_grad(set_to_none=True); loss.backward()
    t3 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(params, tc.grad_clip); opt.step()
    t4 = time.perf_counter()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3], int(batch.targets.sum()), float(loss)

step(batches[0], False)
if "--time-only" not in sys.argv:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for b in batches[1:3]:
            step(b, False)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
for autocast in (False, True, False, True):
    times, toks = [0.0] * 4, 0
    for b in batches:
        t, n, l = step(b, autocast); times = [a + x for a, x in zip(times, t)]; toks += n
    print(f"autocast={autocast}: collate {times[0]:.2f} fwd {times[1]:.2f} bwd {times[2]:.2f} opt {times[3]:.2f} s;"
          f" {toks / sum(times):.0f} scored tok/s, last loss {l:.3f}")
