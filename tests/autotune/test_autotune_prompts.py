"""The tuning prompt sets: the default one's shape and how prompts are identified."""

from __future__ import annotations

from pathlib import Path

from autotune.confirm import gate_prompts, prompt_slices
from autotune.prompts import load_prompts, text_id
from autotune.workflow import TuneConfig

DATASETS = Path(__file__).resolve().parents[2] / "datasets"


def test_the_default_prompts_share_none_with_the_benchmark_sets():
    tuning = set(load_prompts().texts)
    for dataset in sorted(DATASETS.glob("*.jsonl")):
        assert not tuning & set(load_prompts(dataset).texts), dataset.name


def test_every_slice_the_gate_cuts_from_the_default_prompts_holds_long_prompts():
    """The live gate decodes whole batches from the head of the set; a gate on short
    requests only missed what chat-length prompts cost (2026-11-30)."""
    default = TuneConfig(label="cpu", output=Path("cpu.yaml"))  # the gate's defaults
    for per_slice in (default.confirm_prompts, 16):  # the default, and profiles/cpu.yaml's tune
        for batch in (1, 2, 4, 8, 16, 32):
            head = gate_prompts(load_prompts(), batch, per_slice, default.confirm_sets)
            for part in prompt_slices(list(head.texts), batch, default.confirm_sets):
                long = [t for t in part if len(t) >= 150]
                assert len(long) >= len(part) // 3, (per_slice, batch, len(long), len(part))


def test_every_slice_the_gate_cuts_from_the_default_prompts_holds_benchmark_length_ones():
    """humaneval's prompts run 167-1389 characters (median 443): a gate on chat-length
    prompts alone passed a B <= 8 tree that ran 0.97x plain there (2026-12-02)."""
    default = TuneConfig(label="cpu", output=Path("cpu.yaml"))
    for per_slice in (default.confirm_prompts, 16):
        for batch in (1, 2, 4, 8, 16, 32):
            head = gate_prompts(load_prompts(), batch, per_slice, default.confirm_sets)
            for part in prompt_slices(list(head.texts), batch, default.confirm_sets):
                long = [t for t in part if len(t) >= 400]
                assert len(long) >= len(part) // 4, (per_slice, batch, len(long), len(part))


def test_a_text_file_prompt_keeps_its_id_when_lines_are_added_above_it(tmp_path):
    before, after = tmp_path / "p.txt", tmp_path / "q.txt"
    before.write_text("Say hi.\nCount to three.\n")
    after.write_text("# a comment\nName a colour.\nSay hi.\n\nCount to three.\n")
    old, new = load_prompts(before), load_prompts(after)
    ids = dict(zip(new.texts, (i.split(":", 1)[1] for i in new.ids)))
    assert [ids[t] for t in old.texts] == [i.split(":", 1)[1] for i in old.ids]
    assert len(set(new.ids)) == 3


def test_a_text_file_prompt_breaks_lines_where_it_says_backslash_n(tmp_path):
    line = r"Finish this:\ndef f(x):\n    return x"
    path = tmp_path / "p.txt"
    path.write_text(line + "\n")
    prompts = load_prompts(path)
    assert prompts.texts == ("Finish this:\ndef f(x):\n    return x",)
    assert prompts.ids == (f"p:{text_id(line)}",)  # the id follows the line as written
