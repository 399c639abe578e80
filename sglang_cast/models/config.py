"""Architecture description shared by the target model, the draft heads and the loaders.

`ModelConfig` is the single source of truth for tensor shapes.  It is built from a
Hugging Face ``config.json`` dict and refuses anything our implementation would
silently compute differently (rope scaling, sliding windows, non-SiLU MLPs), because a
speculative engine that drifts from the reference model loses exactness, not just speed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# HF architecture name -> HF model_type written back by `to_hf`.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
}

# model_type -> architecture, used when a config has no `architectures` list.
_MODEL_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "smollm": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and numerics of a Llama-family decoder (Llama, SmolLM2, Qwen2)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"architectures: unsupported {self.architecture!r}; "
                f"supported: {sorted(SUPPORTED_ARCHITECTURES)}"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_kv_heads}) for grouped-query attention"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError(
                f"rms_norm_eps ({self.rms_norm_eps}) and rope_theta ({self.rope_theta}) "
                "must be positive"
            )

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> ModelConfig:
        """Parse a Hugging Face ``config.json`` dict.

        Raises ``ValueError`` naming the offending field when the architecture is unknown
        or uses a feature this implementation does not reproduce exactly.
        """
        architecture = _architecture(cfg)
        hidden = _required(cfg, "hidden_size")
        heads = _required(cfg, "num_attention_heads")
        if cfg.get("head_dim") is None and hidden % heads:
            raise ValueError(
                f"hidden_size ({hidden}) must be divisible by num_attention_heads ({heads}) "
                "when head_dim is not given"
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act: only 'silu' is supported, got {cfg['hidden_act']!r}")
        # transformers>=5 writes `rope_parameters`; older configs use rope_theta/rope_scaling.
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"rope_scaling: only unscaled RoPE is supported, got {rope!r}")
        if cfg.get("mlp_bias"):
            raise ValueError("mlp_bias: MLP biases are not supported")
        if cfg.get("use_sliding_window"):
            raise ValueError("use_sliding_window: sliding-window attention is not supported")
        is_qwen2 = architecture == "Qwen2ForCausalLM"
        return cls(
            architecture=architecture,
            vocab_size=_required(cfg, "vocab_size"),
            hidden_size=hidden,
            intermediate_size=_required(cfg, "intermediate_size"),
            num_layers=_required(cfg, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases; Llama exposes it as a flag.
            attention_bias=is_qwen2 or bool(cfg.get("attention_bias", False)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=_eos_ids(cfg.get("eos_token_id")),
        )

    def to_hf(self) -> dict[str, Any]:
        """The equivalent Hugging Face ``config.json`` dict (round-trips through `from_hf`)."""
        cfg: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": SUPPORTED_ARCHITECTURES[self.architecture],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids),
            "torch_dtype": "float32",
        }
        if self.architecture == "LlamaForCausalLM":
            cfg["attention_bias"] = self.attention_bias
        return cfg


def _architecture(cfg: Mapping[str, Any]) -> str:
    architectures = cfg.get("architectures")
    if architectures:
        name = architectures[0]
        if name not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"architectures: unsupported {name!r}; supported: {sorted(SUPPORTED_ARCHITECTURES)}"
            )
        return name
    model_type = cfg.get("model_type")
    if model_type not in _MODEL_TYPES:
        raise ValueError(
            f"model_type: unsupported {model_type!r} (and no architectures given); "
            f"supported: {sorted(_MODEL_TYPES)}"
        )
    return _MODEL_TYPES[model_type]


def _required(cfg: Mapping[str, Any], key: str) -> Any:
    if key not in cfg:
        raise ValueError(f"{key}: missing from model config")
    return cfg[key]


def _eos_ids(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)
