"""CAST profiles: the published YAML artifact a server loads and hot-reloads.

One schema for every producer (``cast-autotune``, the analytic estimates, hand
edits) and every consumer (native engine, SGLang worker).  ``load_profile``
validates everything and names the bad field, so a broken file is rejected with a
reason instead of half-applied.

```yaml
schema: 1
label: cpu                       # what `--cast-profile` auto-selection matches
device: AMD EPYC 7B13            # hardware the numbers describe
source: measured                 # measured | analytic
model: {target: ..., draft: ..., dtype: float32, weight_format: int4/int8}
provenance: {..., machine: {isa_class: amx, ...}}   # free-form but for machine.isa_class
costs: {target: <CostTable>, draft: <CostTable>, overhead: <OverheadTable>}   # overhead optional
buckets:                         # per batch-size bucket, ascending
  - {max_batch_size: 1, top_k: 10, max_depth: 6, num_verify_tokens: 60, c1: 1.0, c2: 1.0, c3: 1.0, fifo_len: 8}
```
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .cast import BucketSettings, CostModel, PolicySettings
from .cast.settings import check_mapping
from . import hardware
from .models.weights import WeightFormat, WeightFormatError

SCHEMA = 1
SOURCES = ("measured", "analytic")
# The share of a switched-off bucket's iterations the live gate may spend speculating to
# find out whether speculation pays again (server/calibration.py): the default and the cap.
EXPLORE_SHARE = 0.02
PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"

log = logging.getLogger(__name__)


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Profile:
    label: str
    device: str
    source: str
    settings: PolicySettings
    model: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    explore_share: float = EXPLORE_SHARE  # of a profile-off bucket's iterations, re-testing speculation live

    @property
    def weight_format(self) -> str | None:
        """The target format the cost tables were measured with (``model.weight_format``);
        None for a profile that does not record it (older profiles: they were measured in fp32)."""
        value = self.model.get("weight_format")
        return None if value is None else str(WeightFormat.parse(value))

    @property
    def isa_class(self) -> str | None:
        """The CPU ISA class it was measured on (``provenance.machine.isa_class``,
        `hardware.isa_class`); None if not recorded (GPU, analytic or older profiles)."""
        machine = self.provenance.get("machine")
        return machine.get("isa_class") if isinstance(machine, dict) else None

    @property
    def machine(self) -> hardware.MachineIdentity | None:
        """The machine it was measured on (``provenance.machine``); None if not recorded."""
        machine = self.provenance.get("machine")
        if not isinstance(machine, dict) or "device_type" not in machine:
            return None
        return hardware.MachineIdentity.from_dict(machine)

    def machine_difference(self, here: hardware.MachineIdentity) -> str | None:
        """One line on how ``here`` differs from the machine this profile was measured
        on, None when it does not (or the profile records no machine: analytic ones)."""
        recorded = self.machine
        if recorded is None or self.source != "measured":
            return None
        difference = recorded.difference(here)
        return None if difference is None else f"CAST profile {self.label!r}: {difference}"

    @property
    def draft_digest(self) -> str | None:
        """The weights digest (`models.digest.weights_digest`) of the head its traces and
        draft tables were recorded with: ``model.draft``'s ``#sha256:…`` suffix; None if
        not recorded (analytic or hand-written profiles)."""
        draft = self.model.get("draft")
        if not isinstance(draft, str) or "#sha256:" not in draft:
            return None
        return draft.rpartition("#")[2]

    def draft_difference(self, digest: str) -> str | None:
        """One line when ``digest``, the served head's, is not the head this profile was
        tuned with: its thresholds and draft tables assume the other head's acceptance
        and cost.  None when they match or the profile records no head."""
        recorded = self.draft_digest
        if recorded is None or recorded == digest:
            return None
        return (f"CAST profile {self.label!r} was tuned with draft head {recorded}, the head served is "
                f"{digest}: its trees assume the other head's acceptance; re-tune with `cast-autotune collect`, "
                f"`profile` and `tune` for this head")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "label": self.label,
            "device": self.device,
            "source": self.source,
            "model": self.model,
            "provenance": self.provenance,
            "costs": self.settings.costs.to_dict(),
            "buckets": [b.to_dict() for b in self.settings.buckets],
            "explore_share": self.explore_share,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Profile:
        try:
            check_mapping(data, {"schema", "label", "device", "source", "model", "provenance", "costs", "buckets",
                                 "explore_share"}, "profile")
        except ValueError as err:
            raise ProfileError(str(err)) from None
        if data.get("schema") != SCHEMA:
            raise ProfileError(f"profile.schema: expected {SCHEMA}, got {data.get('schema')!r}")
        for name in ("label", "device"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise ProfileError(f"profile.{name}: expected a non-empty string, got {data.get(name)!r}")
        if data.get("source") not in SOURCES:
            raise ProfileError(f"profile.source: expected one of {list(SOURCES)}, got {data.get('source')!r}")
        for name in ("model", "provenance"):
            if not isinstance(data.get(name, {}), dict):
                raise ProfileError(f"profile.{name}: expected a mapping")
        _check_weight_format(data.get("model", {}))
        _check_isa_class(data.get("provenance", {}))
        buckets = data.get("buckets")
        if not isinstance(buckets, list) or not buckets:
            raise ProfileError("profile.buckets: expected a non-empty list of batch-size buckets")
        try:
            costs = CostModel.from_dict(data.get("costs"), "profile.costs")
            parsed = tuple(BucketSettings.from_dict(b, f"profile.buckets[{i}]") for i, b in enumerate(buckets))
            settings = PolicySettings(buckets=parsed, costs=costs)
        except ValueError as err:
            raise ProfileError(str(err) if str(err).startswith("profile") else f"profile: {err}") from None
        share = data.get("explore_share", EXPLORE_SHARE)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= EXPLORE_SHARE:
            raise ProfileError(f"profile.explore_share: expected a number in [0, {EXPLORE_SHARE}], got {share!r}")
        return cls(label=data["label"], device=data["device"], source=data["source"], settings=settings,
                   model=dict(data.get("model", {})), provenance=dict(data.get("provenance", {})),
                   explore_share=float(share))


def _check_weight_format(model: dict[str, Any]) -> None:
    """``model.weight_format``, if present, is a concrete format (never ``auto``); the
    grammar and its error text are `WeightFormat.parse`'s."""
    if "weight_format" not in model:
        return
    value = model["weight_format"]
    if not isinstance(value, str) or value == "auto":
        raise ProfileError(f"profile.model.weight_format: expected the concrete format the tables were measured "
                           f"with, such as int4/int8, got {value!r}")
    try:
        WeightFormat.parse(value)
    except WeightFormatError as exc:
        raise ProfileError(f"profile.model.weight_format: {exc.reason}") from None


def _check_isa_class(provenance: dict[str, Any]) -> None:
    machine = provenance.get("machine")
    if not isinstance(machine, dict) or "isa_class" not in machine:
        return
    if machine["isa_class"] not in hardware.ISA_CLASSES:
        raise ProfileError(f"profile.provenance.machine.isa_class: expected one of {list(hardware.ISA_CLASSES)}, "
                           f"got {machine['isa_class']!r}")


@dataclass(frozen=True)
class LoadedProfile:
    """A validated profile plus the version of the file it came from."""

    profile: Profile
    path: Path
    version: str  # content hash: changes whenever the file's bytes change


def content_version(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:12]


def load_profile(path: str | Path) -> LoadedProfile:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ProfileError(f"profile file not found: {path}") from None
    except OSError as err:
        raise ProfileError(f"profile file {path} cannot be read: {err.strerror}") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ProfileError(f"profile file {path} is not valid YAML: {err}") from None
    profile = Profile.from_dict(data)
    if profile.settings.costs.overhead is None:
        log.warning("CAST profile %s has no host-overhead table (costs.overhead): its trees are charged for their "
                    "forwards only, which over-predicts speculation; re-run `cast-autotune profile` and `tune` to "
                    "measure it", path)
    return LoadedProfile(profile, path, content_version(raw))


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write atomically (temp file in the same folder, then rename): a watcher never
    sees a half-written profile."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(profile.to_dict(), sort_keys=False, width=120)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def find_profile(label: str, directory: Path = PROFILE_DIR, isa: str | None = None) -> Path | None:
    """The profile for hardware ``label``: for ``cpu``, ``cpu-<ISA class>.yaml`` first
    (``cpu-amx``, ``cpu-avx512``, ``cpu-avx2``: trees and formats tuned per class), then
    ``<label>.yaml``; None if neither exists.  ``isa`` defaults to this CPU's class."""
    names = [label]
    if label == "cpu":
        names.insert(0, f"cpu-{isa or hardware.isa_class()}")
    for name in names:
        candidate = directory / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None
