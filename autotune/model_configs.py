"""A model's ``config.json`` read for planning without loading it: ``preflight``'s
memory plan, the SGLang backend's checks and runtime-state sizing."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_cast.sglang_plugin.memory_plan import ModelShape

from .errors import AutotuneError


def read_config_json(path: Path, flag: str) -> dict:
    """A config.json, or the one in directory ``path``."""
    file = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise AutotuneError(f"{flag}: cannot read a JSON model config from {file} ({err})") from None
    if not isinstance(config, dict):
        raise AutotuneError(f"{flag}: {file} is not a JSON object")
    return config


def read_model_config(path: Path, flag: str) -> ModelShape:
    try:
        return ModelShape.from_config(read_config_json(path, flag), f"{flag} {path}")
    except (ValueError, TypeError) as err:
        raise AutotuneError(str(err)) from None
