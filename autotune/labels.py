"""Profile labels and the hardware they name.

A profile's label is what a server matches to pick ``profiles/<label>.yaml``; a
cost table measured on one device and published under another device's label
would silently mis-size every tree there.  So ``profile`` refuses a label that
does not match the detected hardware unless ``--force-label`` is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sglang_cast.hardware import GPU_LABELS

from .errors import AutotuneError


@dataclass(frozen=True)
class DeviceLabel:
    device_type: str  # "cpu" or "cuda"
    name_pattern: str  # regex matched against ``hardware.device_name``; "" matches any name

    def matches(self, device_type: str, name: str) -> bool:
        return device_type == self.device_type and re.search(self.name_pattern, name, re.IGNORECASE) is not None


KNOWN_LABELS: dict[str, DeviceLabel] = {
    "cpu": DeviceLabel("cpu", ""),
    **{label: DeviceLabel("cuda", pattern) for label, pattern in GPU_LABELS.items()},
}

LABEL_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def check_label_syntax(label: str) -> str:
    """Labels become file names (``profiles/<label>.yaml``)."""
    if not LABEL_PATTERN.match(label):
        raise AutotuneError(f"--gpu/--label: expected 1-64 characters of [a-z0-9_.-] starting with a letter or "
                            f"digit, got {label!r}")
    return label


def check_label(label: str, device_type: str, name: str, force: bool) -> None:
    """Raise unless ``label`` names the detected device (or ``force``)."""
    check_label_syntax(label)
    if force:
        return
    known = KNOWN_LABELS.get(label)
    if known is None:
        raise AutotuneError(f"--gpu/--label: unknown label {label!r} (known: {', '.join(sorted(KNOWN_LABELS))}); "
                            "pass --force-label to use it anyway")
    if not known.matches(device_type, name):
        raise AutotuneError(f"--gpu/--label: label {label!r} does not match this device ({device_type}: {name!r}); "
                            "measure on matching hardware or pass --force-label")
