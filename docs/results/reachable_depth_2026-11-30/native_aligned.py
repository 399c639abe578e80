import json, sys
from pathlib import Path
ROOT_DIR = __import__("pathlib").Path(__file__).resolve().parents[3]  # the repository
sys.path[:0] = [str(ROOT_DIR)]
from sglang_cast.profile import load_profile
from sglang_cast.models.loader import resolve_model_dir
from sglang_cast.cast import SamplingParams
from sglang_cast.engine import EngineArgs, build_engine
from sglang_cast.engine.engine import StepLog
from transformers import AutoTokenizer
ROOT = ROOT_DIR
PROMPTS = [json.loads(l)["turns"][0] for l in (ROOT / "datasets/mt_bench.jsonl").read_text().splitlines()]
policy, N = sys.argv[1], int(sys.argv[2])
tok = AutoTokenizer.from_pretrained(resolve_model_dir(None))
ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=False) for p in PROMPTS[:N]]
settings = load_profile(sys.argv[3] if len(sys.argv) > 3 else str(ROOT / "profiles/cpu.yaml")).profile.settings
engine = build_engine(EngineArgs(policy=policy, settings=settings, weight_format="fp32", max_batch_size=1))
log = StepLog()
engine.generate([tok('The capital city of France is')['input_ids']], SamplingParams(max_new_tokens=7, temperature=0.0), on_step=log)
for i in ids:
    engine.generate([i], SamplingParams(max_new_tokens=64, temperature=0.0, ignore_eos=True), on_step=log)
rows = [dict(context_len=r.context_len, depth=len(r.plan.kept), verified=r.verified, tokens=sum(r.accepted) + len(r.accepted)) for r in log.records if r.depth >= 0]
Path(f"/tmp/diag/{policy}/native_steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
sg = [json.loads(l) for l in open(f"/tmp/diag/{policy}/steps.jsonl")]
print(len(rows), len(sg))
for a, b in zip(rows, sg):
    flag = "" if (a["depth"], a["verified"], a["tokens"]) == (b["depth"], b["verified"], b["tokens"]) else "  <--"
    print(f"ctx {a['context_len']:4d}/{b['context_len']:4d} depth {a['depth']}/{b['depth']} verified {a['verified']:2d}/{b['verified']:2d} tokens {a['tokens']}/{b['tokens']}{flag}")
