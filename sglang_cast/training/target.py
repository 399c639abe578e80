"""The frozen target model every stage drives, and the one place training builds an `Engine`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sglang_cast.cast import CostModel, PolicySettings, TreeShape
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
    def embedded(cls) -> Target:
        """The embedded SmolLM2-135M-Instruct in float32 on the CPU."""
        model, config, tokenizer = load_target(None, "cpu", torch.float32)
        return cls(model, tokenizer, config.eos_token_ids)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def feature_layers(self) -> tuple[int, int, int]:
        """The target layers whose residual streams an EAGLE-3 head reads."""
        return eagle3_feature_layers(self.config.num_layers)

    def engine(self, draft: Eagle3Draft | None, shape: TreeShape, max_batch: int, context: int) -> Engine:
        """A greedy EAGLE-2 tree engine over ``draft``, or plain decoding without one
        (sampling parameters come per request); with CUDA graphs on a GPU."""
        settings = PolicySettings.single(CostModel.linear(1.0, 0.0), shape=shape)
        policy = VanillaPolicy(settings) if draft is None else Eagle2Policy(settings)
        return LoadedModels(self.model, draft, self.tokenizer, self.eos_token_ids).engine(policy, max_batch, context)
