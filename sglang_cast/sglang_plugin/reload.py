"""Profile hot-reload inside SGLang's scheduler process.

A daemon thread polls the profile file's (mtime, size); when it changes, the new
version is validated completely (schema, and that it fits SGLang's startup tree
shape) and handed to ``policy.reconfigure``, which the policy applies at its next
``begin`` and never mid-iteration.  A rejected file leaves the previous profile
active and is logged with its reason.

SGLang's runtime states are built once, at startup, for the startup profile's
depths and widths (``decider.CastDecider``).  A reloaded profile that exceeds the
static shape is refused (above); one whose depths or widths have no state of
their own is clamped up to the next built state, and that is logged once, when
the version becomes active (the ``clamps`` callback describes it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ..cast import Policy, PolicySettings
from ..file_watch import FileWatcher
from ..profile import LoadedProfile, ProfileError
from .plugin_config import StaticShape, load_fitting_profile

log = logging.getLogger(__name__)


class ProfileWatcher:
    def __init__(self, loaded: LoadedProfile, policy: Policy, shape: StaticShape, poll_seconds: float = 1.0,
                 clamps: Callable[[PolicySettings], list[str]] | None = None) -> None:
        self.loaded = loaded
        self.policy = policy
        self.shape = shape
        self.clamps = clamps
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
        notes = self.clamps(loaded.profile.settings) if self.clamps else []
        if notes:
            log.warning("CAST profile version %s asks for shapes SGLang has no runtime state for (states are built at "
                        "startup); clamped up: %s", loaded.version, "; ".join(notes))
        return True

    def start(self) -> None:
        self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()
