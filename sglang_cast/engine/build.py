"""Building engines: the one place that loads a target and its draft head and turns
them into an `Engine`.  The server, `cast-autotune`, the tools and training all go
through `LoadedModels.engine`, so defaults (embedded model, shipped head) and the
rules (a drafting policy needs a head, CUDA graphs on CUDA only) live in one spot.

``build_engine`` reads top to bottom: check the arguments, build the policy, choose
the weight format (it may time candidate formats), load the models, compile, build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..cast import CostModel, Policy, PolicySettings, policy_class
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
    # How the target's linears / LM head are stored: "fp32", "bf16", "int8", "int4", "int4amx", "int8amx",
    # "int4vnni", "int8vnni" or "<linears>/<lm_head>" such as "int4/int8", either with "+<draft>" for the draft head's linears
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


@dataclass
class LoadedModels:
    """A loaded target, its tokenizer and its draft head (``None`` when nothing drafts):
    what every engine is built from."""

    target: Any
    draft: Any
    tokenizer: Any
    eos_token_ids: tuple[int, ...] = ()
    cuda_graph: bool = True  # engines on CUDA record their decode forwards as graphs (engine/cuda_graphs.py)

    @property
    def device(self) -> torch.device:
        return next(self.target.parameters()).device

    @property
    def torch_dtype(self) -> torch.dtype:
        return next(self.target.parameters()).dtype

    @property
    def graph_backend(self) -> str | None:
        """CUDA graphs on a GPU (unless ``cuda_graph`` is off), eager forwards elsewhere."""
        return "cuda" if self.cuda_graph and self.device.type == "cuda" else None

    def engine(self, policy: Policy, max_batch_size: int, context_length: int) -> Engine:
        """An engine running ``policy`` over these models (the engine drops the draft
        head when the policy does not draft)."""
        return Engine(self.target, self.tokenizer, self.draft, policy,
                      max_batch_size=max_batch_size, context_length=context_length,
                      eos_token_ids=self.eos_token_ids, graph_backend=self.graph_backend)


def default_draft_path(model_path: str | None) -> Path | None:
    """The shipped head serves the embedded model only."""
    if model_path is None and (EMBEDDED_DRAFT / "config.json").is_file():
        return EMBEDDED_DRAFT
    return None


def resolve_settings(policy: type[Policy], settings: PolicySettings | None) -> PolicySettings:
    """Policies that never read costs (``eagle2``, ``vanilla``) may run without a
    profile; cost-aware ones decide on its tables and refuse to guess them."""
    if settings is not None:
        return settings
    if not policy.cost_aware:
        return PolicySettings.single(CostModel.linear(per_token_ms=1.0, fixed_ms=0.0))
    raise ValueError(f"policy {policy.name!r} needs cost tables: pass a profile (settings) measured on this device")


def load_models(model_path: str | None, draft_path: str | Path | None, device: str, dtype: torch.dtype,
                weight_format: str, cuda_graph: bool = True) -> LoadedModels:
    """The target in ``weight_format`` and, when ``draft_path`` is given, its head in
    the format's draft part."""
    target, config, tokenizer = load_target(model_path, device, dtype, weight_format)
    draft = None if draft_path is None else load_head(draft_path, target, device, dtype, weight_format)
    return LoadedModels(target, draft, tokenizer, config.eos_token_ids, cuda_graph)


def load_head(draft_path: str | Path, target, device: str, dtype: torch.dtype, weight_format: str):
    """The draft head at ``draft_path`` over ``target``, its linears in the format's draft part."""
    return load_draft(draft_path, target, device, dtype, WeightFormat.parse(weight_format).draft)


def build_engine(args: EngineArgs) -> Engine:
    if args.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {args.dtype!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {args.device!r} requested but CUDA is not available")
    chosen = policy_class(args.policy)
    policy = chosen(resolve_settings(chosen, args.settings))
    draft_path = (args.draft_path or default_draft_path(args.model_path)) if policy.needs_draft else None
    if policy.needs_draft and draft_path is None:
        raise ValueError("no draft head for this model: pass a draft path or use policy 'vanilla'")
    dtype = DTYPES[args.dtype]
    weight_format = choose_weight_format(args.weight_format, device=args.device, profile=args.profile,
                                         sizes=verify_sizes(policy.settings, policy.needs_draft),
                                         model_path=args.model_path, dtype=dtype, draft_path=draft_path,
                                         draft_rows=draft_sizes(policy.settings, policy.needs_draft)).weight_format
    models = load_models(args.model_path, draft_path, args.device, dtype, weight_format, args.cuda_graph)
    max_context = models.target.config.max_position_embeddings
    if args.context_length > max_context:
        raise ValueError(f"context_length {args.context_length} exceeds the model's {max_context} positions")
    if compile_wanted(args.compile, models.target):
        compile_models(models.target, models.draft, args.max_batch_size)
    return models.engine(policy, args.max_batch_size, args.context_length)
