"""The native engine: KV caches, the speculative step, continuous batching."""

from .build import EngineArgs, build_engine
from .engine import Engine, StepLog, StepOutput
from .prompts import check_prompt
from .requests import GenerationResult, Request, RequestStats
from .runner import IterationRecord, feature_layers, feature_width

__all__ = ["Engine", "EngineArgs", "GenerationResult", "IterationRecord", "Request", "RequestStats", "StepLog", "StepOutput",
           "build_engine", "check_prompt", "feature_layers", "feature_width"]
