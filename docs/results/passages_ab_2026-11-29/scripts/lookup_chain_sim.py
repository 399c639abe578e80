"""Tokens per target forward (τ) of greedy decoding replayed over the target's own answers
(the answer sets of passages_ab.py), for three drafts of one step each:
- the shipped head's top-1 chain of depth 4, read off its training-time-test unroll (step s
  at position p is what a depth-s chain node drafts there: docs/draft_head.md);
- a prompt-lookup chain of depth K: the K tokens that followed the latest earlier
  occurrence of the last two tokens (none when they never occurred);
- both as two branches of one tree: the step accepts the longer matching prefix.
Each step commits its accepted tokens plus the target's own next token."""
import json, sys, torch
from pathlib import Path
from sglang_cast.models import load_target, cache_root
from sglang_cast.training.target import Target
from sglang_cast.training import online
from sglang_cast.training.head import head_state, new_draft
from sglang_cast.training.ttt import ttt_forward
from sglang_cast.training.vocab import target_to_draft
from sglang_cast.training.config import DEFAULT_OUTPUT

STEPS = 4


def lookup_chain(ids: list[int], c: int, depth: int) -> list[int]:
    """What followed the latest occurrence of ids[c-2:c] before position c - 1, up to ``depth`` tokens."""
    a, b = ids[c - 2], ids[c - 1]
    for j in range(c - 2, 0, -1):
        if ids[j - 1] == a and ids[j] == b:
            return ids[j + 1 : min(j + 1 + depth, c)]
    return []


def accepted(draft: list[int], truth: list[int]) -> int:
    n = 0
    while n < len(draft) and n < len(truth) and draft[n] == truth[n]:
        n += 1
    return n


model, config, tok = load_target(None, "cpu", torch.bfloat16)
t = Target(model, tok, config.eos_token_ids)
st = head_state(DEFAULT_OUTPUT, t)
d = new_draft(t, st["d2t"], st["t2d"]); d.load_state_dict(st); d.eval()
to_draft = target_to_draft(d.t2d)
data = cache_root() / "passages_ab"
run17 = json.loads((cache_root() / "online_cpu/run17/state.json").read_text())
sets = {name: online.Sequences(**json.loads((data / f"{name}.json").read_text()))
        for name in ("passages_held_out", "mt_bench", "humaneval")}
sets["mix_held_out"] = online.Sequences(run17["val_ids"], run17["val_starts"])
modes = ("head chain 4", "lookup 4", "lookup 8", "head chain 4 + lookup 4", "head chain 4 + lookup 8")
results = {}
for name, seqs in sets.items():
    tokens, steps = 0, dict.fromkeys(modes, 0)
    with torch.no_grad(), online.autocast(t):
        for part in online.batches(seqs, 2048, 0):
            batch = online.teacher_forced(t, part, to_draft, 0)
            outs = ttt_forward(d, batch.input_ids, batch.features, STEPS)
            preds = torch.stack([d.draft_to_target(d.lm_head(d.norm(h)).argmax(-1)) for h in outs])  # [S, B, n-1]
            for row, (ids, start) in enumerate(zip(part.ids, part.starts)):
                tokens += len(ids) - start
                for mode in modes:
                    c = start
                    while c < len(ids):
                        truth = ids[c:]
                        head = [int(preds[s, row, c - 2 + s]) for s in range(STEPS) if c - 2 + s < len(ids) - 2]
                        look = lookup_chain(ids, c, 8 if "lookup 8" in mode else 4)
                        n = max(accepted(head, truth) if "head" in mode else 0,
                                accepted(look, truth) if "lookup" in mode else 0)
                        c += n + 1
                        steps[mode] += 1
    results[name] = {"answer_tokens": tokens, **{mode: round(tokens / steps[mode], 3) for mode in modes}}
    print(name, json.dumps(results[name]), flush=True)
Path(sys.argv[1]).write_text(json.dumps(results, indent=1))
