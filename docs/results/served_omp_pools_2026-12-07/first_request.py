"""Is a fresh engine's first request slow (a cold start)?  A B = 1 CAST engine on the main
thread, never warmed, decodes mt_bench's first prompt (48 tokens), then the same prompt
again, the second prompt, and the first once more; per request: its step times."""
import statistics

from served_pair import ROOT, load

from autotune.prompts import load_prompts
from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.engine.engine import StepLog

pair, settings = load()
texts = [pair.format_prompt(t) for t in load_prompts(str(ROOT / "datasets/mt_bench.jsonl")).texts[:2]]
engine = pair.engine(make_policy("cast", settings), 1, 1024)
for label, text in [("first", texts[0]), ("again", texts[0]), ("second", texts[1]), ("first again", texts[0])]:
    log = StepLog()
    engine.generate([text], SamplingParams(max_new_tokens=48), on_step=log)
    steps = [r.step_ms for r in log.records]
    print(f"{label:11s} {len(steps)} steps, {sum(steps):.0f} ms; first five {[round(s, 1) for s in steps[:5]]} ms, "
          f"median {statistics.median(steps):.1f}", flush=True)
