"""Live and replayed iterations of each traced prompt matched by the context they start at
(B = 1, the SGLang-tuned profile's B <= 1 tree).  Run at commit 3a4ef32 on the SGLang
record's traces (trace format 2, as in before.log):

    python per_iteration.py DB PROFILE N      # N: the first N tuning prompts
"""

import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from autotune.models import load_model_pair  # noqa: E402
from autotune.overhead import run_steps  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from autotune.store import Store  # noqa: E402
from sglang_cast.cast import SamplingParams, make_policy, replay_iteration  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

MODEL = Path("~/.cache/sglang_cast/models/SmolLM2-135M-Instruct").expanduser()
HEAD = ROOT / "sglang_cast" / "assets" / "smollm2-135m-eagle"

torch.set_num_threads(2)
db, profile, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
settings = load_profile(profile).profile.settings
pair = load_model_pair(str(MODEL), str(HEAD), "cpu", "float32")
traces = [t for t in Store(db).traces(pair.target_id, pair.draft_id) if t.batch_size == 1]
prompts = load_prompts()
for index in range(count):
    pid = prompts.ids[index]
    policy = make_policy("cast", settings)
    replayed = {int(t.trace.context_lens.max()): replay_iteration(t.trace, policy)
                for t in traces if t.prompt_ids == (pid,)}
    engine = pair.engine(make_policy("cast", settings), 1, 1024)
    live = {s.context_len: s for s in run_steps(engine, [pair.format_prompt(prompts.texts[index])],
                                                SamplingParams(max_new_tokens=64))}
    common = sorted(set(replayed) & set(live))
    print(f"{pid}: live tau {sum(s.tokens for s in live.values()) / len(live):.2f} ({len(live)} it, verified "
          f"{statistics.mean(s.verified for s in live.values()):.2f}) replay tau "
          f"{sum(o.tokens for o in replayed.values()) / len(replayed):.2f} ({len(replayed)} it, verified "
          f"{statistics.mean(o.verified for o in replayed.values()):.2f}); {len(common)} common starts: live "
          f"{statistics.mean(live[c].tokens for c in common):.2f} replay "
          f"{statistics.mean(replayed[c].tokens for c in common):.2f}", flush=True)
    for c in [c for c in common if live[c].tokens != replayed[c].tokens][:6]:
        print("   ctx %d live tok %d replay tok %d | verified %d/%d depth %d/%d" % (
            c, live[c].tokens, replayed[c].tokens, live[c].verified, replayed[c].verified, live[c].depth,
            replayed[c].depth))
