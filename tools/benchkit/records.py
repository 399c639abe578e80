"""What every JSON the tool writes says about the machine, the device and the models."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import torch

from autotune.models import ModelPair
from sglang_cast.engine.format_choice import FormatChoice, running_format
from sglang_cast.hardware import cpu_name, device_name, isa_class

from .inputs import DeviceSpec


def machine_info(spec: DeviceSpec) -> dict:
    """The machine a result was measured on: the device the engine ran on (the GPU's
    name on CUDA, else the CPU model), the host CPU and its ISA class, and versions."""
    info = {"device": device_name(spec.device), "device_type": spec.torch_device.type, "cpu": cpu_name(),
            "isa": isa_class(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "load_average_1min_at_end": os.getloadavg()[0]}
    if spec.is_cuda:
        info["cuda"] = torch.version.cuda
    return info


def model_record(pair: ModelPair, requested: str, choice: FormatChoice | None, compile_s: float | None) -> dict:
    """The models: ids, the residual dtype, the weight format the target ran (named for
    what runs: `format_choice.running_format`) and how it was chosen (``--weight-format``
    as given, the reason, the measured ms per format and M when measured), and whether
    its layers were compiled (and in how many seconds)."""
    return {"target": pair.target_id, "draft": pair.draft_id, "dtype": pair.dtype,
            "weight_format": running_format(str(pair.target.weight_format), pair.torch_dtype),
            "weight_format_requested": requested, "weight_format_reason": choice.reason if choice else None,
            "weight_format_costs_ms": choice.costs_ms if choice else {},
            "compiled": compile_s is not None, "compile_s": compile_s}


def command_line(argv: list[str] | None) -> str:
    return " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:]))


def write_json(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
