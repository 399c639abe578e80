"""Profile hot-reload inside SGLang's scheduler process.

A daemon thread polls the profile file's (mtime, size); when it changes, the new
version is validated completely (schema, and that it fits SGLang's startup tree
shape) and handed to ``policy.reconfigure``, which the policy applies at its next
``begin`` and never mid-iteration.  A rejected file leaves the previous profile
active and is logged with its reason.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..cast import Policy
from ..profile import LoadedProfile, ProfileError
from .plugin_config import StaticShape, load_fitting_profile

log = logging.getLogger(__name__)


class ProfileWatcher:
    def __init__(self, loaded: LoadedProfile, policy: Policy, shape: StaticShape, poll_seconds: float = 1.0) -> None:
        self.loaded = loaded
        self.policy = policy
        self.shape = shape
        self.poll_seconds = poll_seconds
        self.last_error: str | None = None
        self._seen = self._fingerprint()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> Path:
        return self.loaded.path

    def check_now(self) -> bool:
        """Load the file if it changed; True when a new version became active."""
        self._seen = self._fingerprint()
        try:
            loaded = load_fitting_profile(self.path, self.shape)
        except ProfileError as err:
            self.last_error = str(err)
            log.warning("CAST profile reload rejected, the previous profile stays active: %s", err)
            return False
        self.last_error = None
        if loaded.version == self.loaded.version:
            return False
        self.policy.reconfigure(loaded.profile.settings)
        self.loaded = loaded
        log.info("CAST profile %s version %s is now active", loaded.path, loaded.version)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="cast-profile-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _fingerprint(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            if self._fingerprint() != self._seen:
                self.check_now()
