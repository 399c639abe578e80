"""Diagnostic: SGLang plugin vs native engine acceptance, per policy, same prompts (batch 1)."""
import json, sys
from pathlib import Path
ROOT_DIR = __import__("pathlib").Path(__file__).resolve().parents[3]  # the repository
sys.path[:0] = [str(ROOT_DIR / "tests"), str(ROOT_DIR)]
from tools.benchkit.sglang_server import SGLangServer, cpu_launcher
from sglang_cast.sglang_plugin.step_log import STEP_PROFILE_ENV, StepProfileMode
from sglang_cast.profile import load_profile
from sglang_cast.models.loader import resolve_model_dir
from transformers import AutoTokenizer

ROOT = ROOT_DIR
PROMPTS = [json.loads(l)["turns"][0] for l in (ROOT / "datasets/mt_bench.jsonl").read_text().splitlines()]
N, TOK = int(sys.argv[2]), 64
tok = AutoTokenizer.from_pretrained(resolve_model_dir(None))
ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                               return_dict=False) for p in PROMPTS[:N]]
profile = sys.argv[3] if len(sys.argv) > 3 else str(ROOT / "profiles/cpu.yaml")
settings = load_profile(profile).profile.settings
policy = sys.argv[1]  # eagle2 | cast
out = Path(f"/tmp/diag/{policy}")
out.mkdir(parents=True, exist_ok=True)
(out / "steps.jsonl").unlink(missing_ok=True)  # the step log appends
env = {STEP_PROFILE_ENV: StepProfileMode(str(out / "steps.jsonl"), policy if policy != "cast" else None).to_env()}
params = {"max_new_tokens": TOK, "temperature": 0.0, "ignore_eos": True}
with SGLangServer(out / "server.log", cpu_launcher("--speculative-algorithm", "CAST", "--cast-profile", profile), env) as s:
    res = [s.post("/generate", {"input_ids": i, "sampling_params": params}) for i in ids]
sg = [r["meta_info"]["completion_tokens"] / r["meta_info"]["spec_verify_ct"] for r in res]
from sglang_cast.cast import SamplingParams
from sglang_cast.engine import EngineArgs, build_engine
engine = build_engine(EngineArgs(policy=policy, settings=settings, weight_format="fp32", max_batch_size=1))
nat = [engine.generate([i], SamplingParams(max_new_tokens=TOK, temperature=0.0, ignore_eos=True))[0] for i in ids]
nt = [r.completion_tokens / r.stats.iterations for r in nat]
print(policy, "per prompt sglang", [round(x, 3) for x in sg], "native", [round(x, 3) for x in nt])
print(policy, "overall sglang %.3f native %.3f" % (sum(r["meta_info"]["completion_tokens"] for r in res) / sum(r["meta_info"]["spec_verify_ct"] for r in res),
      sum(r.completion_tokens for r in nat) / sum(r.stats.iterations for r in nat)))
