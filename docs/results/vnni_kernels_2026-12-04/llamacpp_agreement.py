"""Top-1 agreement with our fp32 model over every position of the first N mt_bench prompts,
for our weight formats and for llama.cpp on the same GGUF (its own kernels: Q4_1 weights
times Q8_1 activations on this CPU), as tools/bench_kernels.py's agreement stage counts it,
and each one's perplexity of the prompts' own next tokens (the chat template included).

    .venv/bin/python docs/results/vnni_kernels_2026-12-04/llamacpp_agreement.py --num-prompts 8 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]
from bench_kernels import DATASET, build_variants, prompt_ids, prompt_logits  # noqa: E402
from sglang_cast.models import load_target  # noqa: E402
from sglang_cast.models.loader import embedded_gguf_path  # noqa: E402


def compare(ref: torch.Tensor, got: torch.Tensor, ids: torch.Tensor) -> tuple[int, int, float, float]:
    """(agreeing positions, positions, max |Δlogit|, summed NLL of each next prompt token)."""
    nll = torch.nn.functional.cross_entropy(got[:-1].double(), ids[0, 1:], reduction="sum")
    return int((ref.argmax(-1) == got.argmax(-1)).sum()), ref.shape[0], float((got - ref).abs().max()), float(nll)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--variants", default="int4/int8,int4vnni/int8vnni,int4vnni/int8")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    import llama_cpp

    fp32, _, tokenizer = load_target(None, "cpu", torch.float32)
    prompts = prompt_ids(tokenizer, DATASET, args.num_prompts)
    models = build_variants(fp32, ["fp32", *args.variants.split(",")])
    llm = llama_cpp.Llama(model_path=str(embedded_gguf_path()), n_ctx=2048, n_threads=2, n_threads_batch=2,
                          n_batch=512, logits_all=True, verbose=False)
    totals: dict[str, list] = {name: [0, 0, 0.0, 0.0] for name in [*models, "llama.cpp"]}
    with torch.no_grad():
        for ids in prompts:
            ref = prompt_logits(models["fp32"], ids)
            rows = {name: prompt_logits(model, ids) for name, model in models.items()}
            llm.reset()
            llm.eval(ids[0].tolist())
            rows["llama.cpp"] = torch.from_numpy(np.array(llm.scores[: ids.shape[1]], dtype=np.float32))
            for name, got in rows.items():
                agree, n, diff, nll = compare(ref, got[:, : ref.shape[1]], ids)
                totals[name][0] += agree
                totals[name][1] += n
                totals[name][2] = max(totals[name][2], diff)
                totals[name][3] += nll
    predicted = sum(ids.shape[1] - 1 for ids in prompts)
    result = {name: {"top1_agreement": round(a / n, 4), "positions": n, "disagreements": n - a,
                     "max_abs_logit_diff": round(d, 3), "prompt_perplexity": round(float(np.exp(nll / predicted)), 4)}
              for name, (a, n, d, nll) in totals.items()}
    result["llama.cpp"]["version"] = llama_cpp.__version__
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result.items():
        print(name, row)


if __name__ == "__main__":
    main()
