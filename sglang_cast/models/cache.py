"""Where the project keeps what it builds or converts once per machine: converted models
(``models/``), inductor's caches (``inductor/``), compiled kernels (``extensions/``)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SGLANG_CAST_CACHE"


def cache_root() -> Path:
    """``$SGLANG_CAST_CACHE`` or ``~/.cache/sglang_cast``."""
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/sglang_cast").expanduser()
