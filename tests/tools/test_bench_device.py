"""tools/bench.py --device / --dtype: validated with one-line errors, and every record
names the device it ran on and the weight format that runs there."""

from __future__ import annotations

import json

import pytest
import torch

from autotune.models import ModelPair
from sglang_cast.cast import CostModel, PolicySettings, Thresholds, TreeShape
from sglang_cast.hardware import cpu_name, isa_class
from tools import bench
from tools.benchkit import cli, inputs, records
from tools.benchkit.inputs import BenchError, DeviceSpec, parse_device
from support.tiny import CharTokenizer, MirrorDraft, tiny_target



def fake_cuda(monkeypatch, devices: int = 1) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)


def test_device_and_dtype_are_validated():
    assert parse_device("cpu", "bfloat16") == DeviceSpec("cpu", "bfloat16")
    with pytest.raises(BenchError, match=r"--device: expected cpu, cuda or cuda:N, got 'gpu'"):
        parse_device("gpu", "float32")
    with pytest.raises(BenchError, match=r"--dtype: expected one of float32, float16, bfloat16, got 'fp8'"):
        parse_device("cpu", "fp8")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_on_a_machine_without_it_is_one_line_and_exit_2(tmp_path, capsys):
    assert bench.main(["--dataset", str(tmp_path / "p.jsonl"), "--json", str(tmp_path / "o.json"),
                       "--device", "cuda", "--methods", "vanilla"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --device: cuda requested but no CUDA device is available (accepted here: cpu)\n"


def test_cuda_index_and_packed_formats_are_checked(monkeypatch, tmp_path, capsys):
    fake_cuda(monkeypatch, devices=1)
    assert parse_device("cuda:0", "bfloat16").is_cuda
    with pytest.raises(BenchError, match=r"--device: cuda:1 does not exist; this machine has CUDA devices 0..0"):
        parse_device("cuda:1", "bfloat16")
    common = ["--dataset", str(tmp_path / "p.jsonl"), "--json", str(tmp_path / "o.json"), "--methods", "vanilla"]
    assert bench.main(common + ["--device", "cuda", "--dtype", "bfloat16", "--weight-format", "int4"]) == 2
    assert ("--weight-format: int4 runs on the CPU only; on cuda use auto or fp32 (dense weights in --dtype)"
            in capsys.readouterr().err)
    assert bench.main(common + ["--rounds", "2"]) == 2
    assert "--rounds: must be in [3, 50], got 2" in capsys.readouterr().err


def test_machine_record_names_the_gpu_on_cuda_and_the_cpu_otherwise(monkeypatch):
    here = records.machine_info(DeviceSpec("cpu", "float32"))
    assert (here["device"], here["device_type"], here["isa"]) == (cpu_name(), "cpu", isa_class())
    assert "cuda" not in here
    fake_cuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    gpu = records.machine_info(DeviceSpec("cuda", "bfloat16"))
    assert (gpu["device"], gpu["device_type"], gpu["cpu"]) == ("NVIDIA H100 80GB HBM3", "cuda", cpu_name())
    assert gpu["cuda"] == torch.version.cuda


def test_a_bfloat16_run_names_bf16_and_judges_divergences(monkeypatch, tmp_path):
    """--dtype bfloat16 on the CPU: dense bf16 weights, named so in the model record and
    every record; greedy divergences (if any) carry the measured judge's gap."""
    target = tiny_target().to(torch.bfloat16)
    pair = ModelPair(target, MirrorDraft(target), CharTokenizer(), target_id="tiny", draft_id="mirror", dtype="bfloat16", chat_template=False)
    settings = PolicySettings.single(CostModel.linear(1.0, 5.0), shape=TreeShape(3, 3, 8),
                                     thresholds=Thresholds(0.2, 0.2, 0.2))
    asked = {}

    def load_inputs(args):
        asked["spec"] = args.spec
        return ["hello there", "abc"], settings, "test", pair

    monkeypatch.setattr(cli, "load_inputs", load_inputs)
    out = tmp_path / "o.json"
    code = bench.main(["--dataset", "unused", "--methods", "vanilla,eagle2", "--num-prompts", "2",
                       "--max-new-tokens", "6", "--dtype", "bfloat16", "--json", str(out)])
    data = json.loads(out.read_text())
    assert asked["spec"] == DeviceSpec("cpu", "bfloat16")
    assert data["model"]["weight_format"] == "bf16" and data["machine"]["device"] == cpu_name()
    assert data["rounds"] == 3
    assert [(r["weight_format"], r["device"]) for r in data["records"]] == [("bf16", cpu_name())] * 2
    eagle2 = data["records"][1]
    assert code == (1 if eagle2["lossless"] is False and not eagle2["near_ties_only"] else 0)
    assert all("gap" in m and "tolerance" in m for m in eagle2["mismatches"])


def test_the_profile_is_looked_up_by_the_devices_label(monkeypatch, tmp_path):
    looked = []
    monkeypatch.setattr(inputs, "find_profile", lambda label: looked.append(label))
    with pytest.raises(BenchError, match=r"--profile: no profiles/cpu.yaml"):
        inputs.load_settings(None, "cpu")
    fake_cuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    with pytest.raises(BenchError, match=r"--profile: no profiles/h100.yaml"):
        inputs.load_settings(None, "cuda")
    assert looked == ["cpu", "h100"]
