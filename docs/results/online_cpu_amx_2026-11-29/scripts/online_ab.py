"""Why did the CPU online run lower the head's accuracy?  One round of answers generated once
(bf16 target, AMX Xeon), then from the shipped head: variants of the training step, each
judged on the same 48 held-out answers of that round (per-step top-1 accuracy)."""
import contextlib, json, sys, time, torch
from dataclasses import replace
from pathlib import Path
from sglang_cast.models import load_target
from sglang_cast.training.target import Target
from sglang_cast.training import online
from sglang_cast.training.head import head_state, new_draft
from sglang_cast.training.vocab import target_to_draft
from sglang_cast.training.config import DEFAULT_OUTPUT, DEFAULT_BENCHMARKS
from sglang_cast.training.benchmark_filter import BenchmarkFilter, load_benchmark_prompts
from sglang_cast.training.train import TrainConfig

model, config, tok = load_target(None, "cpu", torch.bfloat16)
t = Target(model, tok, config.eos_token_ids)
base = online.OnlineConfig(self_instruct=50, doc_prompts=25, template_prompts=90, task_prompts=135,
                           response_tokens=192, gen_batch=128, feature_batch_tokens=2048, schedule_steps=900,
                           prompt_seed=2000)
bench = BenchmarkFilter.from_prompts(load_benchmark_prompts(DEFAULT_BENCHMARKS))
engine = online.generation_engine(t, base)
prompts, _ = online.round_prompts(t, engine, base, 0, bench)
seqs = online.answer(engine, base, prompts, 0)
state0 = online.OnlineState(val_ids=seqs.ids[:48], val_starts=seqs.starts[:48])
train = seqs.take(range(48, len(seqs)))
print("train seqs", len(train), "answer tokens", sum(len(i) - s for i, s in zip(train.ids, train.starts)), flush=True)
fp32 = lambda target: contextlib.nullcontext()
variants = {
    "bf16 autocast, lr 5e-4": (base, online.autocast),
    "fp32 head, lr 5e-4": (base, fp32),
    "bf16 autocast, lr 1e-4": (replace(base, train=replace(base.train, lr=1e-4)), online.autocast),
}
results = {}
st = head_state(DEFAULT_OUTPUT, t)
for label, (cfg, cast) in [("initial", (base, online.autocast))] + list(variants.items()):
    d = new_draft(t, st["d2t"], st["t2d"]); d.load_state_dict(st); d.train()
    to_draft = target_to_draft(d.t2d)
    online.autocast = cast
    state = online.OnlineState(val_ids=state0.val_ids, val_starts=state0.val_starts)
    began = time.time()
    if label != "initial":
        params = [p for p in d.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=cfg.train.lr, betas=(0.9, 0.95), weight_decay=cfg.train.weight_decay)
        online.train_round(t, d, opt, train, to_draft, cfg, state, 0)
    val = online.validate(t, d, state, to_draft, cfg)
    results[label] = {"steps": state.step, "train_s": round(time.time() - began, 1),
                      "val_acc": [round(a, 4) for a in val.accuracy()], "val_loss": [round(x, 4) for x in val.mean_loss()]}
    print(label, json.dumps(results[label]), flush=True)
Path(sys.argv[1]).write_text(json.dumps(results, indent=1))
