"""A tiny random training target (`sglang_cast.training.target.Target`: a 4-layer
Llama over a 96-token byte vocabulary with a toy chat template) and a random draft
head on it, for the training and calibration tests."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from sglang_cast.models import LlamaModel, ModelConfig
from sglang_cast.training import vocab as draft_vocab
from sglang_cast.training.config import EVAL_DATASETS, EvalConfig, PipelineConfig, TrainConfig
from sglang_cast.training.head import new_draft
from sglang_cast.training.target import Target

VOCAB = 96


class ByteTokenizer:
    """Stand-in for the HF tokenizer: characters mod ``VOCAB``, a tiny chat template."""

    eos = 2

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        assert not tokenize and add_generation_prompt
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def encode(self, text, add_special_tokens=False):
        return [3 + ord(c) % (VOCAB - 3) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(32 + i % 90) for i in ids)


def tiny_target(seed: int = 0, layers: int = 4) -> LlamaModel:
    config = ModelConfig.from_hf({
        "architectures": ["LlamaForCausalLM"], "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 1024, "tie_word_embeddings": True, "eos_token_id": 2,
    })
    model = LlamaModel(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(torch.ones_like(param) if "norm" in name else 0.3 * torch.randn(param.shape, generator=gen))
    return model.eval().requires_grad_(False)


def tiny(seed: int = 0) -> Target:
    return Target(tiny_target(seed), ByteTokenizer(), (ByteTokenizer.eos,))


def random_head(target: Target, vocab: int = 40, seed: int = 1):
    counts = torch.randint(0, 50, (VOCAB,), generator=torch.Generator().manual_seed(seed))
    d2t, t2d = draft_vocab.select_draft_vocab(counts, vocab)
    draft = new_draft(target, d2t, t2d)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in draft.named_parameters():
            param.copy_(1 + 0.1 * torch.randn(param.shape, generator=gen) if "norm" in name
                        else 0.3 * torch.randn(param.shape, generator=gen))
    return draft.eval()


def tiny_config(tmp_path: Path) -> PipelineConfig:
    """A quick pipeline on three questions per benchmark, its folders under ``tmp_path``."""
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in EVAL_DATASETS:
        rows = [{"turns": [f"{name} question number {i}: what is {i} plus {i}?"]} for i in range(3)]
        (bench / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    quick = PipelineConfig.quick()
    return PipelineConfig(
        work_dir=tmp_path / "work", output_dir=tmp_path / "head", benchmark_dir=bench, seed=0, threads=1,
        data=dataclasses.replace(quick.data, max_answers=5),
        train=TrainConfig(**{**quick.train.__dict__, "draft_vocab": 32}),
        eval=EvalConfig(prompts=2, max_new_tokens=6))
