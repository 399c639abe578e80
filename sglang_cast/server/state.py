"""The objects one app serves with, reachable from every handler."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastapi import Request

from ..engine import Engine
from .config import ServerConfig
from .engine_worker import EngineWorker
from .errors import ApiError
from .metrics import ServerMetrics
from .openai_protocol import DEFAULT_MODEL_NAME
from .profile_reload import ProfileReloader
from .prompt_encoder import PromptEncoder


@dataclass
class ServerState:
    engine: Engine  # owned by the worker's thread: handlers read only immutable facts from it
    config: ServerConfig
    worker: EngineWorker
    metrics: ServerMetrics
    profiles: ProfileReloader
    encoder: PromptEncoder
    created: int = field(default_factory=lambda: int(time.time()))

    def check_model(self, name: str) -> None:
        """``"default"`` (also what an omitted ``model`` means) and the served name
        serve the loaded model, as SGLang does; any other name is a 404 naming it,
        as OpenAI answers (a typo is not silently served by another model)."""
        if name not in (DEFAULT_MODEL_NAME, self.config.served_model_name):
            raise ApiError(404, f"The model `{name}` does not exist; this server serves "
                                f"`{self.config.served_model_name}`.", param="model", code="model_not_found")

    def room_after(self, prompt_ids: list[int], prompt_field: str) -> int:
        """What an omitted ``max_tokens`` means (OpenAI's chat: the rest of the context):
        the context length left after the tokenized prompt; a 400 naming ``prompt_field``
        when the prompt leaves none."""
        context = self.engine.context_length
        if len(prompt_ids) >= context:
            raise ApiError(400, f"prompt ({len(prompt_ids)} tokens) leaves no room to generate within the "
                                f"context length {context}", param=prompt_field)
        return context - len(prompt_ids)


def server_state(request: Request) -> ServerState:
    return request.app.state.server
