"""Where the online trainer's generation time goes (sglang_cast/training/online.py): plain
decoding of template prompts through the engine at several batch sizes, greedy or sampled,
tokens per second per setting and, for the last one, the host functions cProfile charges
most. On the CPU it runs too (small sizes), on a GPU it is the check for the online kit.

    python tools/generation_profile.py --device cuda --gen-batch 32,128 --prompts 256 --tokens 128 \\
        --json /tmp/generation_profile.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path

import torch

from sglang_cast.cast import SamplingParams, TreeShape
from sglang_cast.flags import int_list
from sglang_cast.models import load_target
from sglang_cast.training.prompts import template_prompts
from sglang_cast.training.target import Target, chat_ids, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    positive_ints = int_list(1, increasing=False)
    parser.add_argument("--gen-batch", type=positive_ints, default=[32, 128], help="engine batch sizes, e.g. 32,128")
    parser.add_argument("--prompts", type=positive_ints, default=[256], help="template prompts per setting")
    parser.add_argument("--tokens", type=positive_ints, default=[128], help="new tokens per prompt")
    parser.add_argument("--sampled", action="store_true", help="temperature 0.9, top-p 0.95, a seed per request")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    model, config, tokenizer = load_target(None, args.device, getattr(torch, args.dtype))
    target = Target(model, tokenizer, config.eos_token_ids)
    prompts = [chat_ids(tokenizer, p) for p in template_prompts(args.prompts[0], 7)]
    new = args.tokens[0]
    results = []
    profiled = ""
    for i, batch in enumerate(args.gen_batch):
        began = time.time()
        engine = target.engine(None, TreeShape(), batch, max(len(p) for p in prompts) + new)
        built = time.time() - began
        params = [SamplingParams(max_new_tokens=new, ignore_eos=True,
                                 **({"temperature": 0.9, "top_p": 0.95, "seed": j} if args.sampled else {}))
                  for j in range(len(prompts))]
        profiler = cProfile.Profile() if i == len(args.gen_batch) - 1 else None
        began = time.time()
        if profiler:
            profiler.enable()
        gens = generate(engine, prompts, params, desc=f"B={batch}")
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.time() - began
        if profiler:
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
            profiled = text.getvalue()
        tokens = sum(len(g.output_ids) for g in gens)
        results.append({"gen_batch": batch, "prompts": len(prompts), "tokens": tokens, "seconds": round(seconds, 2),
                        "tokens_per_s": round(tokens / seconds, 1), "engine_build_s": round(built, 2),
                        "sampled": args.sampled, "profiled": profiler is not None})
        print(json.dumps(results[-1]), flush=True)
    print(profiled)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "cprofile_tottime": profiled}, indent=1))


if __name__ == "__main__":
    main()
