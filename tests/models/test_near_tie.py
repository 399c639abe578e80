"""The measured near-tie judge (sglang_cast/models/numerics.py): a divergence passes
only when both tokens lie within the two kernel paths' measured spread of the top."""

from __future__ import annotations

import copy

import pytest
import torch

from sglang_cast.models import KVCache, causal_tree_mask
from sglang_cast.models.numerics import (
    KernelPaths,
    first_divergence,
    judge_by_kernel_paths,
    judge_paths,
    kernel_paths,
    kernel_paths_per_position,
    stepwise_logits,
)
from support.models import commit_all, make_pair

VOCAB = 96


def agreeing_paths(seed: int, noise: float) -> KernelPaths:
    """Random logits and a second path that differs from them by at most ``noise``."""
    gen = torch.Generator().manual_seed(seed)
    verify = torch.randn(VOCAB, generator=gen) * 4
    return KernelPaths(verify, verify + (torch.rand(VOCAB, generator=gen) * 2 - 1) * noise)


def test_a_planted_token_half_a_logit_behind_is_no_near_tie_when_the_paths_agree_to_1e_3():
    paths = agreeing_paths(0, 1e-3)
    top = int(paths.verify.argmax())
    planted = paths.verify.clone()
    second = int(planted.topk(2).indices[1])
    planted[second] = planted[top] - 0.5  # the wrong token: 0.5 logits behind the top in both paths
    paths = KernelPaths(planted, planted + (paths.stepwise - paths.verify))
    verdict = judge_paths(paths, top, second)
    assert paths.spread <= 1e-3 and verdict.tolerance <= 2e-3
    assert verdict.gap == pytest.approx(0.5, abs=2e-3) and not verdict.near_tie


def test_a_flip_the_two_paths_reproduce_is_always_a_near_tie():
    """Verify ranks ``a`` first, stepwise ``b``: the gaps sum to |Δ_a - Δ_b| <= 2·spread."""
    for seed in range(20):
        paths = agreeing_paths(seed, 0.05)
        a, b = paths.verify.topk(2).indices.tolist()
        stepwise = paths.stepwise.clone()
        stepwise[b] = stepwise[a] + 0.01  # b on top in the stepwise path
        flipped = KernelPaths(paths.verify, stepwise)
        verdict = judge_paths(flipped, b, a)
        assert verdict.near_tie and verdict.gap <= verdict.tolerance, (seed, verdict)


def test_a_third_token_far_on_top_makes_no_near_tie_of_the_two():
    verify = torch.zeros(VOCAB)
    verify[:3] = torch.tensor([3.0, 1.0, 1.0001])
    verdict = judge_paths(KernelPaths(verify, verify + 1e-4), 1, 2)
    assert verdict.gap == pytest.approx(2.0, abs=1e-3) and not verdict.near_tie


def test_real_fp32_vs_bf16_ties_pass_and_a_planted_token_fails():
    """The same tokens through the tiny model in fp32 and in bf16: wherever the two
    precisions' argmaxes differ, the judge calls it a near-tie; at the same positions the
    token ranked last is none (the tiny random model's top five often lie within 0.2
    logits, inside bf16's measured spread there, so a near-top token may rightly pass)."""
    _, fp32 = make_pair("llama", seed=6)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    flips = 0
    for seed in range(4):
        ids = torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(seed)).tolist()
        with torch.no_grad():
            a, b = (m.logits(m.causal_hidden(ids)).float() for m in (fp32, bf16))
        for pos in (a.argmax(-1) != b.argmax(-1)).nonzero().flatten().tolist():
            paths = KernelPaths(a[pos], b[pos])
            assert judge_paths(paths, int(a[pos].argmax()), int(b[pos].argmax())).near_tie
            assert not judge_paths(paths, int(a[pos].argmax()), int(a[pos].argmin())).near_tie
            flips += 1
    assert flips >= 2  # seeds 0 and 2 flip at 3 positions (measured); the check ran


def test_kernel_paths_of_the_tiny_model():
    """fp32: one forward and token by token agree to ~1e-6; bf16 to ~0.1; the stepwise
    path is plain decoding (its argmax chain is the model's greedy continuation)."""
    _, fp32 = make_pair("llama", seed=6)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    ids = torch.randint(0, VOCAB, (20,), generator=torch.Generator().manual_seed(1)).tolist()
    exact = kernel_paths(fp32, ids)
    assert exact.spread < 1e-4
    assert torch.allclose(exact.stepwise, fp32.logits(fp32.causal_hidden(ids)[-1]), atol=1e-4)
    assert 1e-3 < kernel_paths(bf16, ids).spread < 1.0
    with pytest.raises(ValueError, match="token_ids"):
        kernel_paths(fp32, [])
    assert stepwise_logits(fp32, ids[:1]).shape == (VOCAB,)


def test_judge_by_kernel_paths_on_a_planted_continuation():
    _, fp32 = make_pair("llama", seed=6)
    prompt = [5, 17, 33]
    logits = fp32.logits(fp32.causal_hidden(prompt)[-1])
    greedy = [int(logits.argmax())]
    assert judge_by_kernel_paths(fp32, prompt, greedy, greedy) is None
    planted = [int(logits.topk(2).indices[1])]
    verdict = judge_by_kernel_paths(fp32, prompt, greedy, planted)
    gap = float(logits.max() - logits[planted[0]])
    assert verdict.gap == pytest.approx(gap, abs=1e-4) and verdict.tolerance < 1e-4
    assert verdict.near_tie is (gap <= verdict.tolerance)


def test_bad_inputs_name_the_field():
    paths = agreeing_paths(0, 1e-3)
    with pytest.raises(ValueError, match="got: token 96"):
        judge_paths(paths, 0, 96)
    with pytest.raises(ValueError, match="stepwise: shape"):
        judge_paths(KernelPaths(paths.verify, paths.verify[:10]), 0, 1)
    with pytest.raises(ValueError, match="verify: expected one position"):
        judge_paths(KernelPaths(paths.verify[None], paths.verify[None]), 0, 1)


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3, 4]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1


def test_kernel_paths_at_every_position_are_the_two_forwards_in_bf16():
    """`kernel_paths_per_position` is one 12-token forward and 12 one-token forwards
    (built by hand here), position by position; at every position the judge accepts the
    two paths' own argmaxes and rejects the lowest-ranked token."""
    _, model = make_pair("llama", seed=6)  # on CUDA where there is one
    model = model.to(torch.bfloat16)
    device = model.embed_tokens.weight.device
    tokens = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(7)).to(device)
    slots = torch.tensor([0], device=device)
    with torch.no_grad():
        cache = KVCache.for_model(model.config, 1, 12, device, torch.bfloat16)
        out = model(tokens, torch.arange(12, device=device)[None], cache, slots, causal_tree_mask(1, 12, device))
        batched = model.logits(out.hidden)[0]
        cache = KVCache.for_model(model.config, 1, 12, device, torch.bfloat16)
        stepped = []
        for i in range(12):
            out = model(tokens[:, i : i + 1], torch.tensor([[i]], device=device), cache, slots,
                        causal_tree_mask(1, 1, device))
            commit_all(cache, slots, 1)
            stepped.append(model.logits(out.hidden)[0, 0])
    paths = kernel_paths_per_position(model, tokens[0].tolist())
    assert len(paths) == 12
    for position, (got, verify, stepwise) in enumerate(zip(paths, batched, stepped)):
        assert torch.equal(got.verify, verify) and torch.equal(got.stepwise, stepwise), position
        top_verify, top_stepwise = int(verify.argmax()), int(stepwise.argmax())
        assert judge_paths(got, top_verify, top_stepwise).near_tie, position
        assert not judge_paths(got, top_verify, int(verify.argmin())).near_tie, position
    # A GPU's small-query attention kernels round the two paths differently in bf16; a CPU's
    # fused kernel gives a chain's rows the one-token forwards' logits bit for bit (attention.py).
    assert (max(p.spread for p in paths) > 0) == (device.type != "cpu")
    assert torch.equal(kernel_paths(model, tokens[0].tolist()).stepwise, paths[-1].stepwise)
    for empty in (kernel_paths_per_position, stepwise_logits):
        with pytest.raises(ValueError, match="token_ids: at least one token"):
            empty(model, [])
