"""Would a prompt-lookup branch (propose what followed the last two tokens where they
last occurred earlier in the context) win back what the head loses where answers copy?
Per answer set of passages_ab.py: how often the lookup proposes a token, how often it is
the target's, and how often the head's step-0 guess or the lookup's is (the two as
candidates of one step, a bound on what a tree holding both could accept)."""
import json, sys, torch
from pathlib import Path
from sglang_cast.models import load_target, cache_root
from sglang_cast.training.target import Target
from sglang_cast.training import online
from sglang_cast.training.head import head_state, new_draft
from sglang_cast.training.ttt import ttt_forward
from sglang_cast.training.vocab import target_to_draft
from sglang_cast.training.config import DEFAULT_OUTPUT


def lookup(ids: list[int], upto: int) -> int | None:
    """The token after the latest earlier occurrence of ids[upto-2:upto] in ids[:upto]."""
    a, b = ids[upto - 2], ids[upto - 1]
    for j in range(upto - 2, 0, -1):
        if ids[j - 1] == a and ids[j] == b:
            return ids[j + 1]
    return None


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
results = {}
for name, seqs in sets.items():
    n = proposed = lookup_hit = head_hit = either = 0
    with torch.no_grad(), online.autocast(t):
        for part in online.batches(seqs, 2048, 0):
            batch = online.teacher_forced(t, part, to_draft, 0)
            mask = batch.step_mask(0)  # [B, n-1]: position t scores token t + 2
            hidden = ttt_forward(d, batch.input_ids, batch.features, 1)[0]
            pred = torch.full(mask.shape, -1, dtype=torch.long)
            pred[mask] = d.draft_to_target(d.lm_head(d.norm(hidden[mask])).argmax(-1))  # target ids
            for row, ids in enumerate(part.ids):
                for pos in mask[row].nonzero().flatten().tolist():
                    truth, guess = ids[pos + 2], lookup(ids, pos + 2)
                    n += 1
                    proposed += guess is not None
                    lookup_hit += guess == truth
                    head_hit += int(pred[row, pos]) == truth
                    either += guess == truth or int(pred[row, pos]) == truth
    results[name] = {"positions": n, "lookup_proposes": round(proposed / n, 4),
                     "lookup_precision": round(lookup_hit / max(proposed, 1), 4), "lookup_acc": round(lookup_hit / n, 4),
                     "head_acc": round(head_hit / n, 4), "head_or_lookup_acc": round(either / n, 4)}
    print(name, json.dumps(results[name]), flush=True)
Path(sys.argv[1]).write_text(json.dumps(results, indent=1))
