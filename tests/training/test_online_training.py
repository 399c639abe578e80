"""The online trainer (sglang_cast/training/online.py): its batches are the CPU pipeline's
batches, and a run resumes from what it leaves in its folder."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from sglang_cast.training import online
from sglang_cast.training import responses as responses_stage
from sglang_cast.training import vocab as draft_vocab
from sglang_cast.training.features import FeatureSet, TrainSequence, collate
from sglang_cast.training.head import write_head
from sglang_cast.training.lm_head_basis import BasisLmHead
from support import ROOT
from support.training import random_head, tiny


def test_teacher_forced_batch_is_the_pipelines_batch_of_the_same_answers():
    """Features recomputed in one padded forward, labels, scored positions and soft
    labels equal what the CPU pipeline stores at generation and collates."""
    target = tiny()
    draft = random_head(target)
    to_draft = draft_vocab.target_to_draft(draft.t2d)
    prompts = [[5, 9, 11, 40, 7], [6, 8, 3, 12, 30, 31, 33, 35, 37]]  # different lengths: padding is exercised
    answers = sorted(responses_stage.greedy_with_features(target.model, prompts, 9, 2, target.feature_layers, (2,),
                                                     top_k=4), key=lambda a: a.index)
    fs = FeatureSet(
        features=[np.concatenate([a.features for a in answers])],
        sequences=[TrainSequence(np.array(prompts[a.index] + a.output_ids), len(prompts[a.index]), 0, row, soft)
                   for a, row, soft in zip(answers, np.cumsum([0] + [len(a.features) for a in answers])[:-1],
                                           np.cumsum([0] + [len(a.output_ids) for a in answers])[:-1])],
        soft=[(np.concatenate([a.top_logprobs for a in answers]), np.concatenate([a.top_ids for a in answers]))])
    expected = collate(fs, [0, 1], to_draft)
    seqs = online.Sequences([prompts[a.index] + a.output_ids for a in answers], [len(p) for p in prompts])
    got = online.teacher_forced(target, seqs, to_draft, top_k=4)
    assert torch.equal(got.input_ids[got.targets], expected.input_ids[expected.targets])
    assert torch.equal(got.targets, expected.targets)
    assert torch.equal(got.labels, expected.labels)
    assert torch.equal(got.soft_ids[got.targets], expected.soft_ids[expected.targets])
    torch.testing.assert_close(got.soft_probs[got.targets], expected.soft_probs[expected.targets], atol=2e-3,
                               rtol=1e-2)  # stored as fp16 log-probs by the pipeline
    for row, a in enumerate(answers):  # every real position's features; padding never leaks into them
        n = len(a.features)
        torch.testing.assert_close(got.features[row, :n], expected.features[row, :n], atol=2e-3, rtol=1e-2)


def test_rounds_train_the_head_and_a_second_call_resumes_where_the_first_stopped(tmp_path, monkeypatch):
    target = tiny()
    init = tmp_path / "init"
    draft = random_head(target)
    write_head(target, draft.d2t, draft.t2d, draft.state_dict(), init)
    monkeypatch.setattr(online, "load_benchmark_prompts", lambda _dir: ["an unrelated benchmark prompt"])
    cfg = online.OnlineConfig(rounds=1, self_instruct=2, doc_prompts=2, template_prompts=3, task_prompts=2,
                              request_tokens=6, response_tokens=8, gen_batch=4, feature_batch_tokens=256,
                              val_sequences=2, soft_top_k=3, max_prompt_tokens=400)
    out = tmp_path / "run"
    first = online.run_online(target, cfg, init, out, tmp_path)
    assert first["rounds"] == 1 and first["steps"] > 0 and not first["resumed"]
    state = json.loads((out / online.STATE).read_text())
    assert state["round"] == 1 and len(state["val_ids"]) == 2
    trained = online.head_state(out / "head", target)
    start = online.head_state(init, target)
    assert not torch.equal(trained["fc.weight"], start["fc.weight"])  # the optimiser moved the head
    assert torch.equal(trained["d2t"], start["d2t"])  # on the initial head's vocabulary
    second = online.run_online(target, dataclasses.replace(cfg, rounds=2), init, out, tmp_path)
    assert second["resumed"] and second["rounds"] == 2 and second["steps"] > first["steps"]
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [entry["round"] for entry in log] == [0, 1]
    assert json.loads((out / online.STATE).read_text())["val_ids"] == state["val_ids"]  # the same held-out set


def test_with_the_basis_the_lm_head_trains_as_w_plus_bp_and_the_head_is_written_folded(tmp_path, monkeypatch):
    """``--lm-head-basis``: every training step sees a `BasisLmHead`, and the written head
    has the public layout (one ``lm_head.weight``), so the next call and the engine load it."""
    target = tiny()
    init = tmp_path / "init"
    draft = random_head(target)
    write_head(target, draft.d2t, draft.t2d, draft.state_dict(), init)
    monkeypatch.setattr(online, "load_benchmark_prompts", lambda _dir: ["an unrelated benchmark prompt"])
    heads = []  # the LM head's type at every training and validation step
    online_ttt_loss = online.ttt_loss

    def spy(draft, *args, **kwargs):
        heads.append(type(draft.lm_head))
        return online_ttt_loss(draft, *args, **kwargs)

    monkeypatch.setattr(online, "ttt_loss", spy)
    base = online.OnlineConfig()
    cfg = online.OnlineConfig(rounds=1, self_instruct=0, doc_prompts=2, template_prompts=3, task_prompts=2,
                              response_tokens=8, gen_batch=4, feature_batch_tokens=256, val_sequences=2,
                              soft_top_k=0, max_prompt_tokens=400,
                              train=dataclasses.replace(base.train, lm_head_basis=24.0))
    out = tmp_path / "run"
    online.run_online(target, cfg, init, out, tmp_path)
    assert heads and set(heads) == {BasisLmHead}
    trained = online.head_state(out / "head", target)
    assert not any(k.startswith("lm_head.") and k != "lm_head.weight" for k in trained)
    plain = random_head(target)
    plain.load_state_dict(trained, strict=True)
    assert not torch.equal(plain.lm_head.weight, draft.lm_head.weight)
    second = online.run_online(target, dataclasses.replace(cfg, rounds=2), init, out, tmp_path)
    assert second["resumed"] and second["rounds"] == 2


def test_a_bad_flag_stops_the_command_with_one_line(tmp_path):
    """The module run as a command: exit code 2, the flag named in the last line."""
    result = subprocess.run([sys.executable, "-m", "sglang_cast.training.online", "--out", str(tmp_path),
                             "--device", "cpu", "--scale", "0"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("--scale: must be > 0, got 0.0")


@pytest.mark.parametrize("flags, message", [
    (["--scale", "0"], "--scale: must be > 0, got 0.0"),
    (["--rounds", "-1"], "--rounds: must be >= 0, got -1"),
    (["--gen-batch", "0"], "--gen-batch: must be >= 1, got 0"),
    (["--task-prompts", "-1"], "--task-prompts: must be >= 0, got -1"),
    (["--batch-tokens", "0"], "--batch-tokens: must be >= 1, got 0"),
    (["--lr", "0"], "--lr: must be in (0, 1], got 0.0"),
    (["--lm-head-basis", "-1"], "--lm-head-basis: must be >= 0 (0: off), got -1.0"),
    (["--self-instruct", "0", "--doc-prompts", "0", "--template-prompts", "0", "--task-prompts", "0"],
     "at least one must be >= 1"),
])
def test_bad_flags_are_one_line_errors(tmp_path, flags, message, capsys):
    """Each check, in this process (what the command above runs first: `online.parse_args`)."""
    with pytest.raises(SystemExit) as exit_info:
        online.parse_args(["--out", str(tmp_path), "--device", "cpu", *flags])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_head_trains_under_bf16_autocast_on_the_cpu_exactly_when_the_target_is_bf16(dtype):
    """A bf16 target on the CPU (AMX, AVX512-BF16) has the head's matmuls in bf16 too; an
    fp32 target keeps them in fp32."""
    target = tiny()
    target.model.to(dtype)
    with online.autocast(target):
        out = torch.nn.functional.linear(torch.randn(2, 4), torch.randn(3, 4))
    assert out.dtype == dtype


def test_per_source_counts_override_the_scale_and_the_batch_flags_reach_the_config(tmp_path):
    args = online.parse_args(["--out", str(tmp_path), "--device", "cpu", "--scale", "0.5", "--task-prompts", "7",
                              "--doc-prompts", "0", "--batch-tokens", "2048", "--passes", "1",
                              "--schedule-steps", "900", "--lr", "1e-4", "--lm-head-basis", "24"])
    cfg = online.config_from(args)
    assert cfg.train.lr == 1e-4 and cfg.train.lm_head_basis == 24.0 and cfg.train.warmup_steps == online.OnlineConfig().train.warmup_steps
    assert (cfg.self_instruct, cfg.doc_prompts, cfg.template_prompts, cfg.task_prompts) == (192, 0, 64, 7)
    assert (cfg.feature_batch_tokens, cfg.passes, cfg.schedule_steps) == (2048, 1, 900)
