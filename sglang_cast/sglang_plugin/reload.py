"""Profile hot-reload inside SGLang's scheduler process.

A daemon thread polls the profile file's (mtime, size); when it changes, the new
version is validated completely (schema, and that it fits SGLang's startup tree
shape) and handed to ``policy.reconfigure``, which the policy applies at its next
``begin`` and never mid-iteration.  A rejected file leaves the previous profile
active and is logged with its reason.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..cast import Policy
from ..file_watch import FileWatcher
from ..profile import LoadedProfile, ProfileError
from .plugin_config import StaticShape, load_fitting_profile

log = logging.getLogger(__name__)


class ProfileWatcher:
    def __init__(self, loaded: LoadedProfile, policy: Policy, shape: StaticShape, poll_seconds: float = 1.0) -> None:
        self.loaded = loaded
        self.policy = policy
        self.shape = shape
        self.last_error: str | None = None
        self._watcher = FileWatcher(lambda: self.path, self.check_now, poll_seconds)

    @property
    def path(self) -> Path:
        return self.loaded.path

    def check_now(self) -> bool:
        """Load the file if it changed; True when a new version became active."""
        self._watcher.mark_seen()
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
        self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()
