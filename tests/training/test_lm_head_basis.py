"""`--lm-head-basis`: the LM head trained as W + B·P over the target's output rows, folded at export."""

from __future__ import annotations

import dataclasses

import torch
from safetensors.torch import load_file

from sglang_cast.models import load_draft
from sglang_cast.training.lm_head_basis import BasisLmHead, folded_state, target_basis, with_basis
from sglang_cast.training.pipeline import run_pipeline
from tests.support.training import random_head, tiny, tiny_config


def test_basis_head_starts_as_the_head_was_and_folds_into_one_matrix():
    target = tiny()
    draft = random_head(target)
    x = torch.randn(5, draft.lm_head.weight.shape[1])
    before = draft.lm_head(x)
    with_basis(draft, target.model.lm_head_weight, 1.0)
    assert isinstance(draft.lm_head, BasisLmHead)
    torch.testing.assert_close(draft.lm_head(x), before)  # P starts at zero
    with torch.no_grad():
        draft.lm_head.proj.normal_()
    state = folded_state(draft)
    plain = random_head(target)
    plain.load_state_dict(state, strict=True)  # the public layout: lm_head.weight only
    torch.testing.assert_close(plain.lm_head(x), draft.lm_head(x))


def test_basis_rows_are_the_targets_rows_of_the_draft_tokens_scaled():
    target = tiny()
    draft = random_head(target)
    basis = target_basis(draft, target.model.lm_head_weight, 2.0)
    ids = draft.draft_to_target(torch.arange(basis.shape[0]))
    rows = target.model.lm_head_weight[ids]
    torch.testing.assert_close(basis, rows * (2.0 / rows.shape[1] ** 0.5 / rows.norm(dim=1, keepdim=True)))


def test_a_token_never_labelled_still_learns_through_the_shared_projection():
    """What the basis is for: a plain LM head leaves a row no label reaches where it was;
    with the basis, every token's labels move it."""
    target = tiny()
    x = torch.randn(64, target.model.config.hidden_size)
    labels = torch.randint(0, 10, (64,))  # draft tokens 0-9 only; token 20 is never a label
    moved = {}
    for basis in (False, True):
        draft = random_head(target)
        if basis:
            with_basis(draft, target.model.lm_head_weight, 1.0)
        old = draft.lm_head.weight.detach().clone()
        opt = torch.optim.SGD(draft.lm_head.parameters(), lr=0.1)
        torch.nn.functional.cross_entropy(draft.lm_head(x)[:, :10], labels).backward()
        opt.step()
        moved[basis] = float((draft.lm_head.weight.detach()[20] - old[20]).abs().max())
    assert moved[False] == 0.0
    assert moved[True] > 0.0


def test_training_with_the_basis_exports_a_public_layout_head(tmp_path):
    target = tiny()
    base = tiny_config(tmp_path)
    cfg = dataclasses.replace(base, train=dataclasses.replace(base.train, lm_head_basis=1.0, lr=1e-2))
    run_pipeline(target, cfg)
    trained = torch.load(cfg.work_dir / "train" / "draft.pt")
    assert "lm_head.weight" in trained and not any(k.startswith("lm_head.") and k != "lm_head.weight"
                                                   for k in trained)
    assert "lm_head.weight" in load_file(cfg.output_dir / "model.safetensors")
    head = load_draft(cfg.output_dir, target.model, "cpu", torch.float32)
    assert head.lm_head.weight.shape == (32, target.model.config.hidden_size)
