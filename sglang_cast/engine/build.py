"""Building an engine from paths and names: the one place CLI/server/tools go
through, so defaults (embedded model, shipped head) live in one spot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..cast import CostModel, PolicySettings, make_policy
from ..models import load_draft, load_target
from ..models.compiled import compile_models, compile_wanted
from ..models.weights import WeightFormat
from .engine import Engine
from .format_choice import AUTO, choose_weight_format, draft_sizes, verify_sizes

if TYPE_CHECKING:
    from ..profile import Profile

ASSETS = Path(__file__).resolve().parent.parent / "assets"
EMBEDDED_DRAFT = ASSETS / "smollm2-135m-eagle"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class EngineArgs:
    model_path: str | None = None  # None: the embedded SmolLM2-135M-Instruct
    draft_path: str | None = None  # None: the shipped head for the embedded model
    policy: str = "cast"
    settings: PolicySettings | None = None  # required for cast/goodput (their cost tables)
    max_batch_size: int = 8
    context_length: int = 2048
    device: str = "cpu"
    dtype: str = "float32"
    # How the target's linears / LM head are stored: "fp32", "bf16", "int8", "int4" or
    # "<linears>/<lm_head>" such as "int4/int8", either with "+<draft>" for the draft head's linears
    # ("int4/int8+int8"; CPU only; models/weights.py, docs/precision.md),
    # or "auto": chosen by engine/format_choice.py (the profile's, else measured here).
    weight_format: str = AUTO
    profile: Profile | None = None  # what `settings` came from: its recorded format decides "auto"
    # "on" compiles the layers at construction, "auto" only those of packed weight formats
    # (fp32 stays the eager reference); "off" by default: it measured no faster here
    # (models/compiled.py, docs/precision.md).
    compile: str = "off"
    # CUDA graphs for decoding, verification and the draft's steps (engine/cuda_graphs.py);
    # on CUDA only, where launch overhead dominates a small model's step.  False:
    # every forward eager (SGLang's --disable-cuda-graph).
    cuda_graph: bool = True


def default_draft_path(model_path: str | None) -> Path | None:
    """The shipped head serves the embedded model only."""
    if model_path is None and (EMBEDDED_DRAFT / "config.json").is_file():
        return EMBEDDED_DRAFT
    return None


def resolve_settings(policy: str, settings: PolicySettings | None) -> PolicySettings:
    """``eagle2`` and ``vanilla`` never read costs, so they may run without a
    profile; cast and goodput decide on costs and refuse to guess them."""
    if settings is not None:
        return settings
    if policy in ("vanilla", "eagle2"):
        return PolicySettings.single(CostModel.linear(per_token_ms=1.0, fixed_ms=0.0))
    raise ValueError(f"policy {policy!r} needs cost tables: pass a profile (settings) measured on this device")


def build_engine(args: EngineArgs) -> Engine:
    if args.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {args.dtype!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {args.device!r} requested but CUDA is not available")
    settings = resolve_settings(args.policy, args.settings)
    policy = make_policy(args.policy, settings)
    draft_path = args.draft_path or default_draft_path(args.model_path)
    weight_format = choose_weight_format(args.weight_format, device=args.device, profile=args.profile,
                                         sizes=verify_sizes(args.policy, settings), model_path=args.model_path,
                                         dtype=DTYPES[args.dtype], draft_path=draft_path,
                                         draft_rows=draft_sizes(args.policy, settings)).weight_format
    target, config, tokenizer = load_target(args.model_path, args.device, DTYPES[args.dtype], weight_format)
    draft = None
    if policy.name != "vanilla":
        if draft_path is None:
            raise ValueError("no draft head for this model: pass a draft path or use policy 'vanilla'")
        draft = load_draft(draft_path, target, args.device, DTYPES[args.dtype], WeightFormat.parse(weight_format).draft)
    max_context = config.max_position_embeddings
    if args.context_length > max_context:
        raise ValueError(f"context_length {args.context_length} exceeds the model's {max_context} positions")
    if compile_wanted(args.compile, target):
        compile_models(target, draft, args.max_batch_size)
    graph_backend = "cuda" if args.cuda_graph and args.device.startswith("cuda") else None
    return Engine(target, tokenizer, draft, policy, max_batch_size=args.max_batch_size,
                  context_length=args.context_length, eos_token_ids=config.eos_token_ids,
                  graph_backend=graph_backend)
