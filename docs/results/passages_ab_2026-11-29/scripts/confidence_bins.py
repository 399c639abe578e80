"""Is the head's lower accuracy on mt_bench's answers the text's or the head's?  For each
answer set of passages_ab.py, every answer position binned by the target's own probability
of its greedy token (how sure the target is): the share of positions per bin and the
shipped head's step-0 top-1 accuracy in it; then each set's accuracy re-predicted from
its bin shares and the training mix's per-bin accuracy.  Per bin also the share of
positions whose token lies outside the draft vocabulary (always a miss) and the accuracy
on the rest; and the accuracy on answer tokens that continue a span of the prompt (the
token and the one before it occur together in the prompt) and on the others."""
import json, sys, torch
from pathlib import Path
from sglang_cast.models import load_target, cache_root
from sglang_cast.training.target import Target
from sglang_cast.training import online
from sglang_cast.training.head import head_state, new_draft
from sglang_cast.training.ttt import ttt_forward
from sglang_cast.training.vocab import target_to_draft
from sglang_cast.training.config import DEFAULT_OUTPUT

EDGES = (0.0, 0.3, 0.5, 0.7, 0.9, 1.01)
model, config, tok = load_target(None, "cpu", torch.bfloat16)
t = Target(model, tok, config.eos_token_ids)
st = head_state(DEFAULT_OUTPUT, t)
d = new_draft(t, st["d2t"], st["t2d"]); d.load_state_dict(st); d.eval()
to_draft = target_to_draft(d.t2d)
data = cache_root() / "passages_ab"
run17 = json.loads((cache_root() / "online_cpu/run17/state.json").read_text())
sets = {name: online.Sequences(**json.loads((data / f"{name}.json").read_text()))
        for name in ("mix", "passages_held_out", "mt_bench", "humaneval")}
sets["mix_held_out"] = online.Sequences(run17["val_ids"], run17["val_starts"])
del sets["mix"]
results = {}
for name, seqs in sets.items():
    probs, hits, oov, copy = [], [], [], []
    with torch.no_grad(), online.autocast(t):
        for part in online.batches(seqs, 2048, 0):
            batch = online.teacher_forced(t, part, to_draft, 1)
            mask = batch.step_mask(0)
            hidden = ttt_forward(d, batch.input_ids, batch.features, 1)[0]
            pred = d.lm_head(d.norm(hidden[mask])).argmax(-1)
            labels = batch.labels[mask]
            probs.append(batch.soft_probs[mask][:, 0].float()); hits.append((pred == labels) & (labels >= 0))
            oov.append(labels < 0)
            tokens = torch.zeros(len(part), max(map(len, part.ids)), dtype=torch.long)
            for row, ids in enumerate(part.ids):
                tokens[row, : len(ids)] = torch.tensor(ids)
            # position t predicts token t + 2; do tokens t + 1, t + 2 occur together in the row's prompt?
            in_prompt = torch.zeros(tokens.shape[0], tokens.shape[1] - 1, dtype=torch.bool)
            for row, (ids, start) in enumerate(zip(part.ids, part.starts)):
                seen = set(zip(ids[: start - 1], ids[1:start]))
                in_prompt[row, : len(ids) - 2] = torch.tensor([pair in seen for pair in zip(ids[1:-1], ids[2:])])
            copy.append(in_prompt[mask])
    p, h, o, c = torch.cat(probs), torch.cat(hits).float(), torch.cat(oov).float(), torch.cat(copy)
    bins = []
    for lo, hi in zip(EDGES, EDGES[1:]):
        sel = (p >= lo) & (p < hi)
        bins.append({"target_p": f"{lo:.1f}-{min(hi, 1):.1f}", "share": round(sel.float().mean().item(), 4),
                     "head_acc": round(h[sel].mean().item(), 4) if sel.any() else None,
                     "outside_vocab": round(o[sel].mean().item(), 4) if sel.any() else None,
                     "head_acc_in_vocab": round(h[sel & (o == 0)].mean().item(), 4) if sel.any() else None})
    results[name] = {"positions": len(p), "head_acc": round(h.mean().item(), 4),
                     "target_p_mean": round(p.mean().item(), 4), "outside_vocab": round(o.mean().item(), 4),
                     "copies_prompt": round(c.float().mean().item(), 4), "head_acc_copies": round(h[c].mean().item(), 4),
                     "head_acc_new": round(h[~c].mean().item(), 4), "bins": bins}
    print(name, json.dumps(results[name]), flush=True)
ref = results["mix_held_out"]["bins"]
for name, r in results.items():
    r["acc_from_mix_bins"] = round(sum(b["share"] * m["head_acc"] for b, m in zip(r["bins"], ref)), 4)
    print(name, "accuracy", r["head_acc"], "re-predicted from the mix's per-bin accuracy", r["acc_from_mix_bins"])
Path(sys.argv[1]).write_text(json.dumps(results, indent=1))
