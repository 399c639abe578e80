"""SGLang CAST at batch 1 with a profile: per-iteration (depth, verified, tokens) from the step log."""
import json, sys, collections, os
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
from tools.benchkit.sglang_server import SGLangServer, cpu_launcher
from sglang_cast.models.loader import resolve_model_dir
from transformers import AutoTokenizer
ROOT = Path(__file__).resolve().parents[4]
profile = sys.argv[1]; log = Path(sys.argv[2]); n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
extra = sys.argv[4:]
log.unlink(missing_ok=True)
tok = AutoTokenizer.from_pretrained(resolve_model_dir(None))
prompts = [json.loads(l)["turns"][0] for l in (ROOT / "datasets/mt_bench.jsonl").read_text().splitlines()][:n]
ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=False) for p in prompts]
env = {"SGLANG_CAST_STEP_PROFILE": json.dumps({"log": str(log)})}
with SGLangServer(log.with_suffix(".server.log"), cpu_launcher("--speculative-algorithm", "CAST", "--cast-profile", profile, *extra), env=env) as s:
    res = [s.post("/generate", {"input_ids": i, "sampling_params": {"max_new_tokens": 64, "temperature": 0.0, "ignore_eos": True}}) for i in ids]
print("sglang tau", sum(r["meta_info"]["completion_tokens"] for r in res) / sum(r["meta_info"]["spec_verify_ct"] for r in res))
steps = [json.loads(l) for l in log.read_text().splitlines()]
print("(depth, verified):", sorted(collections.Counter((s["depth"], s["verified"]) for s in steps).items()))
print("tokens per step by depth:", {d: sum(s["tokens"] for s in steps if s["depth"] == d) / max(1, sum(1 for s in steps if s["depth"] == d)) for d in sorted({s["depth"] for s in steps})})
