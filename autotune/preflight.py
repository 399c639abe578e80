"""``cast-autotune preflight``: will this profile's SGLang launch fit on that GPU?

Lists the runtime states the CAST worker would build for the profile, the
memory each needs on one GPU and the totals (weights, states, KV pool, slack),
with the arithmetic of ``sglang_cast.sglang_plugin.memory_plan`` (SGLang
0.5.23's own sizing rules).  Exit 0 when it fits, 1 when it does not (the last
line says why and what to change), 2 for bad input.  No GPU, no SGLang needed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sglang_cast.cast import make_policy
from sglang_cast.profile import ProfileError, load_profile
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.memory_plan import LaunchSettings, ModelShape, MemoryPlan, plan_memory
from sglang_cast.sglang_plugin.plugin_config import ParallelLayout, SGLangSection, StaticShape, require_layout

from .errors import AutotuneError

DOES_NOT_FIT = 1


def read_config_json(path: Path, flag: str) -> dict:
    """A config.json, or the one in directory ``path``."""
    file = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise AutotuneError(f"{flag}: cannot read a JSON model config from {file} ({err})") from None
    if not isinstance(config, dict):
        raise AutotuneError(f"{flag}: {file} is not a JSON object")
    return config


def read_model_config(path: Path, flag: str) -> ModelShape:
    try:
        return ModelShape.from_config(read_config_json(path, flag), f"{flag} {path}")
    except (ValueError, TypeError) as err:
        raise AutotuneError(str(err)) from None


def context_length(args: argparse.Namespace) -> int:
    """``--context-length``, else the model's ``max_position_embeddings`` (SGLang's default)."""
    if args.context_length is not None:
        return args.context_length
    context = read_config_json(args.model_config, "--model-config").get("max_position_embeddings")
    if not isinstance(context, int) or context < 1:
        raise AutotuneError("--context-length: not given and the model config has no max_position_embeddings")
    return context


def static_shape(args: argparse.Namespace, settings) -> StaticShape:
    """The launch's tree shape: the flags where given, else the profile's covering shape."""
    covering = StaticShape.covering(settings)
    shape = StaticShape(args.speculative_num_steps or covering.num_steps,
                        args.speculative_eagle_topk or covering.topk,
                        args.speculative_num_draft_tokens or covering.num_draft_tokens)
    try:
        shape.require_fit(settings, args.profile)
        shape.check()
    except ValueError as err:
        raise AutotuneError(str(err)) from None
    return shape


def preflight(args: argparse.Namespace) -> tuple[StaticShape, MemoryPlan]:
    try:
        profile = load_profile(args.profile).profile
        section = SGLangSection.of(profile)
    except ProfileError as err:
        raise AutotuneError(f"--profile: {err}") from None
    tp_size = args.tp_size or section.parallel.tp_size
    try:
        require_layout(profile, ParallelLayout(tp_size, section.parallel.pp_size), args.profile)
    except ProfileError as err:
        raise AutotuneError(f"--tp-size {tp_size}: {err}") from None
    settings = profile.settings
    shape = static_shape(args, settings)
    target = read_model_config(args.model_config, "--model-config")
    draft = read_model_config(args.draft_config, "--draft-config") if args.draft_config else target.eagle_head()
    try:
        states = CastDecider(make_policy("cast", settings), shape, section.runtime_states).states
    except ValueError as err:
        raise AutotuneError(f"--profile: {err}") from None
    launch = LaunchSettings(gpu_memory_gib=args.gpu_memory_gb, context_length=context_length(args),
                            max_running_requests=args.max_running_requests,
                            mem_fraction_static=args.mem_fraction_static,
                            chunked_prefill_size=args.chunked_prefill_size, tp_size=tp_size)
    return shape, plan_memory(target, draft, states, (shape.num_steps, shape.num_draft_tokens), launch)


def cmd_preflight(args: argparse.Namespace) -> int:
    shape, plan = preflight(args)
    print(f"profile {args.profile}: --speculative-num-steps {shape.num_steps} --speculative-eagle-topk {shape.topk} "
          f"--speculative-num-draft-tokens {shape.num_draft_tokens}; draft head: "
          f"{args.draft_config or 'assumed EAGLE-3 head of the target shape'}")
    print(plan.report())
    return DOES_NOT_FIT if plan.problems() else 0


def add_preflight_parser(commands, formatter_class, int_in, float_in) -> None:
    """Register ``preflight`` on the CLI's subcommand set."""
    p = commands.add_parser("preflight", help="check before launch that a profile's SGLang runtime states fit the GPU",
                            formatter_class=formatter_class, description=__doc__.split("\n\n")[1])
    p.add_argument("--profile", type=Path, required=True, help="CAST profile YAML")
    p.add_argument("--model-config", type=Path, required=True, help="target model's config.json (or its directory)")
    p.add_argument("--draft-config", type=Path, default=None,
                   help="draft head's config.json (default: an EAGLE-3 head of the target's layer shape)")
    p.add_argument("--gpu-memory-gb", type=float_in(1, 4096), required=True,
                   help="one GPU's total memory in GiB, as nvidia-smi reports it (SGLang sizes from that)")
    p.add_argument("--tp-size", type=int_in(1, 64), default=None,
                   help="SGLang --tp-size: the model is sharded over this many GPUs; the check is per GPU (default: "
                        "the layout the profile was made for, provenance.sglang.parallel; another is refused, as "
                        "the server refuses it)")
    p.add_argument("--context-length", type=int_in(1, 1 << 24), default=None,
                   help="SGLang --context-length (default: the model's max_position_embeddings, as SGLang)")
    p.add_argument("--max-running-requests", type=int_in(1, 1 << 16), default=48,
                   help="SGLang --max-running-requests (CAST's default is 48)")
    p.add_argument("--mem-fraction-static", type=float_in(0.01, 0.99), default=None,
                   help="SGLang --mem-fraction-static (default: SGLang's own rule for this GPU)")
    p.add_argument("--chunked-prefill-size", type=int_in(1, 1 << 20), default=None,
                   help="SGLang --chunked-prefill-size (default: SGLang's own rule for this GPU)")
    p.add_argument("--speculative-num-steps", type=int_in(1, 256), default=None,
                   help="default: the profile's largest max_depth")
    p.add_argument("--speculative-eagle-topk", type=int_in(1, 256), default=None,
                   help="default: the profile's largest top_k")
    p.add_argument("--speculative-num-draft-tokens", type=int_in(2, 1024), default=None,
                   help="default: the profile's largest num_verify_tokens")
    p.set_defaults(run=cmd_preflight)
