"""Replayed against live τ at B = 1 for six policies on the 16 tuning prompts a trace
run recorded (autotune/prompts.txt's first 16, 64 new tokens, fp32 native engine).

    python replay_vs_live.py DB RUN_PREFIX PROFILE [LIVE_JSON]

DB: an autotune database holding a B = 1 `collect` run of those prompts (RUN_PREFIX: the
start of its run id); PROFILE: the profile whose B <= 1 bucket is the "tuned" policy.
Live τ is each policy's committed tokens over its iterations decoding the 16 prompts
one at a time (greedy: the same every run); given LIVE_JSON (an earlier run's output)
they are read from it instead of decoded again.  Replay τ: the mean over the recording's
iterations (what `tune` maximises, `ReplayResult.tau`); "weighted": each iteration
weighted by the tokens the recording's draft pool committed over the tokens the policy
commits there (an estimate of how many live iterations it stands for), tried and
rejected (2026-11-30_replay_sampling_amx.md)."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from autotune.models import load_model_pair  # noqa: E402
from autotune.overhead import run_steps  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from autotune.store import Store  # noqa: E402
from autotune.tuner import replay_settings  # noqa: E402
from sglang_cast.cast import BucketSettings, SamplingParams, TreeShape, make_policy  # noqa: E402
from sglang_cast.profile import load_profile  # noqa: E402

MODEL = Path("~/.cache/sglang_cast/models/SmolLM2-135M-Instruct").expanduser()
HEAD = ROOT / "sglang_cast" / "assets" / "smollm2-135m-eagle"


def drafted_accept(trace) -> int:
    """Tokens the recording's draft pool alone committed (deepest accepted drafted node + 1)."""
    verdicts, parents, depths = trace.verdicts()[0].numpy(), trace.tree.parents[0], trace.tree.depths[0]
    drafted = trace.drafted_nodes or len(verdicts)
    ok = np.zeros(len(verdicts), dtype=bool)
    for node in range(len(verdicts)):
        ok[node] = verdicts[node] and (parents[node] < 0 or ok[parents[node]])
    return int(depths[:drafted][ok[:drafted]].max()) + 1


def main() -> None:
    db, run_prefix, profile = sys.argv[1:4]
    known = json.loads(Path(sys.argv[4]).read_text()) if len(sys.argv) > 4 else {}
    torch.set_num_threads(2)
    base = load_profile(profile).profile.settings
    pair = load_model_pair(str(MODEL), str(HEAD), "cpu", "float32")
    stored = [t for t in Store(db).traces(pair.target_id, pair.draft_id)
              if t.batch_size == 1 and t.run_id.startswith(run_prefix)]
    prompts = load_prompts()
    tuned = base.buckets[0]
    policies = {
        "tuned (top-k 2, depth 4, m 12, branch 8)": ("cast", tuned),
        "tuned without the branch": ("cast", replace(tuned, lookup_depth=0)),
        "EAGLE-2 top-k 4, depth 3, m 8": ("eagle2", BucketSettings(1, TreeShape(4, 3, 8))),
        "EAGLE-2 top-k 4, depth 3, m 8, branch 8": ("eagle2", BucketSettings(1, TreeShape(4, 3, 8), lookup_depth=8)),
        "chain depth 3": ("eagle2", BucketSettings(1, TreeShape(1, 3, 4))),
        "EAGLE-2 top-k 8, depth 6, m 24, branch 8": ("eagle2", BucketSettings(1, TreeShape(8, 6, 24), lookup_depth=8)),
    }
    recorded = [drafted_accept(s.trace) for s in stored]
    out = {"iterations": len(stored), "policies": {}}
    for name, (policy, bucket) in policies.items():
        settings = replace(base, buckets=(replace(bucket, max_batch_size=1 << 20),))
        replayed = [o.tokens for o in replay_settings([s.trace for s in stored], settings, policy).outcomes]
        mean = sum(replayed) / len(replayed)
        weighted = sum(recorded) / sum(r / a for r, a in zip(recorded, replayed))
        if name in known.get("policies", {}):
            live = known["policies"][name]["live"]
        else:
            tokens = iterations = 0
            for text in prompts.texts[:16]:
                engine = pair.engine(make_policy(policy, settings), 1, 1024)
                steps = run_steps(engine, [pair.format_prompt(text)], SamplingParams(max_new_tokens=64))
                tokens, iterations = tokens + sum(s.tokens for s in steps), iterations + len(steps)
            live = tokens / iterations
        out["policies"][name] = {"live": round(live, 4), "replay": round(mean, 4), "weighted": round(weighted, 4)}
        print(f"{name:42s} live {live:.3f}  replay {mean:.3f} ({mean / live - 1:+.1%})  "
              f"weighted {weighted:.3f} ({weighted / live - 1:+.1%})", flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
