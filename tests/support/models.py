"""Tiny models for the model tests: a transformers model and ours holding the same
weights (`make_pair`, large random weights, so a mistake shows in the logits), random
EAGLE / EAGLE-3 heads on them and their inputs, the cache commit a prefix needs, and
a random head for the real embedded model (`random_head`), raw GGUF Q4_1 blocks
(`random_q4_1`)."""

from __future__ import annotations

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from sglang_cast.models import (DraftConfig, Eagle3Draft, EagleDraft, KVCache, LlamaModel, ModelConfig,
                                causal_tree_mask, hf_to_internal)
from sglang_cast.models.loader import build_model
from sglang_cast.models.weights import GROUP_SIZE

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
TINY = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
)


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Large random weights (and biases) so that any mistake shows up in the logits."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1 + 0.2 * noise if "norm" in name else 0.15 * noise)


def make_pair(arch: str, seed: int = 0) -> tuple[torch.nn.Module, LlamaModel]:
    """A tiny transformers model and our model holding the same weights."""
    if arch == "llama":
        hf = LlamaForCausalLM(LlamaConfig(**TINY, rope_theta=500.0, tie_word_embeddings=True))
    else:
        hf = Qwen2ForCausalLM(Qwen2Config(**TINY, rope_theta=2000.0, use_sliding_window=False))
    randomize(hf, seed)
    hf = hf.to(DEVICE).eval()
    config = ModelConfig.from_hf(hf.config.to_dict())
    state = {key: value.clone() for key, value in hf.state_dict().items()}
    return hf, build_model(config, hf_to_internal(state, config), DEVICE, torch.float32)


def commit_all(cache: KVCache, slots: torch.Tensor, n: int) -> None:
    b = slots.shape[0]
    keep = torch.arange(n, device=DEVICE).expand(b, n)
    cache.commit(slots, keep, torch.full((b,), n, device=DEVICE))


def random_draft(kind: str, target: LlamaModel, seed: int = 7) -> EagleDraft | Eagle3Draft:
    layer = ModelConfig.from_hf({**target.config.to_hf(), "num_hidden_layers": 1})
    if kind == "eagle":
        draft = EagleDraft(DraftConfig("eagle", layer, True, layer.vocab_size), target)
    else:
        draft = Eagle3Draft(DraftConfig("eagle3", layer, False, draft_vocab_size=40), target)
        gen = torch.Generator().manual_seed(seed)
        hot = torch.randperm(layer.vocab_size, generator=gen)[:40].sort().values
        draft.d2t.copy_(hot - torch.arange(40))
        draft.t2d.zero_()[hot] = True
    randomize(draft, seed)
    return draft.to(DEVICE).eval()


def draft_inputs(draft, target: LlamaModel, n: int = 5, seed: int = 8):
    gen = torch.Generator().manual_seed(seed)
    width = target.config.hidden_size * (3 if isinstance(draft, Eagle3Draft) else 1)
    ids = torch.randint(0, target.config.vocab_size, (2, n), generator=gen).to(DEVICE)
    features = torch.randn(2, n, width, generator=gen).to(DEVICE)
    return ids, features, torch.arange(n, device=DEVICE).expand(2, n)


def draft_cache(draft) -> KVCache:
    return KVCache.for_model(draft.config.layer, 2, 16, DEVICE, torch.float32, num_layers=1)


def draft_run(draft, ids, features, positions, cache=None):
    cache = cache or draft_cache(draft)
    slots = torch.arange(2, device=DEVICE)
    with torch.no_grad():
        mask = causal_tree_mask(2, ids.shape[1], DEVICE)
        return draft(ids, features, positions, cache, slots, mask)


def random_head(target: LlamaModel, config: ModelConfig) -> EagleDraft:
    """An EAGLE head of ``target``'s layer shape, every parameter N(0, 0.05) from the
    global generator seeded 0 (what the real-model tests check losslessness with)."""
    torch.manual_seed(0)
    layer = ModelConfig.from_hf({**config.to_hf(), "num_hidden_layers": 1})
    head = EagleDraft(DraftConfig("eagle", layer, True, layer.vocab_size), target)
    with torch.no_grad():
        for param in head.parameters():
            param.normal_(0.0, 0.05)
    return head.eval()


def random_q4_1(rows: int, cols: int, seed: int) -> np.ndarray:
    """Raw GGUF Q4_1 bytes ``[rows, cols/32 · 20]``: random fp16 d, m and nibbles."""
    rng = np.random.default_rng(seed)
    blocks = cols // GROUP_SIZE
    d = rng.uniform(0.001, 0.05, (rows, blocks, 1)).astype(np.float16)
    m = rng.uniform(-0.4, 0.0, (rows, blocks, 1)).astype(np.float16)
    nibbles = rng.integers(0, 256, (rows, blocks, 16), dtype=np.uint8)
    raw = np.concatenate((d.view(np.uint8), m.view(np.uint8), nibbles), axis=-1)
    return raw.reshape(rows, blocks * 20)
