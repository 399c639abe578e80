"""``--cast-calibrate``: whether the served profile's tables are fitted to this machine,
at start-up and on every hot-reload (`engine/table_calibration.py` does the timing and
the fit).  ``auto`` calibrates a profile measured on another machine (its recorded
identity differs from this one's, `hardware.MachineIdentity`), ``on`` every profile,
``off`` none.  The anchors are timed once, at start-up; a reloaded profile is fitted to
them again without stopping the engine for new timings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from ..cast import PolicySettings
from ..engine.table_calibration import AnchorTimings, calibrate
from ..hardware import MachineIdentity
from ..profile import Profile

log = logging.getLogger(__name__)
MODES = ("auto", "on", "off")


def wanted(mode: str, profile: Profile, here: MachineIdentity) -> bool:
    """Whether ``profile`` is calibrated under ``mode`` on the machine ``here``."""
    if mode not in MODES:
        raise ValueError(f"--cast-calibrate must be one of {MODES}, got {mode!r}")
    return mode == "on" or (mode == "auto" and profile.machine_difference(here) is not None)


@dataclass(frozen=True)
class ServedCalibration:
    """The anchors timed at start-up and the report of the fit now served."""

    mode: str
    here: MachineIdentity
    timings: AnchorTimings | None  # None: nothing was timed (mode off, or no profile needed it)
    report: dict[str, Any] | None  # what /server_info shows: the fit serving now, None when uncalibrated

    def settings_for(self, profile: Profile, settings: PolicySettings) -> tuple[PolicySettings, ServedCalibration]:
        """``settings`` (from ``profile``) fitted to the anchors when ``profile`` wants it,
        and the calibration that then serves."""
        if self.timings is None or not wanted(self.mode, profile, self.here):
            return settings, replace(self, report=None)
        fit = self.timings.fit(settings.costs)
        report = {"seconds": round(self.timings.seconds, 2), **fit.to_dict(settings.costs)}
        return replace(settings, costs=fit.apply(settings.costs)), replace(self, report=report)


def calibrate_at_startup(mode: str, profile: Profile | None, engine, graph_backend: str | None) -> ServedCalibration:
    """Time the anchors when the served profile wants calibration and serve the fitted
    tables (``engine``'s policy reconfigured); the result is kept for reloads."""
    here = MachineIdentity.current(engine.target.embed_tokens.weight.device.type)
    if profile is None or not wanted(mode, profile, here):
        return ServedCalibration(mode, here, None, None)
    settings = engine.policy.settings
    served = calibrate(engine.target, engine.draft, settings.costs, engine.max_batch_size, graph_backend)
    calibration = ServedCalibration(mode, here, served.timings, served.report(settings.costs))
    engine.policy.reconfigure(replace(settings, costs=served.costs))
    return calibration
