"""tools/step_profile.py: the per-iteration breakdown of a decode under torch.profiler,
on the embedded model on the CPU (the kit's `breakdown` step runs it on CUDA)."""

import json
import statistics

import pytest
from torch.profiler import record_function

from sglang_cast.engine import StepLog
from sglang_cast.engine.format_choice import profile_format
from sglang_cast.engine.runner import SpeculativeRunner
from sglang_cast.hardware import isa_class
from sglang_cast.profile import load_profile
from support import ROOT
from tools import step_profile
from tools.step_profile import main

PROFILE = ROOT / "profiles" / "cpu.yaml"
MAX_NEW_TOKENS = 6
PREFILL = "test.prefill"  # a range the test puts around the prompt's prefill forward


def test_the_breakdown_names_each_iterations_stages_and_host_ops(tmp_path, capsys, monkeypatch):
    logs, prefills = [], []

    class KeptLog(StepLog):  # the tool's own log of the profiled decode: what its numbers must say
        def __init__(self) -> None:
            super().__init__()
            logs.append(self)

    prefill = SpeculativeRunner._prefill_forward

    def ranged_prefill(self, *args):
        prefills.append(args)
        with record_function(PREFILL):
            return prefill(self, *args)

    monkeypatch.setattr(step_profile, "StepLog", KeptLog)
    monkeypatch.setattr(SpeculativeRunner, "_prefill_forward", ranged_prefill)
    out = tmp_path / "breakdown.json"
    assert main(["--device", "cpu", "--dtype", "float32", "--policy", "eagle2", "--profile", str(PROFILE),
                 "--num-prompts", "1", "--max-new-tokens", str(MAX_NEW_TOKENS), "--top", "1000",
                 "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["policy"] == "eagle2" and record["cuda_graphs"] is None
    # auto: the profile's format (its AMX tile parts on torch's kernels where AMX is missing)
    assert record["weight_format"] == profile_format(load_profile(PROFILE).profile, isa_class())
    (log,) = logs
    decode = log.records
    assert record["iterations"] == len(decode) >= 1
    assert record["accepted_per_iteration"] == statistics.fmean(sum(r.accepted) for r in decode)
    # The prefill's token, then each iteration's bonus token and accepted ones: the decode
    # ran until the sixth token and stopped at the iteration that reached it.
    committed = [1 + r.accepted[0] for r in decode]
    assert 1 + sum(committed[:-1]) < MAX_NEW_TOKENS <= 1 + sum(committed)
    stages = record["per_iteration"]
    assert stages["step_ms"] >= stages["draft_ms"] + stages["verify_ms"] > 0
    assert stages["graph_launches"] == 0 and stages["kernel_launches"] == 0  # nothing launched on a GPU
    # the host work between the forwards: present, and less than the whole step
    assert 0 < stages["outside_forwards_ms"] < stages["step_ms"] and stages["outside_forwards_ops"] > 10
    assert record["top_self_cpu"] and any(op["op"].startswith("aten::") for op in record["top_self_cpu"])
    # Ops are counted inside the iterations: one verify forward each, and neither the
    # iteration ranges themselves nor the prompt's prefill (one per decode: the untimed
    # one and the profiled one; admission, outside every iteration) among them.
    ops = {op["op"]: op for op in record["top_self_cpu"]}
    assert ops["decode.forward.target"]["calls_per_iteration"] == 1
    assert len(prefills) == 2 and PREFILL not in ops and "decode.iteration" not in ops
    # EAGLE-2 drafts every layer to max_depth (a forward per layer past the first) and
    # catches the draft up on what was accepted (one more); the first iteration also
    # feeds it the prompt.
    depth = load_profile(PROFILE).profile.settings.for_batch(1).shape.max_depth
    draft_forwards = ops["decode.forward.draft"]["calls_per_iteration"] * len(decode)
    assert draft_forwards == pytest.approx(len(decode) * depth + 1, abs=1e-9)
    assert "draft_ms" in capsys.readouterr().out


def test_a_size_below_one_is_refused_with_the_flag_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--batch-size", "0", "--json", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2 and "--batch-size: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, message", [
    ("--dataset", "no-such-prompts.jsonl", "--dataset: cannot read"),
    ("--profile", "no-such-profile.yaml", "--profile:"),
])
def test_an_unreadable_input_is_refused_with_its_flag_named_before_a_model_loads(tmp_path, capsys, monkeypatch,
                                                                                  flag, value, message):
    monkeypatch.setattr(step_profile, "load_model_pair", lambda *a, **k: pytest.fail("a model was loaded"))
    args = ["--device", "cpu", "--profile", str(PROFILE), "--json", str(tmp_path / "x.json")]
    assert main(args + [flag, str(tmp_path / value)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
