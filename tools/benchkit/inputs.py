"""Flags shared by the table and the figures: lists, the device and dtype, the profile."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from sglang_cast.engine.build import DTYPES
from sglang_cast.flags import Bounds, comma_list
from sglang_cast.profile import LoadedProfile, ProfileError, find_profile, load_profile
from sglang_cast.hardware import hardware_label


class BenchError(Exception):
    """Bad input or missing prerequisite: one line, exit 2."""


def parse_list(text: str, kind: type, name: str, low: float, high: float) -> tuple:
    """Comma-separated ``kind`` values in ``[low, high]``; `BenchError` naming ``name``."""
    try:
        return comma_list(text, Bounds(kind, low, high))
    except ValueError as err:
        raise BenchError(f"{name}: {err}") from None


@dataclass(frozen=True)
class DeviceSpec:
    """Where the native engine runs (``cpu``, ``cuda``, ``cuda:N``) and its residual dtype."""

    device: str
    dtype: str  # a key of engine/build.py's DTYPES

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def parse_device(device: str, dtype: str) -> DeviceSpec:
    """Validate ``--device`` and ``--dtype`` against this machine; `BenchError` otherwise."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise BenchError(f"--device: expected cpu, cuda or cuda:N, got {device!r}")
    if dtype not in DTYPES:
        raise BenchError(f"--dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise BenchError(f"--device: {device} requested but no CUDA device is available (accepted here: cpu)")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise BenchError(f"--device: {device} does not exist; this machine has CUDA devices "
                             f"0..{torch.cuda.device_count() - 1}")
    return DeviceSpec(device, dtype)


def load_settings(path: str | None, device: str = "cpu") -> LoadedProfile:
    """``--profile``, or the shipped profile of this hardware (``profiles/<label>.yaml``)."""
    label = hardware_label(device)
    chosen = Path(path) if path else find_profile(label)
    if chosen is None:
        raise BenchError(f"--profile: no profiles/{label}.yaml; run cast-autotune tune on this device "
                         "or pass a profile")
    try:
        return load_profile(chosen)
    except ProfileError as err:
        raise BenchError(f"--profile: {err}") from None
