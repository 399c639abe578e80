"""τ of draft heads under the weight formats the target is served in: the eval stage's procedure
(EAGLE-2's tree, full pool, batch 1, greedy, 128 new tokens, the first PROMPTS first turns of
mt_bench and humaneval), with the target, and the head when the format names a draft part,
loaded as the engine loads them.  Resumable (a (head, format, benchmark) already in OUT is
skipped); prints each τ, then per head and format how many answers equal fp32's, if decoded.
Usage (repository root): tau_by_format.py PROMPTS OUT.json FORMAT[,FORMAT...] NAME=HEAD [NAME=HEAD ...]"""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from autotune.models import load_model_pair  # noqa: E402
from sglang_cast.cast import CostModel, PolicySettings, SamplingParams, committed_tokens  # noqa: E402
from sglang_cast.cast.policies import Eagle2Policy  # noqa: E402
from sglang_cast.engine import StepLog  # noqa: E402
from sglang_cast.engine.build import LoadedModels  # noqa: E402
from sglang_cast.training.benchmark_filter import first_turns  # noqa: E402
from sglang_cast.training.config import EvalConfig  # noqa: E402
from sglang_cast.training.target import chat_ids  # noqa: E402

BENCHMARKS = ("mt_bench", "humaneval")


def decode(models: LoadedModels, prompts: list[list[int]], ec: EvalConfig) -> tuple[list[int], list[list[int]]]:
    """Every prompt decoded alone under EAGLE-2's tree: the accepted counts of every iteration, the answers."""
    settings = PolicySettings.single(CostModel.linear(1.0, 0.0), shape=ec.tree)
    engine = models.engine(Eagle2Policy(settings), 1, max(map(len, prompts)) + ec.max_new_tokens)
    log, outputs = StepLog(), []
    for ids in prompts:
        outputs.append(engine.generate([ids], SamplingParams(max_new_tokens=ec.max_new_tokens), on_step=log)[0].token_ids)
    return [a for record in log.records for a in record.accepted], outputs


def main() -> None:
    torch.set_num_threads(2)
    count, out, formats = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
    heads = dict(spec.split("=", 1) for spec in sys.argv[4:])
    ec = EvalConfig()
    record = json.loads(out.read_text()) if out.is_file() else {}
    for name, head in heads.items():
        for fmt in formats:
            pair = None
            for bench in BENCHMARKS:
                key = f"{name} {fmt} {bench}"
                if key in record:
                    continue
                pair = pair or load_model_pair(None, head, "cpu", "float32", weight_format=fmt)
                prompts = [chat_ids(pair.tokenizer, p) for p in first_turns(Path("datasets") / f"{bench}.jsonl", count)]
                began = time.time()
                accepted, outputs = decode(LoadedModels(pair.target, pair.draft, pair.tokenizer, pair.eos_token_ids),
                                           prompts, ec)
                record[key] = {"head": name, "path": head, "format": fmt, "benchmark": bench, "prompts": count,
                               "tau": committed_tokens(accepted) / len(accepted), "iterations": len(accepted),
                               "seconds": round(time.time() - began, 1), "outputs": outputs}
                print(f"{key}: tau {record[key]['tau']:.3f}", flush=True)
                out.write_text(json.dumps(record))
    for key, r in record.items():
        ref = record.get(f"{r['head']} fp32 {r['benchmark']}")
        same = f", answers equal to fp32's {sum(a == b for a, b in zip(r['outputs'], ref['outputs']))}/{r['prompts']}" \
            if ref else ""
        print(f"{key}: tau {r['tau']:.3f} over {r['iterations']} iterations{same}")


if __name__ == "__main__":
    main()
