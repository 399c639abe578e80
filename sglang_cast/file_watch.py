"""Polling a file for changes from a daemon thread.

Both profile reloaders (the server's and the SGLang worker's) need the same thing:
notice that a file was replaced, cheaply and without extra dependencies.  A
(mtime, size) fingerprint read every ``poll_seconds`` is enough for files that are
replaced atomically (``save_profile`` renames a finished temp file over them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

Fingerprint = tuple[int, int] | None


def fingerprint(path: Path | None) -> Fingerprint:
    """``(mtime_ns, size)`` of ``path``, or None when there is no readable file."""
    try:
        stat = path.stat() if path is not None else None
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size) if stat is not None else None


class FileWatcher:
    """Calls ``on_change()`` from a daemon thread whenever ``path()`` differs from the
    version last marked seen.  The callback marks the version it loads with
    ``mark_seen`` (before reading, so a write during the read is noticed again)."""

    def __init__(self, path: Callable[[], Path | None], on_change: Callable[[], object], poll_seconds: float,
                 name: str = "cast-profile-watcher") -> None:
        self._path = path
        self._on_change = on_change
        self.poll_seconds = poll_seconds
        self._name = name
        self._seen = fingerprint(path())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def mark_seen(self) -> None:
        self._seen = fingerprint(self._path())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            if fingerprint(self._path()) != self._seen:
                self._on_change()
