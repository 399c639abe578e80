"""tools/compare_heads.py: heads judged prompt by prompt, on hand-made per-prompt results."""

import json

import pytest

from sglang_cast.training import evaluate, target
from tools import compare_heads
from tools.compare_heads import main


def row(*accepted: int, tokens=(1, 2, 3)) -> dict:
    """One prompt under one head: its per-iteration accepted counts (τ = committed per iteration)."""
    return {"tau": sum(a + 1 for a in accepted) / len(accepted), "accepted": list(accepted), "tokens": list(tokens)}


@pytest.fixture
def results(tmp_path):
    """Three prompts: `new` accepts more on two and less on one; `old` and `new` decode the same tokens
    everywhere, `odd` differs on the last prompt."""
    data = {"benchmark": "mt_bench", "heads": {"old": "a", "new": "b", "odd": "c"}, "prompts": {
        "0": {"old": row(1, 1), "new": row(2, 2), "odd": row(1, 1)},
        "1": {"old": row(3, 0), "new": row(3, 1), "odd": row(3, 0)},
        "2": {"old": row(2, 2), "new": row(1, 1), "odd": row(2, 2, tokens=(9,))},
        "10": {"old": row(0)},  # not decoded under every head yet: left out
    }}
    path = tmp_path / "mt_bench.json"
    path.write_text(json.dumps(data))
    return path


def test_pooled_tau_counts_iterations_not_prompts():
    rows = [{"h": row(0, 0, 0, 0)}, {"h": row(3)}]  # 4 iterations committing 1, 1 committing 4
    assert compare_heads.pooled_tau(rows, "h") == pytest.approx(8 / 5)


def test_summary_compares_each_head_with_the_baseline_prompt_by_prompt(results, capsys):
    assert main(["summary", str(results)]) == 0
    table = capsys.readouterr().out
    assert "## mt_bench: 3 prompts, heads old, new, odd" in table
    # old commits 2+2, 4+1, 3+3 over 6 iterations (2.5), new 3+3, 4+2, 2+2 (2.667)
    assert "| old | 2.500 | 2.500 | | | |" in table
    assert "| new | 2.667 | 2.667 | +0.167 |" in table and "| 2 / 0 / 1 |" in table
    assert "| odd | 2.500 | 2.500 | +0.000 | +0.000 … +0.000 | 0 / 3 / 0 |" in table
    assert "identical outputs under every head: 2 / 3" in table


def test_the_interval_spans_the_resampled_differences(results):
    data = json.loads(results.read_text())
    rows = [data["prompts"][k] for k in "012"]
    comparison = compare_heads.compare(rows, "new", "old")
    low, high = comparison.interval
    assert low < 0 < comparison.delta < high  # one prompt of three goes the other way: the interval holds zero


def test_a_named_baseline_comes_first(results, capsys):
    assert main(["summary", str(results), "--baseline", "new"]) == 0
    table = capsys.readouterr().out
    assert "heads new, old, odd" in table and "| old | 2.500 | 2.500 | -0.167 |" in table


@pytest.mark.parametrize("args, message", [
    (["summary", "{results}", "--baseline", "nope"], "--baseline 'nope': not a head of this file (its heads: old, new, odd)"),
    (["summary", "{missing}"], "not a readable compare_heads JSON file"),
    (["summary", "{not_ours}"], "not a compare_heads file (needs keys benchmark, heads, prompts)"),
    (["decode", "{out}", "mt_bench", "--prompts", "5:2", "a={head}"], "--prompts '5:2': expected FIRST:LAST"),
    (["decode", "{out}", "mt_bench", "--prompts", "x", "a={head}"], "--prompts 'x': expected FIRST:LAST"),
    (["decode", "{out}", "mt_bench", "nameless"], "head 'nameless': expected NAME=FOLDER"),
    (["decode", "{out}", "mt_bench", "a={missing}"], "is not a draft head folder (no config.json)"),
    (["decode", "{out}", "mt_bench", "--weight-format", "int3", "a={head}"], "--weight-format: 'int3' is not"),
    (["eval", "{out}", "{missing}"], "head HEAD: "),
    (["eval", "{out}", "{head}", "--prompts", "0"], "--prompts: expected 1 or more first turns a benchmark, got 0"),
])
def test_bad_input_names_the_argument(results, tmp_path, capsys, args, message):
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text("{}")
    (tmp_path / "not_ours.json").write_text("[1, 2]")
    paths = {"results": results, "missing": tmp_path / "missing", "not_ours": tmp_path / "not_ours.json",
             "out": tmp_path / "out.json", "head": head}
    assert main([a.format(**paths) for a in args]) == 2
    assert message in capsys.readouterr().err


def test_decode_resumes_skipping_pairs_already_decoded(tmp_path, monkeypatch, capsys):
    """Only (prompt, head) pairs missing from the file are decoded, each prompt under every head in turn."""
    decoded = []

    def fake_decode(_target, head, prompts, _shape, _max_new, desc, draft_format):
        decoded.append(desc)
        return {"tau": 2.0, "accepted": [1], "outputs": [prompts[0]]}

    monkeypatch.setattr(target.Target, "embedded", classmethod(lambda cls, fmt: None))
    monkeypatch.setattr(evaluate, "benchmark_prompts", lambda _t, _d, _name, count: [[i] for i in range(count)])
    monkeypatch.setattr(evaluate, "evaluate_mode", fake_decode)
    heads = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        heads.append(f"{name}={tmp_path / name}")
    out = tmp_path / "out.json"
    assert main(["decode", str(out), "mt_bench", "--prompts", "0:2", heads[0]]) == 0
    assert decoded == ["a prompt 0", "a prompt 1"]
    assert main(["decode", str(out), "mt_bench", "--prompts", "1:3", *heads]) == 0
    assert decoded[2:] == ["b prompt 1", "a prompt 2", "b prompt 2"]
    data = json.loads(out.read_text())
    assert set(data["heads"]) == {"a", "b"} and set(data["prompts"]) == {"0", "1", "2"}
    assert data["prompts"]["2"]["b"] == {"tau": 2.0, "accepted": [1], "tokens": [2]}
    assert main(["decode", str(out), "humaneval", "--prompts", "0:1", heads[0]]) == 2
    assert "holds mt_bench, not humaneval" in capsys.readouterr().err


def test_decode_in_a_served_format_loads_target_and_heads_so_and_keeps_one_format_a_file(tmp_path, monkeypatch,
                                                                                           capsys):
    """--weight-format: the target is loaded in the target part, each head in the draft part; the file
    records the format, refuses rows of another, and its table names it."""
    loaded, draft_formats = [], []

    def fake_decode(_target, head, prompts, _shape, _max_new, desc, draft_format):
        draft_formats.append(str(draft_format.linears.value))
        return {"tau": 2.0, "accepted": [1], "outputs": [prompts[0]]}

    monkeypatch.setattr(target.Target, "embedded", classmethod(lambda cls, fmt: loaded.append(fmt)))
    monkeypatch.setattr(evaluate, "benchmark_prompts", lambda _t, _d, _name, count: [[i] for i in range(count)])
    monkeypatch.setattr(evaluate, "evaluate_mode", fake_decode)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text("{}")
    out = tmp_path / "out.json"
    served = ["decode", str(out), "mt_bench", "--prompts", "0:1", "--weight-format", "int4vnni/int8vnni+int8vnni"]
    assert main([*served, f"a={tmp_path / 'a'}"]) == 0
    assert loaded == ["int4vnni/int8vnni"] and draft_formats == ["int8vnni"]
    assert json.loads(out.read_text())["weight_format"] == "int4vnni/int8vnni+int8vnni"
    assert main(["decode", str(out), "mt_bench", "--prompts", "0:1", f"a={tmp_path / 'a'}"]) == 2
    assert "holds rows decoded in weight format int4vnni/int8vnni+int8vnni, not fp32" in capsys.readouterr().err
    assert main(["summary", str(out)]) == 0
    assert "heads a, weight format int4vnni/int8vnni+int8vnni" in capsys.readouterr().out


def test_eval_writes_the_eval_stage_report_and_keeps_runs_by_the_heads_digest(tmp_path, monkeypatch):
    """eval: build_eval on the named head with the fp32 target and the asked prompt count, its summary in
    train_draft's report shape; the work dir is named by the head's digest, so another head never reuses
    its runs."""
    calls = []

    def fake_build_eval(_target, cfg, head, out):
        calls.append((head, out, cfg.eval.prompts))
        return {"prompts_per_benchmark": cfg.eval.prompts}

    monkeypatch.setenv("SGLANG_CAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(target.Target, "embedded", classmethod(lambda cls: "fp32 target"))
    monkeypatch.setattr(evaluate, "build_eval", fake_build_eval)
    heads = []
    for name, weights in (("a", b"1"), ("b", b"2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        (tmp_path / name / "model.safetensors").write_bytes(weights)
        heads.append(tmp_path / name)
    for head in heads:
        assert main(["eval", str(tmp_path / f"{head.name}.json"), str(head), "--prompts", "3"]) == 0
    report = json.loads((tmp_path / "a.json").read_text())["eval"]
    assert report["head"] == str(heads[0]) and report["summary"] == {"prompts_per_benchmark": 3}
    assert report["settings"]["prompts"] == 3
    (_, work_a, _), (_, work_b, _) = calls
    assert work_a.parent == tmp_path / "cache" / "eval" and work_a.is_dir()
    assert work_a != work_b and work_a.name.endswith("-3")
