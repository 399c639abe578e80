"""The frozen target model every stage drives, the one place training builds an `Engine`,
the chat-template encoding every stage feeds it, and sampled generation through it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from sglang_cast.cast import CostModel, PolicySettings, SamplingParams, TreeShape
from sglang_cast.cast.policies import Eagle2Policy, VanillaPolicy
from sglang_cast.engine import Engine
from sglang_cast.engine.build import LoadedModels
from sglang_cast.models import Eagle3Draft, LlamaModel, ModelConfig, eagle3_feature_layers, load_target


@dataclass
class Target:
    """The frozen target model and what every stage needs to drive it."""

    model: LlamaModel
    tokenizer: Any
    eos_token_ids: tuple[int, ...]

    @classmethod
    def embedded(cls, weight_format: str = "fp32") -> Target:
        """The embedded SmolLM2-135M-Instruct on the CPU, its residual stream in float32 and
        its linears stored in ``weight_format`` (models/weights.py)."""
        model, config, tokenizer = load_target(None, "cpu", torch.float32, weight_format)
        return cls(model, tokenizer, config.eos_token_ids)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def feature_layers(self) -> tuple[int, int, int]:
        """The target layers whose residual streams an EAGLE-3 head reads."""
        return eagle3_feature_layers(self.config.num_layers)

    def engine(self, draft: Eagle3Draft | None, shape: TreeShape, max_batch: int, context: int,
               lookup_depth: int = 0) -> Engine:
        """A greedy EAGLE-2 tree engine over ``draft`` (with a ``lookup_depth``-token
        prompt-lookup branch), or plain decoding without one (sampling parameters come
        per request); with CUDA graphs on a GPU."""
        settings = PolicySettings.single(CostModel.linear(1.0, 0.0), shape=shape).with_lookup(lookup_depth)
        policy = VanillaPolicy(settings) if draft is None else Eagle2Policy(settings)
        return LoadedModels(self.model, draft, self.tokenizer, self.eos_token_ids).engine(policy, max_batch, context)


def chat_ids(tokenizer: Any, prompt: str) -> list[int]:
    """Token ids of ``prompt`` as one user turn in the target's chat template, ready for
    the assistant's answer (the same encoding the evaluation and the server use)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass(frozen=True)
class Generation:
    prompt_ids: list[int]
    output_ids: list[int]  # ends with EOS when the target stopped by itself
    truncated: bool  # stopped by the token limit


def generate(engine: Engine, prompts: Sequence[list[int]], params: Sequence[SamplingParams],
             desc: str) -> list[Generation]:
    """Continuous-batched generation with a token-level progress bar, in prompt order."""
    requests = [engine.add_request(ids, p) for ids, p in zip(prompts, params)]
    with tqdm(total=sum(p.max_new_tokens for p in params), desc=desc, unit="tok", leave=False) as bar:
        done = 0
        while engine.has_work:
            engine.step()
            now = sum(len(r.output_ids) if not r.finished else r.params.max_new_tokens for r in requests)
            bar.update(now - done)
            done = now
    return [Generation(r.prompt_ids, list(r.output_ids), r.finish_reason == "length") for r in requests]
