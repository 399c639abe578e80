"""Convert a llama-architecture GGUF file into a Hugging Face style fp32 directory.

Conversion happens once (see `loader.py` for caching); afterwards the model loads
like any HF checkpoint.  Weights are dequantised with the ``gguf`` package, renamed
to HF keys and the q/k rows are un-permuted (see `unpermute_rope_rows`).  The
tokenizer (and its chat template from the GGUF metadata) is converted by
``transformers`` and saved as ``tokenizer.json`` + ``tokenizer_config.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, dequantize
from safetensors.torch import save_file
from tqdm import tqdm

from .config import ModelConfig
from .weights import Int4Groups, int4_from_q4_1

# GGUF per-block tensor name -> HF name inside ``model.layers.N``.
_BLOCK_NAMES: dict[str, str] = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES: dict[str, str] = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def unpermute_rope_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation for ``num_heads`` heads.

    HF Llama applies RoPE in the *half-split* layout (dimension ``d`` pairs with
    ``d + D/2``) while llama.cpp's kernel rotates *adjacent* pairs ``(2i, 2i+1)``.
    ``convert_hf_to_gguf.py`` therefore reorders each head's output rows with
    ``reshape(heads, 2, D/2, ...).swapaxes(1, 2)``: row ``i`` of the first half and row
    ``i`` of the second half become neighbours.  The inverse views each head as
    ``(D/2, 2)`` pairs and swaps back to ``(2, D/2)``.
    """
    rows = weight.shape[0]
    head_dim = rows // num_heads
    pairs = weight.reshape(num_heads, head_dim // 2, 2, *weight.shape[1:])
    return pairs.swapaxes(1, 2).reshape(weight.shape)


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    value = reader.get_field(key)
    return default if value is None else value.contents()


def gguf_hf_config(reader: GGUFReader) -> dict[str, Any]:
    """HF ``config.json`` dict from GGUF metadata (llama architecture only)."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(
            f"general.architecture: only 'llama' GGUF files are supported, got {arch!r}"
        )
    tensor_names = {t.name for t in reader.tensors}
    scaling = _field(reader, "llama.rope.scaling.type", "none")
    if scaling != "none" or "rope_freqs.weight" in tensor_names:
        raise ValueError("llama.rope.scaling: scaled RoPE GGUF files are not supported")
    hidden = _field(reader, "llama.embedding_length")
    heads = _field(reader, "llama.attention.head_count")
    head_dim = _field(reader, "llama.attention.key_length", hidden // heads)
    if _field(reader, "llama.rope.dimension_count", head_dim) != head_dim:
        raise ValueError("llama.rope.dimension_count: partial rotary embeddings are not supported")
    vocab = _field(reader, "llama.vocab_size") or len(reader.fields["tokenizer.ggml.tokens"].data)
    return ModelConfig(
        architecture="LlamaForCausalLM",
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=_field(reader, "llama.feed_forward_length"),
        num_layers=_field(reader, "llama.block_count"),
        num_heads=heads,
        num_kv_heads=_field(reader, "llama.attention.head_count_kv", heads),
        head_dim=head_dim,
        rms_norm_eps=_field(reader, "llama.attention.layer_norm_rms_epsilon"),
        rope_theta=_field(reader, "llama.rope.freq_base", 10000.0),
        max_position_embeddings=_field(reader, "llama.context_length"),
        tie_word_embeddings="output.weight" not in tensor_names,
        attention_bias=False,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_ids=(_field(reader, "tokenizer.ggml.eos_token_id"),),
    ).to_hf()


def hf_tensor_name(gguf_name: str) -> str:
    """Map a GGUF tensor name (``blk.3.attn_q.weight``) to its HF key."""
    match = _BLOCK_RE.match(gguf_name)
    if match and match.group(2) in _BLOCK_NAMES:
        layer, part, kind = match.groups()
        return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    stem, _, kind = gguf_name.rpartition(".")
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{kind}"
    raise ValueError(f"unknown GGUF tensor {gguf_name!r}")


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Write ``config.json``, ``model.safetensors`` (fp32) and tokenizer files to ``out_dir``."""
    from transformers import AutoTokenizer

    reader = GGUFReader(gguf_path)
    config = gguf_hf_config(reader)
    tensors: dict[str, torch.Tensor] = {}
    with tqdm(total=len(reader.tensors) + 1, desc=f"Converting {gguf_path.name}") as bar:
        for tensor in reader.tensors:
            weight = np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
            if ".attn_q." in tensor.name:
                weight = unpermute_rope_rows(weight, config["num_attention_heads"])
            elif ".attn_k." in tensor.name:
                weight = unpermute_rope_rows(weight, config["num_key_value_heads"])
            tensors[hf_tensor_name(tensor.name)] = torch.from_numpy(np.ascontiguousarray(weight))
            bar.update()
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        pin_special_tokens(tokenizer, reader)
        bar.update()
    save_file(tensors, out_dir / "model.safetensors", metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    # Inline the chat template in tokenizer_config.json rather than chat_template.jinja.
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)


def pin_special_tokens(tokenizer: Any, reader: GGUFReader) -> None:
    """Set the tokenizer's bos / eos / pad / unk tokens to the ids the GGUF metadata names.

    Why: transformers versions disagree on which special tokens their GGUF tokenizer
    conversion picks (one on a lent GPU machine gave SmolLM2's ``<|im_start|>``, id 1, as
    EOS, where the file says ``<|im_end|>``, id 2); the file is the one authority, and the
    saved ``tokenizer_config.json`` then agrees with ``config.json`` on every version.
    """
    for gguf_role, role in (("bos", "bos"), ("eos", "eos"), ("padding", "pad"), ("unknown", "unk")):
        token_id = _field(reader, f"tokenizer.ggml.{gguf_role}_token_id")
        if token_id is not None:
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(token_id)))


def read_q4_1_linears(gguf_path: Path) -> dict[str, Int4Groups]:
    """The file's Q4_1 decoder linears as exact `Int4Groups`, keyed by their name inside
    `LlamaModel.layers` (``"0.self_attn.q_proj"``); tensors in other types are skipped.

    q/k rows are un-permuted like the fp32 conversion; a Q4_1 block runs along a row's
    inputs, so moving whole rows keeps every block intact.
    """
    reader = GGUFReader(gguf_path)
    config = gguf_hf_config(reader)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    out: dict[str, Int4Groups] = {}
    for tensor in reader.tensors:
        match = _BLOCK_RE.match(tensor.name)
        if tensor.tensor_type != GGMLQuantizationType.Q4_1 or not match:
            continue
        layer, part, _ = match.groups()
        raw = np.asarray(tensor.data)
        if part in heads:
            raw = unpermute_rope_rows(raw, heads[part])
        out[f"{layer}.{_BLOCK_NAMES[part]}"] = int4_from_q4_1(raw)
    return out
