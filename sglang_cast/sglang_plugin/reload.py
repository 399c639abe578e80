"""Profile hot-reload inside SGLang's scheduler process.

A daemon thread polls the profile file's (mtime, size); when it changes, the new
version is validated completely (schema, and that it fits SGLang's startup tree
shape) and handed to ``policy.reconfigure``, which the policy applies at its next
``begin`` and never mid-iteration.  A rejected file leaves the previous profile
active and is logged with its reason.

With tensor parallelism only rank 0 watches: it hands each validated version's
bytes to ``publish`` (``rank_sync.ProfileBroadcast.offer``), and every rank,
rank 0 included, applies them with :meth:`ProfileWatcher.apply_bytes` at the same
iteration.

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

import yaml

from ..cast import Policy, PolicySettings
from ..file_watch import FileWatcher
from ..profile import LoadedProfile, Profile, ProfileError, content_version
from .plugin_config import ParallelLayout, StaticShape, load_fitting_profile, require_fits

log = logging.getLogger(__name__)


class ProfileWatcher:
    def __init__(self, loaded: LoadedProfile, policy: Policy, shape: StaticShape, poll_seconds: float = 1.0,
                 clamps: Callable[[PolicySettings], list[str]] | None = None,
                 publish: Callable[[bytes], None] | None = None, layout: ParallelLayout | None = None) -> None:
        """``publish``: where a new validated version's bytes go instead of being
        applied here (TP rank 0 hands them to the broadcast that applies them on
        every rank at once)."""
        self.loaded = loaded
        self.policy = policy
        self.shape = shape
        self.clamps = clamps
        self.publish = publish
        self.layout = layout  # a reload made for another parallel layout is refused
        self.last_error: str | None = None
        self._watcher = FileWatcher(lambda: self.path, self.check_now, poll_seconds)

    @property
    def path(self) -> Path:
        return self.loaded.path

    def check_now(self) -> bool:
        """Load the file if it changed; True when a new version became active."""
        self._watcher.mark_seen()
        try:
            raw = self.path.read_bytes()
            loaded = load_fitting_profile(self.path, self.shape, self.layout)
        except (OSError, ProfileError) as err:
            self.last_error = str(err)
            log.warning("CAST profile reload rejected, the previous profile stays active: %s", err)
            return False
        self.last_error = None
        if loaded.version == self.loaded.version or loaded.version != content_version(raw):
            return False  # unchanged, or rewritten between the two reads: the next poll sees it
        if self.publish is not None:
            self.loaded = loaded
            self.publish(raw)
            return True
        self._activate(loaded)
        return True

    def apply_bytes(self, raw: bytes) -> None:
        """Apply a version rank 0 validated and broadcast (every rank, same iteration)."""
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ProfileError(f"broadcast profile is not valid YAML: {err}") from None
        profile = Profile.from_dict(data)
        require_fits(profile, self.shape, self.layout, self.path)
        self._activate(LoadedProfile(profile, self.path, content_version(raw)))

    def _activate(self, loaded: LoadedProfile) -> None:
        self.policy.reconfigure(loaded.profile.settings)
        self.loaded = loaded
        log.info("CAST profile %s version %s is now active", loaded.path, loaded.version)
        notes = self.clamps(loaded.profile.settings) if self.clamps else []
        if notes:
            log.warning("CAST profile version %s does not run everywhere as written (runtime states are built at "
                        "startup): %s", loaded.version, "; ".join(notes))

    def start(self) -> None:
        self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()
