"""The target/draft pair being tuned, loaded once and shared by every stage.

Measurements and traces are keyed by the pair's identifiers, so a trained draft
head never inherits traces (acceptance) recorded with another head.  The embedded
model's head ships in sglang_cast/assets/smollm2-135m-eagle/ and is the default.
For a run without it (``--draft-path`` unset and the asset missing), a random-weight
EAGLE head of the target's layer shape stands in: its forward costs are those of a
real EAGLE-1/2 head of that shape (cost does not depend on weights), but its
acceptance is near zero, so thresholds tuned on its traces must be re-tuned with a
trained head.  Its identifier says so (``random-eagle-head:seed=<seed>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from sglang_cast.engine import feature_width
from sglang_cast.engine.build import DTYPES, LoadedModels, default_draft_path, load_head, load_models
from sglang_cast.models import ModelConfig
from sglang_cast.models.weights import WeightFormat, apply_draft_format
from sglang_cast.models.eagle import DraftConfig, EagleDraft
from sglang_cast.models.cache import CACHE_ENV, cache_root
from sglang_cast.models.digest import weights_digest
from sglang_cast.models.loader import EMBEDDED_NAME

from .errors import AutotuneError

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "sglang_cast"  # the installed package's folder

RANDOM_HEAD_PREFIX = "random-eagle-head"


@dataclass(kw_only=True)
class ModelPair(LoadedModels):
    """Loaded target + draft (their engines built as every engine is: `LoadedModels.engine`,
    the profile timing the same graph backend), and the identifiers rows are keyed by."""

    target_id: str
    draft_id: str
    dtype: str
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template

    @property
    def random_draft(self) -> bool:
        return self.draft_id.startswith(RANDOM_HEAD_PREFIX)

    @property
    def feature_width(self) -> int:
        """Width of the features the draft reads (3 target layers for EAGLE-3)."""
        return feature_width(self.target, self.draft)

    def format_prompt(self, text: str) -> str:
        return chat_prompt(self.tokenizer, text) if self.chat_template else text


def chat_prompt(tokenizer, text: str) -> str:
    """``text`` as one user turn in the tokenizer's chat template, the reply to come."""
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=False)



def random_eagle_head(target, config: ModelConfig, seed: int) -> EagleDraft:
    """An EAGLE-1/2 head with the target's layer shape and N(0, 0.05) weights."""
    generator = torch.Generator().manual_seed(seed)
    layer = ModelConfig.from_hf({**config.to_hf(), "num_hidden_layers": 1})
    head = EagleDraft(DraftConfig("eagle", layer, True, layer.vocab_size), target)
    with torch.no_grad():
        for param in head.parameters():
            param.copy_(0.05 * torch.randn(param.shape, generator=generator))
    return head.to(next(target.parameters()).device, next(target.parameters()).dtype).eval()


def format_target_id(target_id: str, weight_format: str) -> str:
    """The id of ``target_id``'s target stored in ``weight_format``: fp32 is the bare
    (reference) id, any other format appends ``@<format>``, so each format's
    measurements are their own cost curve."""
    base = reference_target_id(target_id)
    fmt = str(WeightFormat.parse(weight_format))
    return base if fmt == str(WeightFormat()) else f"{base}@{fmt}"


def reference_target_id(target_id: str) -> str:
    """The fp32 target's id, under which ``collect`` records the acceptance traces
    every format is tuned on."""
    base, sep, suffix = target_id.rpartition("@")
    try:
        return base if sep and WeightFormat.parse(suffix) else target_id
    except ValueError:  # an "@" inside the model path, not a format suffix
        return target_id


def target_model_id(model_path: str | None) -> str:
    """The id a dense target's measurements and traces are keyed by, on every backend:
    the embedded model's name, else the resolved path (`format_target_id` adds a
    packed format)."""
    return f"embedded:{EMBEDDED_NAME}" if model_path is None else str(Path(model_path).expanduser().resolve())


def draft_model_id(path: Path) -> str:
    """A head's id: its resolved path and weights digest, so a head retrained in
    place never shares measurements or traces with the old one."""
    return f"{path.expanduser().resolve()}#{weights_digest(path)}"


def portable_ref(model_id: str) -> str:
    """A model id or path as a published profile names it: a path inside this package (the
    shipped head) relative to the package's parent, one under the project cache as
    ``$SGLANG_CAST_CACHE/...``, anything else as given; a ``#digest`` suffix is kept.
    A profile travels to other clones and machines, so it must not name the checkout
    or the home folder of the machine that tuned it (issue 47)."""
    path, hash_mark, digest = model_id.partition("#")
    if ":" in path.split("/", 1)[0]:  # "embedded:...", "random-eagle:..." ids are names, not paths
        return model_id
    resolved = Path(path).expanduser().resolve()
    for root, shown in ((PACKAGE_ROOT.parent, None), (cache_root().expanduser().resolve(), f"${CACHE_ENV}")):
        if resolved.is_relative_to(root):
            relative = resolved.relative_to(root).as_posix()
            return f"{relative if shown is None else f'{shown}/{relative}'}{hash_mark}{digest}"
    return model_id


def load_model_pair(model_path: str | None, draft_path: str | None, device: str, dtype: str,
                    random_seed: int = 0, weight_format: str = "fp32") -> ModelPair:
    """Load the pair as ``EngineArgs`` would; fall back to a random head (and say so
    in ``draft_id``) when the embedded model has no shipped head yet.  A target stored
    in another weight format is another cost curve, so the format is part of its id."""
    if dtype not in DTYPES:
        raise AutotuneError(f"--dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    try:
        models = load_models(model_path, None, device, DTYPES[dtype], weight_format)
    except (FileNotFoundError, ValueError) as err:
        raise AutotuneError(f"--model-path: {err}") from None
    path = Path(draft_path).expanduser() if draft_path else default_draft_path(model_path)
    if path is None and model_path is not None:
        raise AutotuneError("--draft-path: required for a --model-path other than the embedded model")
    if path is None:
        head = random_eagle_head(models.target, models.target.config, random_seed)
        draft = apply_draft_format(head, WeightFormat.parse(weight_format).draft)
        draft_id = f"{RANDOM_HEAD_PREFIX}:seed={random_seed}"
    else:
        try:
            draft = load_head(path, models.target, device, DTYPES[dtype], weight_format)
        except (FileNotFoundError, ValueError) as err:
            raise AutotuneError(f"--draft-path: {err}") from None
        draft_id = draft_model_id(path)
    return ModelPair(models.target, draft, models.tokenizer, models.eos_token_ids,
                     target_id=format_target_id(target_model_id(model_path), weight_format), draft_id=draft_id,
                     dtype=dtype)
