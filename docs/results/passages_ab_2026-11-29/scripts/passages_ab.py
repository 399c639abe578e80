"""Does replacing half of a round's prompts with requests about real passages
(`training/passages.py`) help the shipped head where it is weakest?  Answers are generated
once (bf16 target, this CPU); then from the shipped head, at lr 1e-4 (which holds it):
A trains on ~580 answers of the usual mix, B on its first half plus ~290 answers to
passage requests.  Each is judged, with the head before training, on the same held-out
answer sets: the usual mix (run 17's 48), passages held out of training (50), and the
target's answers to the first turns of mt_bench and humaneval (80 each, 128 tokens)."""
import json, sys, time, torch
from dataclasses import replace
from pathlib import Path
from sglang_cast.models import load_target, cache_root
from sglang_cast.training.target import Target, chat_ids
from sglang_cast.training import online
from sglang_cast.training.passages import load_passages, passage_prompts
from sglang_cast.training.evaluate import benchmark_prompts
from sglang_cast.training.head import head_state, new_draft
from sglang_cast.training.vocab import target_to_draft
from sglang_cast.training.config import DEFAULT_OUTPUT, DEFAULT_BENCHMARKS
from sglang_cast.training.benchmark_filter import BenchmarkFilter, filter_prompts, load_benchmark_prompts

out = Path(sys.argv[1])
data = cache_root() / "passages_ab"
model, config, tok = load_target(None, "cpu", torch.bfloat16)
t = Target(model, tok, config.eos_token_ids)
cfg = online.OnlineConfig(self_instruct=100, doc_prompts=50, template_prompts=180, task_prompts=270,
                          response_tokens=192, gen_batch=128, feature_batch_tokens=2048, schedule_steps=900,
                          prompt_seed=3000, train=replace(online.OnlineConfig().train, lr=1e-4))
fits = lambda p: len(chat_ids(tok, p)) <= cfg.max_prompt_tokens
bench = BenchmarkFilter.from_prompts(load_benchmark_prompts(DEFAULT_BENCHMARKS))
engine = online.generation_engine(t, cfg)
passages = load_passages()


def generated(name, make):
    """One answer set, generated once and kept in the cache (a rerun reads it back)."""
    path = data / f"{name}.json"
    if not path.is_file():
        began = time.time()
        seqs = make()
        data.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"ids": seqs.ids, "starts": seqs.starts}))
        print(f"{name}: {len(seqs)} answers in {time.time() - began:.0f} s", flush=True)
    return online.Sequences(**json.loads(path.read_text()))


def about_passages(count, seed, held):
    kept, report = filter_prompts(passage_prompts(passages, count, seed, held_out=held), bench, fits=fits)
    print(report.to_dict(), flush=True)
    return online.answer(engine, cfg, [chat_ids(tok, p) for p in kept], 0)


def benchmark_answers(name):
    prompts = benchmark_prompts(t, DEFAULT_BENCHMARKS, name, 80)
    long_engine = t.engine(None, online.TreeShape(), cfg.gen_batch, max(map(len, prompts)) + 128)
    return online.answer(long_engine, replace(cfg, response_tokens=128), prompts, 0)


run17 = json.loads((cache_root() / "online_cpu/run17/state.json").read_text())
sets = {"mix": generated("mix", lambda: online.answer(engine, cfg, online.round_prompts(t, engine, cfg, 0, bench)[0], 0)),
        "passages": generated("passages", lambda: about_passages(300, 3000, False)),
        "passages_held_out": generated("passages_held_out", lambda: about_passages(50, 3001, True)),
        "mt_bench": generated("mt_bench", lambda: benchmark_answers("mt_bench")),
        "humaneval": generated("humaneval", lambda: benchmark_answers("humaneval")),
        "mix_held_out": online.Sequences(run17["val_ids"], run17["val_starts"])}
tokens = lambda s: sum(len(i) - b for i, b in zip(s.ids, s.starts))
print({k: (len(v), tokens(v)) for k, v in sets.items()}, flush=True)
mix, half = sets["mix"], len(sets["passages"])
variants = {"initial": None, "A: usual mix": mix,
            "B: half mix, half passages": online.Sequences(mix.ids[:half] + sets["passages"].ids,
                                                           mix.starts[:half] + sets["passages"].starts)}
judges = ("mix_held_out", "passages_held_out", "mt_bench", "humaneval")
results = {"sets": {k: {"sequences": len(v), "answer_tokens": tokens(v)} for k, v in sets.items()}}
st = head_state(DEFAULT_OUTPUT, t)
for label, train in variants.items():
    d = new_draft(t, st["d2t"], st["t2d"]); d.load_state_dict(st); d.train()
    to_draft = target_to_draft(d.t2d)
    state, began = online.OnlineState(), time.time()
    entry = {}
    if train is not None:
        opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=cfg.train.lr, betas=(0.9, 0.95),
                                weight_decay=cfg.train.weight_decay)
        online.train_round(t, d, opt, train, to_draft, cfg, state, 0)
        entry = {"train_sequences": len(train), "train_answer_tokens": tokens(train), "steps": state.step,
                 "train_s": round(time.time() - began, 1)}
    for judge in judges:
        state.val_ids, state.val_starts = sets[judge].ids, sets[judge].starts
        entry[judge] = [round(a, 4) for a in online.validate(t, d, state, to_draft, cfg).accuracy()]
    results[label] = entry
    print(label, json.dumps(entry), flush=True)
    out.write_text(json.dumps(results, indent=1))
