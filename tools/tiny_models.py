"""A tiny random target and EAGLE head with a character tokenizer: where weights do not
matter (host work, device paths, graph capture), the engine's real code runs on models
whose forwards cost next to nothing.  Used by `tools/host_work.py` and the tests."""

from __future__ import annotations

import torch

from sglang_cast.models import DraftConfig, EagleDraft, LlamaModel, ModelConfig

VOCAB = 64


class CharTokenizer:
    """Characters to ids modulo ``vocab``; ids back to letters (lossy, for printing)."""

    def __init__(self, vocab: int = VOCAB) -> None:
        self.vocab = vocab

    def encode(self, text: str) -> list[int]:
        return [ord(c) % self.vocab for c in text]

    def decode(self, ids) -> str:
        return "".join(chr(ord("a") + i % 26) for i in ids)


def random_pair(device: str, dtype: torch.dtype) -> tuple[LlamaModel, EagleDraft]:
    """A two-layer target (width 32, ``VOCAB`` tokens) and an EAGLE head, random but
    fixed (seeded on the CPU)."""
    config = ModelConfig.from_hf({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": True,
    })
    target = LlamaModel(config)
    layer = ModelConfig.from_hf({**config.to_hf(), "num_hidden_layers": 1})
    draft = EagleDraft(DraftConfig("eagle", layer, True, layer.vocab_size), target)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in (target, draft):
            for name, param in module.named_parameters():
                param.copy_(torch.ones_like(param) if "norm" in name else 0.3 * torch.randn(param.shape, generator=gen))
    return target.to(device, dtype).eval(), draft.to(device, dtype).eval()
