"""sglang_cast.training (tools/train_draft.py): training-time test vs. the engine,
resumable stages and an end-to-end run on a tiny random target (the data stages:
tests/training/test_training_data.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from sglang_cast.cast import DraftTree, SamplingParams, TreeShape
from sglang_cast.engine.draft_expander import DraftExpander
from sglang_cast.models import KVCache, causal_tree_mask, load_draft

from sglang_cast.training import workspace
from sglang_cast.training import gap as draft_gap, responses as responses_stage
from sglang_cast.training import train as train_stage
from sglang_cast.training import vocab as draft_vocab
from sglang_cast.training.cli import FLAGS, parse_args
from sglang_cast.training.config import PipelineConfig
from sglang_cast.training.features import Batch, FeatureSet, collate
from sglang_cast.training.head import MAX_HEAD_BYTES, head_state
from sglang_cast.training.pipeline import run_pipeline
from sglang_cast.training.prompts import build_prompts, build_self_instruct
from sglang_cast.training.responses import build_responses
from sglang_cast.training.target import chat_ids
from sglang_cast.training.train import build_train, split, validate
from sglang_cast.training.ttt import soft_cross_entropy, ttt_attention_mask, ttt_forward, ttt_loss
from sglang_cast.training.vocab import build_vocab
from sglang_cast.training.workspace import run_stage
from support import ROOT
from support.training import VOCAB, random_head, tiny, tiny_config


# ------------------------------------------------------------ TTT vs engine

def test_ttt_mask_small_example():
    mask = ttt_attention_mask(4, 2).int()
    # Query t at step 2 sees step-0 keys <= t-2, the step-1 key at t-1 and itself.
    assert mask.tolist() == [
        [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0],
        [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
        [1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1],
    ]


class RecordingDraft:
    """The runner's draft step, keeping the logits the expander saw."""

    def __init__(self, step):
        self.step = step
        self.logits = []

    def __call__(self, *args):
        hidden, logits = self.step(*args)
        self.logits.append(logits)
        return hidden, logits


def test_training_time_test_matches_engine_tree_drafting():
    """Unrolled TTT logits equal what the engine's prefill catch-up and DraftExpander
    produce for the same tokens: step 0 at the last prompt position is the root's
    children, step 1 and 2 are deeper tree levels, siblings do not interfere, and each
    node reads its own parent's output."""
    torch.manual_seed(0)
    target = tiny()
    draft = random_head(target)
    engine = target.engine(draft, TreeShape(top_k=2, max_depth=3, num_verify_tokens=4), 1, 64)
    prompt = [5, 17, 40, 9, 33, 71, 12, 60, 8, 25]
    n = len(prompt)
    request = engine.add_request(prompt, SamplingParams(max_new_tokens=8))
    engine._admit()  # prefill: the target forward; the prompt waits in the draft's backlog
    engine.runner.feed_backlog([request])  # the draft's catch-up, as a first speculative iteration runs it
    root = request.output_ids[0]
    assert not request.finished
    slot = torch.tensor([request.slot])
    context = engine.runner.target_cache.lens[slot].clone()
    recorder = RecordingDraft(engine.runner.draft_forward)
    expander = DraftExpander(recorder, engine.runner.read_children, slot, context, engine.runner.root_hidden[slot],
                             engine.runner.root_logits[slot])
    tree = DraftTree.from_roots(torch.tensor([root]))
    # depth 1: a and its sibling b; depth 2: c under b, then d under a (a layer's nodes
    # come in rank order, not in their parents' order)
    a, b, c, d = 50, 51, 77, 78
    with torch.inference_mode():  # as the engine drafts
        expander.expand(tree, range(0, 1), 2)
        level1 = tree.add_layer([[a, b]], [[0, 0]], [[0.5, 0.4]])
        expander.expand(tree, level1, 2)
        level2 = tree.add_layer([[c, d]], [list(reversed(level1))], [[0.3, 0.2]])
        expander.expand(tree, level2, 2)

    features = data_features(target, prompt)
    for chain, checks in (([b, c], [(1, n, 1), (2, n + 1, 0)]), ([a, d], [(1, n, 0), (2, n + 1, 1)])):
        tokens = prompt + [root] + chain
        width = features.shape[-1]
        padded = torch.cat([features, torch.zeros(len(tokens) - 1 - n, width)])  # unused by these steps
        with torch.no_grad():
            outputs = ttt_forward(draft, torch.tensor([tokens[1:]]), padded[None], 3)
        ttt = [draft.lm_head(draft.norm(h))[0] for h in outputs]
        torch.testing.assert_close(ttt[0][n - 1], engine.runner.root_logits[request.slot], rtol=1e-5, atol=1e-5)
        for step, position, column in checks:
            engine_logits = recorder.logits[step - 1][0, column]  # the root's children need no call
            torch.testing.assert_close(ttt[step][position], engine_logits, rtol=1e-5, atol=1e-5)


def data_features(target, tokens):
    """Reference extraction: one causal forward over the whole sequence."""
    n = len(tokens)
    cache = KVCache.for_model(target.config, 1, n, "cpu", torch.float32)
    with torch.no_grad():
        out = target.model(torch.tensor([tokens]), torch.arange(n).view(1, n), cache, torch.zeros(1, dtype=torch.long),
                           causal_tree_mask(1, n, "cpu"), target.feature_layers)
    return torch.cat(out.captured, dim=-1)[0]


def test_generation_captures_the_features_of_a_full_extraction_pass():
    """Answers equal the engine's greedy decoding, and the features kept while decoding
    (prefill, then one token per step, batched with other sequences) equal one causal
    forward over prompt + answer."""
    target = tiny(seed=4)
    prompts = [[5 + i, 9, 30 + 2 * i, 7][: 2 + i % 3] for i in range(5)]
    answers = sorted(responses_stage.greedy_with_features(target.model, prompts, 9, 3, target.feature_layers, (2,)),
                     key=lambda a: a.index)
    engine = target.engine(None, TreeShape(), 3, 32)
    expected = engine.generate(prompts, SamplingParams(max_new_tokens=9))
    for prompt, answer, result in zip(prompts, answers, expected):
        assert answer.output_ids == result.token_ids
        assert answer.truncated == (result.finish_reason == "length")
        full = data_features(target, prompt + answer.output_ids)[:-1]
        assert answer.features.shape == full.shape and answer.features.dtype == np.float16
        torch.testing.assert_close(torch.from_numpy(answer.features).float(), full, rtol=2e-3, atol=2e-3)
        assert answer.top_ids is None and answer.top_logprobs is None


def test_generation_keeps_the_targets_top_k_at_every_answer_token():
    """Soft labels: row j holds the target's 5 likeliest tokens (argmax first, so the
    answer token itself) and their log-probabilities where it chose answer token j."""
    target = tiny(seed=4)
    prompts = [[5 + i, 9, 30 + 2 * i, 7][: 2 + i % 3] for i in range(5)]
    answers = responses_stage.greedy_with_features(target.model, prompts, 9, 3, target.feature_layers, (2,), top_k=5)
    for answer in answers:
        prompt, n_out = prompts[answer.index], len(answer.output_ids)
        assert answer.top_ids.shape == (n_out, 5) and answer.top_logprobs.dtype == np.float16
        assert answer.top_ids[:, 0].tolist() == answer.output_ids
        tokens = torch.tensor([prompt + answer.output_ids])
        n = tokens.shape[1]
        cache = KVCache.for_model(target.config, 1, n, "cpu", torch.float32)
        with torch.no_grad():
            out = target.model(tokens, torch.arange(n).view(1, n), cache, torch.zeros(1, dtype=torch.long),
                               causal_tree_mask(1, n, "cpu"))
            logprobs = torch.log_softmax(target.model.logits(out.hidden[0, len(prompt) - 1 : n - 1]), -1)
        top = logprobs.topk(5, dim=-1)
        assert torch.equal(torch.from_numpy(answer.top_ids).long(), top.indices)
        torch.testing.assert_close(torch.from_numpy(answer.top_logprobs).float(), top.values, rtol=2e-3, atol=2e-3)


def test_soft_cross_entropy_renormalises_inside_the_draft_vocab():
    logits = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([1, 4, 0])
    one_hot_ids = torch.stack([labels, torch.full((3,), -1)], dim=1)
    # Mass on a token outside the draft vocab (-1) is dropped and the rest renormalised.
    log_q = torch.log_softmax(logits, -1)
    assert soft_cross_entropy(log_q, one_hot_ids, torch.tensor([[0.6, 0.4]] * 3)) == pytest.approx(
        F.cross_entropy(logits, labels).item())
    ids, probs = torch.tensor([[2, 5]]), torch.tensor([[0.3, 0.1]])
    expected = -(0.75 * log_q[0, 2] + 0.25 * log_q[0, 5])
    assert soft_cross_entropy(log_q[:1], ids, probs) == pytest.approx(expected.item())
    # A row with no mass inside the draft vocab adds nothing and is not counted.
    skipped = torch.cat([ids, torch.tensor([[-1, -1]])]), torch.cat([probs, torch.tensor([[0.5, 0.5]])])
    assert soft_cross_entropy(log_q[:2], *skipped) == pytest.approx(expected.item())


def test_ttt_loss_trains_the_head():
    target = tiny()
    draft = random_head(target, vocab=VOCAB)
    tokens = torch.randint(3, VOCAB, (2, 24), generator=torch.Generator().manual_seed(3))
    feats = torch.stack([data_features(target, row.tolist()) for row in tokens])
    batch = Batch(tokens[:, 1:], feats[:, :-1], torch.cat([tokens[:, 2:], torch.full((2, 1), -1)], 1),
                  torch.cat([torch.ones(2, 22, dtype=torch.bool), torch.zeros(2, 1, dtype=torch.bool)], 1))
    optimizer = torch.optim.Adam(draft.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        loss, stats = ttt_loss(draft, batch, 3, 0.8)
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5 * first
    assert stats.scored == [44, 42, 40]  # step s needs s earlier positions


def test_ttt_loss_is_the_cross_entropy_over_in_vocab_labels_plus_the_soft_term():
    """Each step's loss against a row-by-row reference: the mean cross-entropy over the
    positions whose label is in the draft vocab, mixed with the soft term over the rows
    with top-k mass inside it; the value and the gradients agree."""
    target = tiny()
    draft = random_head(target, vocab=VOCAB)
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(3, VOCAB, (2, 16), generator=gen)
    feats = torch.stack([data_features(target, row.tolist()) for row in tokens])
    labels = torch.cat([tokens[:, 2:], torch.full((2, 1), -1)], 1)
    labels[0, 3] = labels[1, 7] = -1  # outside the draft vocab
    soft_ids = torch.randint(0, VOCAB, (2, 15, 3), generator=gen)
    soft_ids[0, 2] = -1  # no mass inside the draft vocab: skipped by the soft term
    soft_ids[1, 4, 1] = -1
    soft_probs = torch.rand(2, 15, 3, generator=gen) / 3
    batch = Batch(tokens[:, 1:], feats[:, :-1], labels, torch.ones(2, 15, dtype=torch.bool), soft_ids, soft_probs)

    def reference():
        total = 0.0
        for step, hidden in enumerate(ttt_forward(draft, batch.input_ids, batch.features, 3)):
            mask = batch.step_mask(step)
            logits = draft.lm_head(draft.norm(hidden[mask]))
            rows_labels, known = batch.labels[mask], batch.labels[mask] >= 0
            hard = F.cross_entropy(logits[known], rows_labels[known])
            ids, probs = batch.soft_ids[mask], batch.soft_probs[mask] * (batch.soft_ids[mask] >= 0)
            rows = probs.sum(-1) > 0
            log_q = torch.log_softmax(logits[rows], -1).gather(-1, ids[rows].clamp(min=0))
            soft = -((probs[rows] / probs[rows].sum(-1, keepdim=True)) * log_q).sum(-1).mean()
            total = total + 0.8**step * (0.5 * hard + 0.5 * soft)
        return total

    want = reference()
    want_grads = torch.autograd.grad(want, list(draft.parameters()), allow_unused=True)
    got, stats = ttt_loss(draft, batch, 3, 0.8, 0.5)
    got_grads = torch.autograd.grad(got, list(draft.parameters()), allow_unused=True)
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    for w, g in zip(want_grads, got_grads):
        assert (w is None) == (g is None)
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    assert stats.known == [28 - 2, 26 - 2, 24 - 2]  # the last column scores nothing; two labels outside


# ---------------------------------------------------------------- pipeline

def test_pipeline_end_to_end_on_tiny_model_and_resume(tmp_path, capsys):
    cfg = tiny_config(tmp_path)
    target = tiny()
    report = run_pipeline(target, cfg)
    head = load_draft(cfg.output_dir, target.model, "cpu", torch.float32)
    assert head.config.layout == "eagle3" and head.output_vocab_size == 32
    assert {p.name for p in cfg.output_dir.iterdir()} == {"config.json", "model.safetensors"}
    assert report["train"]["summary"]["steps"] == cfg.train.max_steps
    assert report["responses"]["summary"]["sequences"] == 5  # --max-answers
    assert report["eval"]["summary"]["mt_bench"]["prompts"] == 2
    assert not list(cfg.work_dir.glob("*.partial"))
    capsys.readouterr()
    run_pipeline(target, cfg)  # everything is complete: every stage is skipped
    out = capsys.readouterr().out
    for stage in ("self_instruct", "prompts", "responses", "vocab", "train", "eval"):
        assert f"[{stage}] already complete, skipped" in out


def test_init_head_continues_an_exported_head(tmp_path):
    """--init-head: the vocab and starting weights are the given head's; with a zero
    learning rate training keeps them exactly, with a real one it moves them."""
    target = tiny()
    for name in ("first", "lr0.0", "lr0.01"):
        (tmp_path / name).mkdir()
    first = tiny_config(tmp_path / "first")
    run_pipeline(target, first)
    shipped = {k: v.float() if v.is_floating_point() else v
               for k, v in load_file(first.output_dir / "model.safetensors").items()}
    for lr, same in ((0.0, True), (1e-2, False)):
        base = tiny_config(tmp_path / f"lr{lr}")
        cfg = dataclasses.replace(base, seed=1, init_head=first.output_dir,
                                  train=dataclasses.replace(base.train, draft_vocab=16, lr=lr))
        report = run_pipeline(target, cfg)
        assert report["vocab"]["summary"]["draft_vocab"] == 32  # the head's, not --draft-vocab's 16
        trained = torch.load(cfg.work_dir / "train" / "draft.pt")
        assert set(trained) == set(shipped)
        for key in ("d2t", "t2d"):
            assert torch.equal(trained[key], shipped[key])
        moved = [key for key in shipped if not torch.equal(trained[key], shipped[key])]
        assert (moved == []) == same, moved


def _continue_a_tiny_head(tmp_path, **train):
    """A 16-token head trained on tiny data, then continued with zero learning rate and
    the given train settings: (old head, new head, the continued run's vocab report)."""
    target = tiny()
    (tmp_path / "first").mkdir()
    (tmp_path / "next").mkdir()
    first = tiny_config(tmp_path / "first")
    first = dataclasses.replace(first, train=dataclasses.replace(first.train, draft_vocab=16))
    run_pipeline(target, first)
    base = tiny_config(tmp_path / "next")
    cfg = dataclasses.replace(base, seed=1, init_head=first.output_dir,
                              train=dataclasses.replace(base.train, lr=0.0, **train))
    report = run_pipeline(target, cfg)["vocab"]
    return (load_draft(first.output_dir, target.model, "cpu", torch.float32),
            load_draft(cfg.output_dir, target.model, "cpu", torch.float32), report)


def _rows_kept(old, new):
    """Which of ``new``'s draft tokens were in ``old``'s vocab, and their old draft ids."""
    targets = new.draft_to_target(torch.arange(new.lm_head.weight.shape[0]))
    return old.t2d[targets], draft_vocab.target_to_draft(old.t2d)[targets]


def test_vocab_swap_refreshes_a_continued_heads_vocab(tmp_path, capsys):
    """--vocab-swap: the continued head's vocab covers more of the new answers, and
    with a zero learning rate every kept token's LM-head row is the old head's."""
    old, new, report = _continue_a_tiny_head(tmp_path, vocab_swap=8)
    assert report["settings"]["vocab_swap"] == 8 and report["summary"]["draft_vocab"] == 16
    assert 0 < report["summary"]["swapped_tokens"] <= 8
    assert report["summary"]["response_token_coverage"] > report["summary"]["head_vocab_coverage"]
    assert not torch.equal(new.t2d, old.t2d)
    kept, old_ids = _rows_kept(old, new)
    assert int((~kept).sum()) == report["summary"]["swapped_tokens"]
    assert torch.equal(new.lm_head.weight[kept], old.lm_head.weight[old_ids[kept]])
    for flag in ("--vocab-swap", "--vocab-grow"):
        with pytest.raises(SystemExit):
            parse_args([flag, "4"])
        assert f"{flag}: needs --init-head" in capsys.readouterr().err


def test_vocab_grow_enlarges_a_continued_heads_vocab(tmp_path):
    """--vocab-grow: the continued head's LM head gains rows for the new answers'
    commonest tokens outside its vocab, each the mean of the old rows; the old rows stay
    (zero learning rate); the exported head loads with the larger vocab."""
    old, new, report = _continue_a_tiny_head(tmp_path, vocab_grow=6)
    assert report["settings"]["vocab_grow"] == 6
    assert report["summary"]["draft_vocab"] == 22 and report["summary"]["grown_tokens"] == 6
    assert report["summary"]["swapped_tokens"] == 0
    assert new.lm_head.weight.shape[0] == 22 and bool(new.t2d[old.t2d].all())  # every old token stays
    kept, old_ids = _rows_kept(old, new)
    assert torch.equal(new.lm_head.weight[kept], old.lm_head.weight[old_ids[kept]])
    mean = old.lm_head.weight.mean(dim=0).half().float()  # the export stores fp16
    assert torch.allclose(new.lm_head.weight[~kept], mean.expand(6, -1))


def test_the_shipped_head_fits_the_asset_budget():
    shipped = ROOT / "sglang_cast" / "assets" / "smollm2-135m-eagle"
    assert 0 < sum(path.stat().st_size for path in shipped.iterdir()) <= MAX_HEAD_BYTES


def test_init_head_errors_name_the_flag(tmp_path):
    with pytest.raises(SystemExit):
        parse_args(["--init-head", str(tmp_path)])
    save_file({"fc.weight": torch.zeros(2, 2)}, tmp_path / "model.safetensors")
    with pytest.raises(SystemExit, match=r"--init-head: .* \(no d2t"):
        head_state(tmp_path, tiny())
    target = tiny()
    head = {key: value.contiguous() for key, value in random_head(target).state_dict().items()}
    head["fc.weight"] = head["fc.weight"][:, :-3].contiguous()  # a head built for another target
    save_file(head, tmp_path / "model.safetensors")
    with pytest.raises(SystemExit, match=r"--init-head: .*fc\.weight"):
        head_state(tmp_path, target)


def test_soft_labels_line_up_with_the_argmax_labels_and_train(tmp_path):
    """With --soft-top-k the answers carry soft labels; at every scored position their
    first entry is the label (greedy answers: the argmax is the next token), and a run
    with --soft-labels trains; without soft answers --soft-labels is refused."""
    target = tiny()
    base = tiny_config(tmp_path)
    cfg = dataclasses.replace(base, data=dataclasses.replace(base.data, soft_top_k=4),
                              train=dataclasses.replace(base.train, soft_labels=0.5))
    report = run_pipeline(target, cfg)
    assert report["train"]["summary"]["steps"] == cfg.train.max_steps
    assert report["responses"]["settings"]["soft_top_k"] == 4
    fs = FeatureSet.open(cfg.work_dir / "responses", cfg.train.max_seq_len)
    to_draft = draft_vocab.target_to_draft(torch.load(cfg.work_dir / "vocab" / "vocab.pt")["t2d"])
    batch = collate(fs, range(len(fs)), to_draft)
    scored = batch.targets & (batch.labels >= 0)
    assert int(scored.sum()) > 10
    assert torch.equal(batch.soft_ids[..., 0][scored], batch.labels[scored])
    assert bool((batch.soft_probs[scored].sum(-1) <= 1.0 + 1e-3).all())
    assert not bool(batch.soft_probs[~batch.targets].any())
    (tmp_path / "plain").mkdir()
    plain = tiny_config(tmp_path / "plain")
    run_pipeline(target, plain)
    assert "soft_top_k" not in stage_settings(plain.work_dir, "responses")  # settings of older runs still match
    assert "task_prompts" not in stage_settings(plain.work_dir, "prompts")
    assert "soft_labels" not in stage_settings(plain.work_dir, "train")["train"]
    (tmp_path / "out").mkdir()
    with pytest.raises(SystemExit, match="--soft-top-k"):
        build_train(target, dataclasses.replace(plain, train=cfg.train), plain.work_dir / "vocab",
                    plain.work_dir / "responses", tmp_path / "out")


def test_replay_trains_on_an_earlier_runs_answers_beside_its_own(tmp_path):
    """--replay-responses: the train stage's sequences are this run's answers, then the
    earlier run's; its settings name the replayed stage, and a run without one records
    nothing new (so existing work dirs keep their finished train stages)."""
    target = tiny()
    for name in ("earlier", "next"):
        (tmp_path / name).mkdir()
    earlier = tiny_config(tmp_path / "earlier")
    run_pipeline(target, earlier, until="responses")
    base = tiny_config(tmp_path / "next")
    replay = str(earlier.work_dir / "responses")
    cfg = dataclasses.replace(base, seed=1, train=dataclasses.replace(base.train, replay=(replay,)))
    report = run_pipeline(target, cfg, until="train")["train"]
    own = len(FeatureSet.open(cfg.work_dir / "responses", cfg.train.max_seq_len))
    replayed = len(FeatureSet.open(earlier.work_dir / "responses", cfg.train.max_seq_len))
    assert report["summary"]["replayed_sequences"] == replayed == 5
    assert report["summary"]["train_sequences"] + report["summary"]["val_sequences"] == own + replayed
    assert report["settings"]["train"]["replay"] == [replay]
    both = FeatureSet.open_many([cfg.work_dir / "responses", earlier.work_dir / "responses"], 512)
    assert [s.token_ids.tolist() for s in both.sequences[own:]] == \
        [s.token_ids.tolist() for s in FeatureSet.open(earlier.work_dir / "responses", 512).sequences]
    run_pipeline(target, earlier, until="train")
    assert "replay" not in stage_settings(earlier.work_dir, "train")["train"]


def test_replay_flag_errors_name_the_flag(tmp_path, capsys):
    """A replayed stage must be a finished responses stage of another seed, with the soft
    labels this run trains on; a good one is recorded by its absolute path."""
    stage = tmp_path / "responses"
    stage.mkdir()
    (stage / "shard_00000.jsonl").write_text("")
    cases = [([str(tmp_path / "none")], "is not a finished responses stage"),
             ([str(stage)], "is not a finished responses stage")]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            parse_args(["--replay-responses", *argv])
        assert f"--replay-responses: {argv[0]} {message}" in capsys.readouterr().err
    (stage / "meta.json").write_text(json.dumps({"settings": {"seed": 3, "soft_top_k": 4}}))
    with pytest.raises(SystemExit):
        parse_args(["--replay-responses", str(stage), "--seed", "3"])
    assert "was built with this run's --seed 3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--replay-responses", str(stage), "--soft-top-k", "16", "--soft-labels", "0.5"])
    assert "holds soft labels of the top 4 tokens, this run's --soft-top-k is 16" in capsys.readouterr().err
    cfg, _ = parse_args(["--replay-responses", str(stage), "--soft-top-k", "4", "--soft-labels", "0.5"])
    assert cfg.train.replay == (str(stage.resolve()),)
    assert parse_args([])[0].train.replay == ()


def test_the_answerer_in_a_served_format_writes_the_training_answers(tmp_path):
    """--target-format: the responses stage's answers are the answerer's greedy answers (here
    a stand-in model whose answers differ from the fp32 target's) and its settings name the
    format, so fp32 data is never reused for it; a format without its answerer is refused."""
    target, answerer = tiny(), tiny(seed=3)
    cfg = dataclasses.replace(tiny_config(tmp_path), target_format="int8")
    run_pipeline(target, cfg, until="responses", answerer=answerer)
    assert stage_settings(cfg.work_dir, "responses")["target_format"] == "int8"
    answers = responses_stage.read_generations(cfg.work_dir / "responses")
    plain = {name: t.engine(None, TreeShape(1, 1, 2), 1, 512) for name, t in (("fp32", target), ("answerer", answerer))}
    params = SamplingParams(max_new_tokens=cfg.data.response_tokens)
    greedy = {name: [e.generate([a.prompt_ids], params)[0].token_ids for a in answers] for name, e in plain.items()}
    assert [a.output_ids for a in answers] == greedy["answerer"] != greedy["fp32"]
    with pytest.raises(ValueError, match="target_format int8: pass the target stored in it as answerer"):
        run_pipeline(target, cfg)
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="target_format fp32: pass the target stored in it as answerer"):
        run_pipeline(target, tiny_config(tmp_path / "plain"), answerer=answerer)


@pytest.mark.parametrize("argv, message", [
    (["--target-format", "int3"], "--target-format: 'int3' is not '<linears>' or '<linears>/<lm_head>'"),
    (["--target-format", "int4/int8+int8"], "--target-format: 'int4/int8+int8' names a draft part"),
])
def test_target_format_flag_errors_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err
    assert parse_args(["--target-format", "int4 / int8"])[0].target_format == "int4/int8"  # canonical
    assert parse_args([])[0].target_format == "fp32"


def stage_settings(work_dir: Path, stage: str) -> dict:
    return json.loads((work_dir / stage / "meta.json").read_text())["settings"]


def test_gap_report_splits_the_held_out_accuracy_by_source(tmp_path):
    cfg = tiny_config(tmp_path)
    target = tiny()
    report = run_pipeline(target, cfg)
    gap = draft_gap.gap_report(target, draft_gap.GapConfig(cfg.output_dir, cfg.work_dir, cfg.benchmark_dir, prompts=2,
                                                           tokens=5, ttt_steps=cfg.train.ttt_steps,
                                                           max_seq_len=cfg.train.max_seq_len, vocab_sizes=(16,)))
    assert set(gap["benchmarks"]) == {"mt_bench", "humaneval"}
    assert gap["benchmarks"]["mt_bench"]["all"]["sequences"] == 2
    assert (cfg.work_dir / "gap" / "mt_bench-2x5" / "shard_00000.npy").is_file()
    assert (cfg.work_dir / "gap" / "mt_bench-2x5" / "shard_00000.soft.npz").is_file()
    for bench in gap["benchmarks"].values():
        conf = bench["confidence"]
        # Recall at 1 is the teacher-forced step-0 accuracy, counted the training code's way.
        assert conf["recall"]["1"] == pytest.approx(bench["all"]["step_accuracy"][0])
        assert conf["positions"] == bench["all"]["scored_positions"][0]
        recalls = [conf["recall"][k] for k in draft_gap.RECALL_KS_LABELS]
        assert recalls == sorted(recalls)
        # The bins split the positions: their shares add up to all, their recalls to the whole one.
        assert sum(row["share"] for row in conf["by_confidence"]) == pytest.approx(1.0)
        for k in draft_gap.RECALL_KS_LABELS:
            assert sum(row["share"] * row["recall"][k] for row in conf["by_confidence"] if row["recall"]) == \
                pytest.approx(conf["recall"][k])
        assert 0 < conf["mean_confidence"] <= 1
    assert "| **mt_bench** | mean " in draft_gap.confidence_table(gap)
    held = gap["held_out_data"]["by_source"]
    assert sum(entry["sequences"] for entry in held.values()) == report["train"]["summary"]["val_sequences"]
    # The per-source parts add up to the training code's own validation of the same head.
    fs = FeatureSet.open(cfg.work_dir / "responses", cfg.train.max_seq_len)
    head = load_draft(cfg.output_dir, target.model, "cpu", torch.float32)
    to_draft = draft_vocab.target_to_draft(torch.load(cfg.work_dir / "vocab" / "vocab.pt")["t2d"])
    whole = validate(head, fs, split(fs, cfg.train, cfg.seed), to_draft, cfg.train)
    for step in range(cfg.train.ttt_steps):
        parts = [entry["step_accuracy"][step] * entry["scored_positions"][step] for entry in held.values()]
        assert sum(parts) == pytest.approx(whole.correct[step])
        assert sum(entry["scored_positions"][step] for entry in held.values()) == whole.scored[step]


def test_gap_confidence_recall_finds_the_targets_token_in_the_drafts_top_k(tmp_path):
    target = tiny()
    head = random_head(target, vocab=48)
    to_draft = draft_vocab.target_to_draft(head.t2d)
    prompts = [chat_ids(target.tokenizer, f"question {i}: say something long") for i in range(3)]
    fs = FeatureSet.open(draft_gap.benchmark_answers(target, prompts, 40, tmp_path / "answers"), 512)
    conf = draft_gap.confidence_recall(head, fs, to_draft)
    # Counted again position by position with topk on the draft's step-0 logits.
    batch = collate(fs, range(len(fs)), to_draft)
    mask = batch.step_mask(0)
    with torch.no_grad():
        logits = head.lm_head(head.norm(ttt_forward(head, batch.input_ids, batch.features, 1)[0][mask]))
    labels = batch.labels[mask]
    recalls = []
    for k in draft_gap.RECALL_KS:
        found = [int(label) in logits[row].topk(k).indices.tolist() for row, label in enumerate(labels)]
        recalls.append(sum(found) / len(found))
        assert conf["recall"][str(k)] == pytest.approx(recalls[-1])
    assert 0 < recalls[-1] < 1 and len(set(recalls)) > 2, "too few positions to tell k apart"
    # The confidence is the target's probability of its own greedy token.
    p = batch.soft_probs[mask][:, 0]
    assert conf["mean_confidence"] == pytest.approx(float(p.mean()), rel=1e-6)
    assert conf["positions"] == len(labels)


def test_gap_report_on_unseen_data_scores_every_sequence_and_each_category(tmp_path):
    """A ``--until responses`` work dir (data only, another seed) is held out whole;
    benchmark records are grouped by their category, and the chain α per depth comes
    from the engine's own chain decoding of each group."""
    cfg = tiny_config(tmp_path)
    bench = cfg.benchmark_dir / "mt_bench.jsonl"
    rows = [{"turns": [f"question {i}: what is {i} times {i}?"], "category": ("math", "writing")[i % 2]}
            for i in range(4)]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    target = tiny()
    run_pipeline(target, cfg, until="train")
    assert not (cfg.work_dir / "eval").exists()
    unseen = dataclasses.replace(cfg, work_dir=tmp_path / "unseen", seed=5)
    data = run_pipeline(target, unseen, until="responses")
    assert set(data) == {"self_instruct", "prompts", "responses"} and not (unseen.work_dir / "vocab").exists()
    gap = draft_gap.gap_report(target, draft_gap.GapConfig(cfg.output_dir, unseen.work_dir, cfg.benchmark_dir,
                                                           prompts=4, tokens=5, chain_depth=3, tau_prompts=2,
                                                           benchmark_tau=3,
                                                           ttt_steps=cfg.train.ttt_steps + 2,
                                                           max_seq_len=cfg.train.max_seq_len, vocab_sizes=(8, 32, 95)))
    assert gap["held_out_data"]["all"]["sequences"] == data["responses"]["summary"]["sequences"]
    # Scored on two unrolled steps more than the head trained on (a recipe A/B's common yardstick).
    assert len(gap["held_out_data"]["all"]["step_accuracy"]) == cfg.train.ttt_steps + 2 == 5
    assert "| acc. step 0 / 1 / 2 / 3 / 4 |" in draft_gap.table(gap)
    assert gap["held_out_data"]["tree_tau"]["prompts"] == 2 and gap["held_out_data"]["tree_tau"]["tau"] >= 1.0
    for name in ("mt_bench", "humaneval"):  # the first 3 prompts of each benchmark
        assert gap["benchmarks"][name]["tree_tau"]["prompts"] == 3 and gap["benchmarks"][name]["tree_tau"]["tau"] >= 1.0
    mt_bench = gap["benchmarks"]["mt_bench"]
    assert {c: e["sequences"] for c, e in mt_bench["by_category"].items()} == {"math": 2, "writing": 2}
    assert list(gap["benchmarks"]["humaneval"]["by_category"]) == ["humaneval"]  # no category: the benchmark's name
    for category in ("math", "writing"):
        chain = mt_bench["chain"][category]
        assert chain["prompts"] == 2 and len(chain["alpha_per_depth"]) == 3
    # Coverage grows with the vocabulary: a share, of answer tokens the held-out answers use.
    shares = [gap["vocab_coverage"][size]["mt_bench"] for size in ("8", "32", "95")]
    assert shares == sorted(shares) and 0.0 < shares[0] < 1.0
    assert "| mt_bench / math |" in draft_gap.table(gap)
    assert "τ with EAGLE-2's tree on the first 3 humaneval prompts: " in draft_gap.table(gap)


def test_stage_resumes_partial_work_and_refuses_changed_settings(tmp_path):
    calls = []

    def build(out: Path):
        calls.append(sorted(p.name for p in out.iterdir()))
        if not (out / "shard_0").exists():
            (out / "shard_0").write_text("x")
            raise KeyboardInterrupt  # interrupted after its first shard
        return {"ok": True}

    with pytest.raises(KeyboardInterrupt):
        run_stage(tmp_path, "stage", {"a": 1}, build)
    run_stage(tmp_path, "stage", {"a": 1}, build)
    assert calls == [["settings.json"], ["settings.json", "shard_0"]]  # second run saw the first's shard
    assert (tmp_path / "stage" / "meta.json").is_file() and not (tmp_path / "stage.partial").exists()
    run_stage(tmp_path, "stage", {"a": 1}, build)
    assert len(calls) == 2
    with pytest.raises(SystemExit, match="other settings"):
        run_stage(tmp_path, "stage", {"a": 2}, build)


# Each stage's own keys, in pipeline order: a stage's record is its own keys plus its input's.
STAGE_KEYS = {
    "self_instruct": ["seed", "self_instruct", "request_tokens", "request_temperature", "shard_prompts"],
    "prompts": ["doc_prompts", "template_prompts", "max_prompt_tokens", "benchmarks"],
    "responses": ["response_tokens", "max_answers"],
    "vocab": ["draft_vocab"],
    "train": ["train"],
    "eval": ["eval"],
}


def test_stage_settings_serialise_as_existing_work_dirs_recorded_them():
    """The records that decide whether a finished stage is reused: a change here would
    make every existing work dir redo its stages, so the default run's are spelled out."""
    settings = workspace.stage_settings(PipelineConfig(benchmark_dir=Path("bench")))
    assert json.loads(json.dumps(settings["eval"])) == {
        "seed": 0, "self_instruct": 1500, "request_tokens": 64, "request_temperature": 0.9, "shard_prompts": 256,
        "doc_prompts": 1000, "template_prompts": 1500, "max_prompt_tokens": 256, "benchmarks": "bench",
        "response_tokens": 256, "max_answers": 0, "draft_vocab": 8192,
        "train": {"draft_vocab": 8192, "ttt_steps": 4, "step_decay": 0.8, "epochs": 2, "max_steps": 0,
                  "batch_tokens": 2048, "max_seq_len": 512, "lr": 0.001, "min_lr_ratio": 0.1, "warmup_steps": 50,
                  "weight_decay": 0.0, "grad_clip": 0.5, "val_fraction": 0.02, "checkpoint_every": 200},
        "eval": {"prompts": 40, "max_new_tokens": 128, "tree": {"top_k": 10, "max_depth": 6, "num_verify_tokens": 60},
                 "chain_depth": 6},
    }
    keys: list[str] = []
    for stage, own in STAGE_KEYS.items():
        keys += own
        assert settings[stage] == {key: settings["eval"][key] for key in keys}, stage
    # Late fields appear only when set, each in the first stage it changes.
    base = PipelineConfig(benchmark_dir=Path("bench"))
    late = dataclasses.replace(base, init_head=Path("head"),
                               data=dataclasses.replace(base.data, task_prompts=5, soft_top_k=4),
                               train=dataclasses.replace(base.train, vocab_swap=8, vocab_grow=3, soft_labels=0.5,
                                                                bf16_autocast=True))
    added = {stage: {key: value for key, value in record.items() if settings[stage].get(key) != value}
             for stage, record in workspace.stage_settings(late).items()}
    assert added["prompts"] == {"task_prompts": 5}
    assert added["responses"] == {"task_prompts": 5, "soft_top_k": 4}
    assert added["vocab"] == {"task_prompts": 5, "soft_top_k": 4, "init_head": "head", "vocab_swap": 8,
                              "vocab_grow": 3}
    assert added["train"]["train"] == {**settings["train"]["train"], "vocab_swap": 8, "vocab_grow": 3,
                                       "soft_labels": 0.5, "bf16_autocast": True}


def test_training_resumes_from_checkpoint(tmp_path, monkeypatch):
    """A run stopped after its checkpoint continues to the same weights as one that never stopped."""
    cfg = tiny_config(tmp_path)
    target = tiny()
    work = cfg.work_dir
    work.mkdir()
    stages = {}
    for name, build in (("self_instruct", lambda o: build_self_instruct(target, cfg, o)),
                        ("prompts", lambda o: build_prompts(target, cfg, stages["self_instruct"], o)),
                        ("responses", lambda o: build_responses(target, cfg, stages["prompts"], o)),
                        ("vocab", lambda o: build_vocab(target, cfg, stages["responses"], o))):
        stages[name] = run_stage(work, name, {}, build)
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir(), part.mkdir()
    build_train(target, cfg, stages["vocab"], stages["responses"], full)
    lr_at = train_stage.lr_at

    def interrupt_after_checkpoint(step, total, tc):
        if step == cfg.train.checkpoint_every:
            raise KeyboardInterrupt
        return lr_at(step, total, tc)

    monkeypatch.setattr(train_stage, "lr_at", interrupt_after_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        build_train(target, cfg, stages["vocab"], stages["responses"], part)
    monkeypatch.setattr(train_stage, "lr_at", lr_at)
    summary = build_train(target, cfg, stages["vocab"], stages["responses"], part)
    assert summary["steps"] == cfg.train.max_steps
    want, got = torch.load(full / "draft.pt"), torch.load(part / "draft.pt")
    for key in want:
        torch.testing.assert_close(got[key], want[key])


def test_bf16_autocast_trains_in_bf16_and_validates_in_fp32(tmp_path, monkeypatch):
    """--bf16-autocast: every training forward runs under CPU bf16 autocast, the held-out
    validation never does, the weights stay fp32, and the train stage records the setting
    (an fp32 run's settings do not name it, so existing work dirs stay valid)."""
    base = tiny_config(tmp_path)
    cfg = dataclasses.replace(base, train=dataclasses.replace(base.train, bf16_autocast=True))
    seen: dict[str, list[bool]] = {"train": [], "validate": []}
    loss_of = train_stage.ttt_loss

    def recording(draft, batch, steps, decay, soft=0.0):
        seen["validate" if not torch.is_grad_enabled() else "train"].append(torch.is_autocast_enabled("cpu"))
        return loss_of(draft, batch, steps, decay, soft)

    monkeypatch.setattr(train_stage, "ttt_loss", recording)
    run_pipeline(tiny(), cfg, until="train")
    assert len(seen["train"]) == cfg.train.max_steps and all(seen["train"])
    assert seen["validate"] and not any(seen["validate"])
    weights = [t for t in torch.load(cfg.work_dir / "train" / "draft.pt").values() if t.is_floating_point()]
    assert weights and all(t.dtype == torch.float32 for t in weights)
    assert stage_settings(cfg.work_dir, "train")["train"]["bf16_autocast"] is True
    assert "bf16_autocast" not in workspace.stage_settings(base)["train"]["train"]


def test_bf16_autocast_flag_needs_bf16_units(monkeypatch, capsys):
    from sglang_cast.training import cli
    monkeypatch.setattr(cli, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    with pytest.raises(SystemExit):
        parse_args(["--bf16-autocast"])
    assert "--bf16-autocast: this CPU has neither AVX512-BF16 nor AMX" in capsys.readouterr().err
    monkeypatch.setattr(cli, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert parse_args(["--bf16-autocast"])[0].train.bf16_autocast
    assert not parse_args([])[0].train.bf16_autocast


def test_help_explains_every_flag():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "train_draft.py"), "--help"],
                            capture_output=True, text=True, check=True)
    for flag in [*FLAGS, "--quick"]:
        assert flag in result.stdout
    cfg, _ = parse_args(["--quick", "--eval-prompts", "3", "--lr", "1e-3"])
    assert cfg.eval.prompts == 3 and cfg.train.lr == 1e-3 and cfg.train.max_steps == 6
    with pytest.raises(SystemExit):
        parse_args(["--max-answers", "-1"])
    assert parse_args(["--until", "responses"])[1].until == "responses" and parse_args([])[1].until == "eval"
    with pytest.raises(SystemExit):
        parse_args(["--until", "vocab"])


@pytest.mark.parametrize("argv, message", [
    (["--held-out", "{tmp}", "--prompts", "0"], "argument --prompts: expected an integer >= 1, got '0'"),
    (["--held-out", "{tmp}", "--chain-depth", "-1"], "argument --chain-depth: expected an integer >= 0, got '-1'"),
    (["--held-out", "{tmp}", "--ttt-steps", "0"], "argument --ttt-steps: expected an integer >= 1, got '0'"),
    (["--held-out", "{tmp}"], "has no finished prompts stage (build one with `tools/train_draft.py --until responses"),
])
def test_gap_flags_are_refused_in_one_line_naming_the_flag(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        draft_gap.main(["--head", str(tmp_path)] + [a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and "Traceback" not in err


@pytest.mark.slow
def test_quick_mode_on_the_real_model(tmp_path):
    work = tmp_path / "work"
    # One thread: on a CPU shared with other jobs two OpenMP threads spin-wait and crawl.
    subprocess.run([sys.executable, str(ROOT / "tools" / "train_draft.py"), "--quick", "--threads", "1",
                    "--work-dir", str(work), "--output", str(tmp_path / "head")], check=True, timeout=600)
    from sglang_cast.models import load_target

    target, _, _ = load_target(None, "cpu", torch.float32)
    head = load_draft(tmp_path / "head", target, "cpu", torch.float32)
    assert head.output_vocab_size == 1024
    report = json.loads((work / "report.json").read_text())
    assert report["prompts"]["summary"]["kept"] > 0
