"""Profile hot-reload: watch the ``--cast-profile`` file and swap valid versions in.

A watcher thread polls the file's (mtime, size) every ``poll_seconds``;
``POST /cast/reload`` forces a check.  A new version is validated completely
(``load_profile``, the command-line shape override, the engine's KV room) before
the engine thread swaps it in between two iterations, so requests in flight never
see a half-applied profile.  A rejected file leaves the old profile active; the
reason is kept for ``GET /cast/profile``, logged, and counted.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ..cast import PolicySettings
from ..file_watch import FileWatcher
from ..profile import LoadedProfile, ProfileError, load_profile
from .config import ShapeOverride
from .metrics import ServerMetrics
from .startup_calibration import ServedCalibration

log = logging.getLogger(__name__)
APPLY_TIMEOUT_SECONDS = 120.0  # one iteration of a large model under load, with margin


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class ProfileReloader:
    def __init__(self, loaded: LoadedProfile | None, shape: ShapeOverride, reserved_room: int,
                 apply: Callable[[PolicySettings], Future], metrics: ServerMetrics, poll_seconds: float,
                 weight_format: str | None = None, calibration: ServedCalibration | None = None) -> None:
        """``apply`` hands settings to the engine thread; ``reserved_room`` is the
        engine's ``tree_room`` (a profile needing more would overflow its KV cache);
        ``weight_format`` the format the target was loaded in (weights are not
        re-packed on a reload, and another format's cost tables describe another curve);
        ``calibration`` fits a reloaded profile's tables to this machine as start-up did."""
        self.shape = shape
        self.reserved_room = reserved_room
        self.weight_format = weight_format
        self._apply = apply
        self.metrics = metrics
        self._loaded = loaded
        self._loaded_at = _now() if loaded is not None else None
        self._calibration = calibration
        self._error: str | None = None
        self._status = self._snapshot()
        self._lock = threading.Lock()
        self._watcher = FileWatcher(lambda: self.path, self._reload_quietly, poll_seconds)
        self._publish_info()

    @property
    def path(self) -> Path | None:
        return self._loaded.path if self._loaded is not None else None

    def status(self) -> dict[str, Any]:
        """What ``GET /cast/profile`` shows.  A snapshot replaced whole after every
        change, so the event loop never waits on a reload in progress."""
        return dict(self._status)

    def _snapshot(self) -> dict[str, Any]:
        loaded = self._loaded
        profile = loaded.profile if loaded is not None else None
        return {
            "path": str(loaded.path) if loaded is not None else None,
            "version": loaded.version if loaded is not None else None,
            "label": profile.label if profile is not None else None,
            "source": profile.source if profile is not None else None,
            "loaded_at": self._loaded_at,
            "last_reload_error": self._error,
            "calibration": self._calibration.report if self._calibration is not None else None,
        }

    def reload(self) -> bool:
        """Load the file now; True if a new version was swapped in, False if the file is
        unchanged.  Raises `ProfileError` (with the reason) if the file is rejected."""
        with self._lock:
            if self.path is None:
                raise ProfileError("no profile file to reload: the server was started without one "
                                   "(pass --cast-profile PATH)")
            self._watcher.mark_seen()
            try:
                loaded = load_profile(self.path)
                if loaded.version == self._loaded.version:
                    self._error = None
                    self._status = self._snapshot()
                    return False
                settings, calibration = self._settings_for(loaded)
                self._apply(settings).result(timeout=APPLY_TIMEOUT_SECONDS)
            except ProfileError as err:
                self._reject(str(err))
                raise
            except Exception as err:  # the engine thread could not apply it (stopped, timed out)
                reason = f"profile could not be applied: {err!r}"
                self._reject(reason)
                raise ProfileError(reason) from None
            self._loaded, self._loaded_at, self._error = loaded, _now(), None
            self._calibration = calibration
            self._status = self._snapshot()
            self.metrics.profile_reloads.inc()
            self._publish_info()
            log.info("profile %s version %s is now active", loaded.path, loaded.version)
            return True

    def start(self) -> None:
        if self.path is not None:
            self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()

    def _settings_for(self, loaded: LoadedProfile) -> tuple[PolicySettings, ServedCalibration | None]:
        tuned_for = loaded.profile.weight_format
        if None not in (tuned_for, self.weight_format) and tuned_for != self.weight_format:
            raise ProfileError(f"profile was tuned for weight format {tuned_for} but the target runs "
                               f"{self.weight_format}; restart the server to switch formats")
        try:
            settings = self.shape.apply(loaded.profile.settings)
        except ValueError as err:
            raise ProfileError(f"profile does not combine with the command-line tree shape: {err}") from None
        needed = settings.kv_room  # the bound Engine.__init__ reserved its caches for
        if needed > self.reserved_room:
            raise ProfileError(f"profile trees need {needed} KV positions beyond the context but the engine "
                               f"reserved {self.reserved_room} at startup; restart the server to use larger trees")
        if self._calibration is None:
            return settings, None
        return self._calibration.settings_for(loaded.profile, settings)

    def _reject(self, reason: str) -> None:
        self._error = reason
        self._status = self._snapshot()
        self.metrics.profile_reload_failures.inc()
        log.warning("profile reload rejected, the previous profile stays active: %s", reason)

    def _reload_quietly(self) -> None:
        try:
            self.reload()
        except ProfileError:
            pass  # already recorded, logged and counted

    def _publish_info(self) -> None:
        status = self.status()
        self.metrics.profile.info({k: "" if status[k] is None else str(status[k])
                                   for k in ("path", "version", "label", "source")})
