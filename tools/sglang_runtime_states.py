"""Write a profile's SGLang runtime states from a replay of stored traces.

``cast-autotune tune`` is meant to do this itself (``sglang_plugin.tune_states``);
this tool does it for a profile that exists already, e.g. the shipped analytic
GPU profiles:

    python tools/sglang_runtime_states.py --profile profiles/h100.yaml \\
        --db ~/.cache/sglang_cast/autotune.db --trace-target embedded:SmolLM2-135M-Instruct \\
        --trace-draft '<draft id as stored>' --model-config profiles/models/llama-3.1-8b \\
        --gpu-memory-gb 80 [--tp-size 1] [--max-states 8] [--max-memory-share 0.1]

The states' memory is weighed for ``--model-config`` (with an EAGLE-3 head of
its shape) at its full context on one GPU of ``--gpu-memory-gb``
(``memory_plan.state_bytes_for``).  Prints the cover; ``--write`` saves it into
the profile (``provenance.sglang``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autotune.model_configs import read_config_json
from autotune.store import Store
from sglang_cast.profile import load_profile, save_profile
from sglang_cast.sglang_plugin.memory_plan import GIB, LaunchSettings, ModelShape, state_bytes_for
from sglang_cast.sglang_plugin.plugin_config import SGLangSection
from sglang_cast.sglang_plugin.state_cover import StateCap
from sglang_cast.sglang_plugin.tune_states import with_runtime_states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", type=Path, required=True)
    parser.add_argument("--db", type=Path, required=True, help="autotune database holding the traces")
    parser.add_argument("--trace-target", required=True, help="target model id the traces were recorded with")
    parser.add_argument("--trace-draft", required=True, help="draft model id the traces were recorded with")
    parser.add_argument("--model-config", type=Path, required=True, help="the deployed target's config.json (dir)")
    parser.add_argument("--gpu-memory-gb", type=float, required=True)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--max-states", type=int, default=None)
    parser.add_argument("--max-memory-share", type=float, default=None)
    parser.add_argument("--write", action="store_true", help="save the states into the profile")
    args = parser.parse_args()

    loaded = load_profile(args.profile)
    config = read_config_json(args.model_config, "--model-config")
    target = ModelShape.from_config(config, str(args.model_config))
    launch = LaunchSettings(gpu_memory_gib=args.gpu_memory_gb, context_length=int(config["max_position_embeddings"]),
                            tp_size=args.tp_size)
    cap = SGLangSection.of(loaded.profile).cap
    overrides = {k: v for k, v in (("max_states", args.max_states), ("max_memory_share", args.max_memory_share))
                 if v is not None}
    stored = Store(args.db).traces(args.trace_target, args.trace_draft)
    described = (f"{len(stored)} stored iterations of {args.trace_target} + {args.trace_draft}; states weighed for "
                 f"{args.model_config} at {launch.context_length} context, {args.gpu_memory_gb} GiB per GPU, "
                 f"--tp-size {args.tp_size}")
    profile = with_runtime_states(loaded.profile, [s.trace for s in stored],
                                  state_bytes_for(target, target.eagle_head(), launch),
                                  int(args.gpu_memory_gb * GIB), StateCap(**{**cap.__dict__, **overrides}),
                                  traces_described=described)
    print(json.dumps(profile.provenance["sglang"], indent=1))
    if args.write:
        save_profile(profile, args.profile)


if __name__ == "__main__":
    main()
