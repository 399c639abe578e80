"""tools/step_profile.py: the per-iteration breakdown of a decode under torch.profiler,
on the embedded model on the CPU (the kit's `breakdown` step runs it on CUDA)."""

import json

import pytest

from tools.step_profile import main


def test_the_breakdown_names_each_iterations_stages_and_host_ops(tmp_path, capsys):
    out = tmp_path / "breakdown.json"
    assert main(["--device", "cpu", "--dtype", "float32", "--policy", "eagle2", "--profile", "profiles/cpu.yaml",
                 "--num-prompts", "1", "--max-new-tokens", "6", "--top", "1000", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["policy"] == "eagle2" and record["cuda_graphs"] is None
    assert 1 <= record["iterations"] <= 5 and record["accepted_per_iteration"] >= 0
    stages = record["per_iteration"]
    assert stages["step_ms"] >= stages["draft_ms"] + stages["verify_ms"] > 0
    assert stages["graph_launches"] == 0 and stages["kernel_launches"] == 0  # nothing launched on a GPU
    # the host work between the forwards: present, and less than the whole step
    assert 0 < stages["outside_forwards_ms"] < stages["step_ms"] and stages["outside_forwards_ops"] > 10
    assert record["top_self_cpu"] and any(op["op"].startswith("aten::") for op in record["top_self_cpu"])
    # Ops are counted inside the iterations: their host time adds up to the steps', the
    # prompt's eager prefill (admission, outside every iteration) left out.
    inside_us = sum(op["self_cpu_us_per_iteration"] for op in record["top_self_cpu"])
    assert 0.5 * stages["step_ms"] * 1e3 < inside_us <= 1.05 * stages["step_ms"] * 1e3
    assert "draft_ms" in capsys.readouterr().out


def test_a_size_below_one_is_refused_with_the_flag_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--batch-size", "0", "--json", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2 and "--batch-size: must be >= 1, got 0" in capsys.readouterr().err
