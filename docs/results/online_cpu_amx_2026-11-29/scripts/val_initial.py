"""Held-out (round 0's 48 answers) per-step accuracy of the initial (shipped) and the trained head,
bf16 target as in the run, head under autocast as validate() runs it."""
import json, sys, torch
from pathlib import Path
from sglang_cast.models import load_target
from sglang_cast.training.target import Target
from sglang_cast.training import online
from sglang_cast.training.head import head_state, new_draft
from sglang_cast.training.vocab import target_to_draft
from sglang_cast.training.config import DEFAULT_OUTPUT
run = Path(sys.argv[1])
model, config, tok = load_target(None, "cpu", torch.bfloat16)
t = Target(model, tok, config.eos_token_ids)
state = online.OnlineState(**json.loads((run / "state.json").read_text()))
cfg = online.OnlineConfig(feature_batch_tokens=2048)
for label, head in (("initial", DEFAULT_OUTPUT), ("trained", run / "head")):
    st = head_state(head, t); d = new_draft(t, st["d2t"], st["t2d"]); d.load_state_dict(st)
    val = online.validate(t, d, state, target_to_draft(d.t2d), cfg)
    print(label, [round(a, 4) for a in val.accuracy()], [round(x, 4) for x in val.mean_loss()], flush=True)
