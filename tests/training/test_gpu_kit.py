"""tools/gpu_kit.sh on a machine without a GPU: what it refuses, before any step runs.
Its steps themselves run only on a lent GPU machine (docs/native_gpu.md)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

KIT = ROOT / "tools" / "gpu_kit.sh"


def kit(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path / "out"), **env}
    return subprocess.run(["bash", str(KIT), *args], capture_output=True, text=True, env=environment, timeout=120)


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    done = kit("run", tmp_path=tmp_path, STEPS="bench,bench-cats")
    assert done.returncode == 2
    assert "unknown step 'bench-cats'" in done.stderr and "bench-batches" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before the kit made its folders


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA: the kit would run")
def test_without_cuda_the_kit_stops_at_once_with_one_line(tmp_path):
    done = kit("run", tmp_path=tmp_path, STEPS="bench")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: no CUDA device here; the kit runs on a lent GPU machine (docs/native_gpu.md)"
    assert not list((tmp_path / "out").iterdir())  # nothing packed: no step ran


def test_without_a_command_it_prints_its_usage(tmp_path):
    done = kit(tmp_path=tmp_path)
    assert done.returncode == 2 and "usage: bash tools/gpu_kit.sh prepare|run" in done.stderr


def test_train_hands_its_budget_and_the_lm_head_basis_to_the_online_trainer(tmp_path):
    """The command line `train` runs, recorded by a stand-in interpreter (the real one needs CUDA)."""
    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\n")
    fake.chmod(0o755)
    done = kit("train", tmp_path=tmp_path, PY=str(fake), TRAIN_S="123", LM_HEAD_BASIS="7")
    assert done.returncode == 0, done.stderr
    trainer = [line for line in calls.read_text().splitlines() if line.startswith("-m sglang_cast.training.online")]
    assert len(trainer) == 1 and "--budget-s 123 " in trainer[0] and trainer[0].endswith("--lm-head-basis 7")
    default = kit("train", tmp_path=tmp_path, PY=str(fake))
    assert default.returncode == 0 and calls.read_text().splitlines()[-1].endswith("--lm-head-basis 24")
