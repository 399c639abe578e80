"""What hardware we run on: the label profiles are measured for and matched by."""

from __future__ import annotations

import platform
import re
from pathlib import Path

import torch


def cpu_name() -> str:
    """The CPU model as the kernel reports it (``model name`` in /proc/cpuinfo)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The ISA feature flags of the first CPU (``flags`` in /proc/cpuinfo); empty if unknown."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    return frozenset()


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
