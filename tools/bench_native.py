"""Benchmark of the native engine's plain decoding against transformers, the memory
floor of this machine, and the target's cost curve f_T(B, c, n) / f_T(B, c, 1).

    python tools/bench_native.py --json docs/results/native.json

Everything is measured in this one process; ratios come from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from tqdm import tqdm

from sglang_cast.cast import SamplingParams
from sglang_cast.engine import Engine, EngineArgs, build_engine
from sglang_cast.engine.timing import ForwardTimer
from sglang_cast.hardware import cpu_name
from sglang_cast.models import KVCache
from sglang_cast.models.loader import resolve_model_dir

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "mt_bench.jsonl"


def first_turns(path: Path, count: int) -> list[str]:
    with path.open() as handle:
        return [json.loads(line)["turns"][0] for line in handle][:count]


def read_bandwidth_gbs(megabytes: int = 512, repeats: int = 5) -> float:
    """Sustained read bandwidth: summing a buffer far larger than any cache."""
    buffer = torch.ones(megabytes * 1024 * 1024 // 4)
    buffer.sum()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sum()
        samples.append(time.perf_counter() - start)
    return buffer.numel() * 4 / statistics.median(samples) / 1e9


def weight_bytes_per_step(model: torch.nn.Module) -> int:
    """Bytes of weights one decode step reads (a tied embedding is read once, as the LM head)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def time_ours(engine: Engine, prompts: list[str], new_tokens: int) -> list[float]:
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    rates = []
    for prompt in prompts:
        start = time.perf_counter()
        result = engine.generate([prompt], params)[0]
        rates.append(len(result.token_ids) / (time.perf_counter() - start))
    return rates


def time_transformers(model, tokenizer, prompts: list[str], new_tokens: int) -> list[float]:
    rates = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        rates.append((out.shape[1] - ids.shape[1]) / (time.perf_counter() - start))
    return rates


def cost_curve(target, batch: int, context: int, n_max: int, repeats: int) -> list[float]:
    cache = KVCache.for_model(target.config, batch, context + n_max, "cpu", torch.float32)
    timer = ForwardTimer(lambda *a: target.logits(target(*a).hidden), cache, target.config.vocab_size)
    base = timer.time(batch, context, 1, repeats=repeats).median_ms
    return [base] + [timer.time(batch, context, n, repeats=repeats).median_ms for n in range(2, n_max + 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=5, help="mt_bench prompts to decode (first turns)")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens generated per prompt")
    parser.add_argument("--context", type=int, default=512, help="context length c of the cost curve")
    parser.add_argument("--max-n", type=int, default=64, help="largest n of the cost curve")
    parser.add_argument("--batch-sizes", default="1,8", help="batch sizes of the cost curve")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per cost-curve point")
    parser.add_argument("--json", type=Path, required=True, help="where to write the results")
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    engine = build_engine(EngineArgs(policy="vanilla", max_batch_size=1, context_length=2048, weight_format="fp32"))
    target, tokenizer = engine.target, engine.tokenizer
    hf_dir = resolve_model_dir(None)
    hf_model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                             tokenize=False) for p in first_turns(DATASET, args.prompts)]
    time_ours(engine, prompts[:1], 8)  # warm-up, excluded
    time_transformers(hf_model, hf_tokenizer, prompts[:1], 8)
    ours, theirs = [], []
    for prompt in tqdm(prompts, desc="decode (ours, transformers)"):
        ours += time_ours(engine, [prompt], args.new_tokens)
        theirs += time_transformers(hf_model, hf_tokenizer, [prompt], args.new_tokens)
    bandwidth = read_bandwidth_gbs()
    weights = weight_bytes_per_step(target)
    ours_ms = 1000 / statistics.median(ours)
    curves = {}
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        row = cost_curve(target, batch, args.context, args.max_n, args.repeats)
        curves[str(batch)] = {"f1_ms": row[0], "ratio": [round(x / row[0], 3) for x in row]}
    result = {
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "decode": {
            "prompts": len(prompts), "new_tokens": args.new_tokens,
            "ours_tokens_per_s_median": statistics.median(ours),
            "transformers_tokens_per_s_median": statistics.median(theirs),
            "speedup_vs_transformers": statistics.median(ours) / statistics.median(theirs),
            "ours_ms_per_token": ours_ms,
            "weight_bytes_per_step": weights,
            "read_bandwidth_gbs": bandwidth,
            "memory_floor_ms_per_token": weights / (bandwidth * 1e9) * 1000,
        },
        "target_cost_curve": {"context": args.context, "n": list(range(1, args.max_n + 1)), "by_batch": curves},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["decode"], indent=2))


if __name__ == "__main__":
    main()
