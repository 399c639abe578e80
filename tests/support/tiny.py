"""The engine tests' tiny models: a one-layer random target over a 48-token
character vocabulary and a draft that mirrors it (``MirrorDraft``), so trees are
accepted deep and the engine's real code runs in milliseconds.  Used by the engine,
server, autotune, bench and model tests."""

from __future__ import annotations

import torch
from torch import nn

from sglang_cast.cast import CostModel, PolicySettings, TreeShape, make_policy
from sglang_cast.engine import Engine
from sglang_cast.models import LlamaModel, ModelConfig
from sglang_cast.models.attention import AttentionBatch
from sglang_cast.models.eagle import rows_at
from sglang_cast.models.llama import rope_cos_sin
from tools import tiny_models

VOCAB = 48


class CharTokenizer(tiny_models.CharTokenizer):
    """`tools.tiny_models.CharTokenizer` over this module's ``VOCAB``."""

    def __init__(self, vocab: int = VOCAB) -> None:
        super().__init__(vocab)


class MirrorDraft(nn.Module):
    """Test draft: the target's only layer, final norm and LM head, ignoring the
    features.  On a one-layer target it predicts nearly what the target predicts
    (it never sees the first prompt token), so trees are accepted deep and every
    compaction path of the engine runs."""

    def __init__(self, target: LlamaModel) -> None:
        super().__init__()
        self.target = [target]
        self.output_vocab_size = target.config.vocab_size

    def forward(self, input_ids, features, positions, cache, slots, tree_mask, last=None):
        target = self.target[0]
        batch = AttentionBatch.build(cache, slots, tree_mask)
        h = target.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(positions, target.config, h.dtype)
        h = target.layers[0](h, cos, sin, batch)
        return h, target.logits(target.norm(h if last is None else rows_at(h, last)))

    def feature_layers(self, num_target_layers):
        return ()

    def draft_to_target(self, ids):
        return ids

    target_offsets = None  # the ids are the target's (`child_reader_for`)


def tiny_target(vocab=VOCAB, seed=0, scale=0.3) -> LlamaModel:
    config = ModelConfig.from_hf({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": True,
    })
    model = LlamaModel(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.ones_like(param) if "norm" in name else scale * torch.randn(param.shape, generator=gen))
    return model.eval()


SETTINGS = PolicySettings.single(CostModel.linear(1.0, 4.0, draft_ratio=0.2), shape=TreeShape(4, 4, 12))


def engine(policy: str, target, max_batch=4, context=160) -> Engine:
    return Engine(target, CharTokenizer(), MirrorDraft(target), make_policy(policy, SETTINGS),
                  max_batch_size=max_batch, context_length=context)


PROMPTS = ["hello world", "speculative decoding", "a", "the cast of trees", "zz", "lossless?"]
