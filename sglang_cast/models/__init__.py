"""Model layer: Llama-family target, EAGLE draft heads, tree attention and KV cache."""

from .attention import AttentionBatch, build_attention_mask, causal_tree_mask, tree_attention
from .config import SUPPORTED_ARCHITECTURES, ModelConfig
from .eagle import (
    DraftConfig,
    DraftModel,
    DraftOutput,
    Eagle3Draft,
    EagleDraft,
    load_draft,
    save_draft,
)
from .kv_cache import KVCache
from .llama import LlamaModel, ModelOutput, eagle3_feature_layers
from .cache import cache_root
from .loader import embedded_gguf_path, hf_to_internal, load_target
from .numerics import (
    Divergence,
    KernelPaths,
    first_divergence,
    judge_by_kernel_paths,
    judge_paths,
    kernel_paths,
)
from .weights import DraftFormat, Format, WeightFormat

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "AttentionBatch",
    "DraftConfig",
    "DraftFormat",
    "DraftModel",
    "DraftOutput",
    "Divergence",
    "Eagle3Draft",
    "EagleDraft",
    "Format",
    "KVCache",
    "KernelPaths",
    "LlamaModel",
    "ModelConfig",
    "ModelOutput",
    "WeightFormat",
    "build_attention_mask",
    "cache_root",
    "causal_tree_mask",
    "eagle3_feature_layers",
    "embedded_gguf_path",
    "first_divergence",
    "hf_to_internal",
    "judge_by_kernel_paths",
    "judge_paths",
    "kernel_paths",
    "load_draft",
    "load_target",
    "save_draft",
    "tree_attention",
]
