"""The native engine: KV caches, the speculative step, continuous batching."""

from .build import EngineArgs, build_engine
from .engine import Engine, IterationRecord
from .requests import GenerationResult, Request, RequestStats

__all__ = ["Engine", "EngineArgs", "GenerationResult", "IterationRecord", "Request", "RequestStats", "build_engine"]
