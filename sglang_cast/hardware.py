"""What hardware we run on: the label profiles are measured for and matched by.

Torch is imported only where a device is looked at, so the launcher's argument
parsing can name the profile label without loading it."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _cpuinfo_fields(*names: str) -> dict[str, str]:
    """The first CPU's ``names`` fields in /proc/cpuinfo (those present; none when the
    file does not exist)."""
    cpuinfo = Path("/proc/cpuinfo")
    found: dict[str, str] = {}
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in names and key not in found:
                found[key] = value.strip()
            if not line.strip() and found:  # the end of the first CPU's block
                break
    return found


def cpu_name() -> str:
    """The CPU model as the kernel reports it (``model name`` in /proc/cpuinfo)."""
    return _cpuinfo_fields("model name").get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The ISA feature flags of the first CPU (``flags`` in /proc/cpuinfo); empty if unknown."""
    return frozenset(_cpuinfo_fields("flags").get("flags", "").split())


ISA_CLASSES = ("amx", "avx512", "avx2", "other")


def isa_class(flags: frozenset[str] | None = None) -> str:
    """The CPU's matrix/vector class, fastest first: ``amx`` (AMX-BF16 tiles), ``avx512``,
    ``avx2`` or ``other``.

    It names what the ISA *offers*; which kernel is fastest on it is measured, never
    inferred from this (profiles record it so a mismatch can be warned about).
    """
    flags = cpu_flags() if flags is None else flags
    if {"amx_tile", "amx_bf16"} <= flags:
        return "amx"
    if "avx512f" in flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "other"


def device_name(device: str | torch.device) -> str:
    """CUDA device name for a CUDA device, else the CPU model."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


# Profile labels of GPUs, matched in the CUDA device name: the one table the server (which
# profile to load), the bench and `cast-autotune` (which label a measurement may carry) read.
# Word boundaries keep "H20" from matching "H200" and "A800" from matching "A8000".
GPU_LABELS: dict[str, str] = {
    "h100": r"\bH100\b",
    "h200": r"\bH200\b",
    "h20": r"\bH20\b",
    "a100": r"\bA100\b",
    "a800": r"\bA800\b",
    "l40s": r"\bL40S\b",
    "rtx4090": r"\bRTX 4090\b",
}


def gpu_label(name: str) -> str | None:
    """The profile label of a CUDA device named ``name`` (`GPU_LABELS`), or None."""
    return next((label for label, pattern in GPU_LABELS.items() if re.search(pattern, name, re.IGNORECASE)), None)


def hardware_label(device: str) -> str:
    """The profile label of ``device``: "cpu", or a GPU's from its CUDA name
    (`gpu_label`), else the name made file-safe."""
    if not device.startswith("cuda"):
        return "cpu"
    name = device_name(device)
    return gpu_label(name) or re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@dataclass(frozen=True)
class MachineIdentity:
    """What tells one machine's cost curve from another's, as a profile records it
    (``provenance.machine``).  A CPU's name alone does not: two EPYC generations both
    report "AMD EPYC" and differ in ``cpu family`` / ``model`` (one profile charged 1.74x
    the steps measured on the newer one, issue #47).  Unknown fields are None (older
    profiles, virtual CPUs without a stepping)."""

    device_type: str  # "cpu" or "cuda"
    name: str | None = None  # the CPU's model name, or the GPU's
    cpu_count: int | None = None  # logical CPUs
    isa_class: str | None = None  # `isa_class`, CPU only
    vendor: str | None = None  # /proc/cpuinfo vendor_id, CPU only
    family: str | None = None
    model: str | None = None
    stepping: str | None = None
    gpu_memory_gib: float | None = None  # CUDA only

    @classmethod
    def current(cls, device: str | torch.device) -> MachineIdentity:
        import torch

        device = torch.device(device)
        if device.type == "cuda":
            memory = torch.cuda.get_device_properties(device).total_memory / 2 ** 30
            return cls("cuda", device_name(device), os.cpu_count(), gpu_memory_gib=round(memory, 1))
        info = _cpuinfo_fields("vendor_id", "cpu family", "model", "stepping")
        return cls("cpu", cpu_name(), os.cpu_count(), isa_class(), info.get("vendor_id"), info.get("cpu family"),
                   info.get("model"), info.get("stepping"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MachineIdentity:
        """From a profile's ``provenance.machine`` (other keys there are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}

    def difference(self, here: MachineIdentity) -> str | None:
        """One line on how ``here`` differs from this (the profile's) machine, None when
        nothing recorded differs.  Another ISA class or GPU: re-tune; the same class but
        another CPU model or core count: the tables' scale is off, the decisions' shape
        usually holds."""
        if self.device_type != here.device_type:
            return f"measured on {self.device_type}, serving on {here.device_type}: re-tune recommended"
        if self.device_type == "cuda":
            if self.name and here.name and self.name != here.name:
                return f"measured on {self.name}, this GPU is {here.name}: re-tune recommended"
            return None
        if self.isa_class and here.isa_class and self.isa_class != here.isa_class:
            return f"measured on a CPU of ISA class {self.isa_class}, this one is {here.isa_class}: re-tune recommended"
        changed = [f"{name} {mine} -> {theirs}" for name, mine, theirs in
                   (("name", self.name, here.name), ("vendor", self.vendor, here.vendor),
                    ("family", self.family, here.family), ("model", self.model, here.model),
                    ("stepping", self.stepping, here.stepping), ("cpus", self.cpu_count, here.cpu_count))
                   if mine is not None and theirs is not None and mine != theirs]
        if not changed:
            return None
        return (f"same ISA class ({here.isa_class}), other CPU ({', '.join(changed)}): the cost tables' scale may "
                "be off here; re-tune (cast-autotune profile + tune) to know")
