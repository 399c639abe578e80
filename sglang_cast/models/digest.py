"""A draft checkpoint's content digest: what names one head's weights.

Autotune keys traces and draft tables by it, a published profile records it
(``model.draft``), and the server compares the two at start-up: a head retrained in
place keeps its path, so only the digest tells its measurements from the old one's."""

from __future__ import annotations

import hashlib
from pathlib import Path


def weights_digest(path: Path) -> str:
    """``sha256:`` and the first 12 hex digits over every file under ``path`` (by name,
    sorted), or over ``path`` itself when it is a file."""
    files = sorted(p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return f"sha256:{digest.hexdigest()[:12]}"
