"""The depth rule's memory (docs/design/cast.md §4, docs/cast_decisions.md D9): FIFOs
per batch-size bucket, and a layer switched off by a bad stretch coming back."""

import pytest
import torch

from sglang_cast.cast import BucketSettings, CostModel, PolicySettings, Thresholds, TreeShape, make_policy

SHAPE = TreeShape(top_k=2, max_depth=4, num_verify_tokens=8)
LAYER1 = torch.tensor([[0.8, 0.1]], dtype=torch.float64)


def costs() -> CostModel:
    return CostModel.linear(1.0, 10.0, draft_ratio=0.3, max_tokens=16)


def policy_needing_half(name: str, fifo_len: int = 4, probe_every: int = 6):
    """A policy whose C2 drafts layer 2 iff ``mean(A_1) >= 0.5`` (C1 keeps everything)."""
    probe = make_policy(name, PolicySettings.single(costs(), SHAPE, Thresholds(1e-9, 1e-9, 1e-9), fifo_len))
    plan = probe.begin(1, 10)
    plan.keep(1, LAYER1)
    c2 = 0.5 * plan.utility[0] / plan.draft_cost[0]
    policy = make_policy(name, PolicySettings.single(costs(), SHAPE, Thresholds(1e-9, c2, 1e-9), fifo_len))
    policy.depth_probe_every = probe_every
    return policy


def depth_of_iteration(policy, ratio: float, batch_size: int = 1) -> int:
    """Draft one iteration whose layer i + 1 values are layer i's times ``ratio``
    (so every observed φ equals ``ratio``); the number of layers drafted."""
    plan = policy.begin(batch_size, 10)
    values, layer = LAYER1.expand(batch_size, -1), 1
    while True:
        plan.keep(layer, values)
        if not plan.grow(layer):
            return layer
        values, layer = values * ratio, layer + 1


def test_a_layer_switched_off_by_a_bad_stretch_comes_back_when_acceptance_recovers():
    policy = policy_needing_half("cast")
    assert depth_of_iteration(policy, 0.9) > 1
    bad = [depth_of_iteration(policy, 0.001) for _ in range(60)]
    off = bad[4:]  # after A_1 (fifo_len 4) has filled with bad ratios
    assert off.count(1) >= len(off) * 5 // 6  # switched off, but for the probes ...
    assert 1 <= sum(d > 1 for d in off) <= len(off) // policy.depth_probe_every + 1  # ... once per 6 stops
    good = [depth_of_iteration(policy, 0.9) for _ in range(40)]
    back = next(i for i in range(len(good)) if all(d > 1 for d in good[i:]))
    assert back <= 4 * policy.depth_probe_every  # at most fifo_len probes to refill A_1
    assert policy.depth_ratios().mean(1) == pytest.approx(0.9)


def test_without_probes_the_same_stretch_switches_the_layer_off_for_good():
    """What the probes fix: φ_1 is observed only when layer 2 is drafted."""
    policy = policy_needing_half("cast", probe_every=10**9)
    for _ in range(10):
        depth_of_iteration(policy, 0.001)
    assert all(depth_of_iteration(policy, 0.9) == 1 for _ in range(100))


def test_goodput_probes_a_switched_off_layer_too():
    policy = make_policy("goodput", PolicySettings.single(costs(), SHAPE, fifo_len=2))
    policy.depth_probe_every = 5
    for _ in range(10):
        depth_of_iteration(policy, 1e-6)
    assert policy.depth_ratios().mean(1) < 1e-3
    depths = [depth_of_iteration(policy, 0.95) for _ in range(30)]
    assert depths[-1] > 1 and policy.depth_ratios().mean(1) == pytest.approx(0.95)


def test_predict_depth_foresees_a_probe_without_counting_it():
    policy = policy_needing_half("cast", probe_every=3)
    for _ in range(8):
        depth_of_iteration(policy, 0.001)
    while True:  # advance to the iteration just before a probe
        plan = policy.begin(1, 10)
        if plan.depth_ratios.probe_due(1):
            break
        assert plan.predict_depth(LAYER1) == 1
        assert depth_of_iteration(policy, 0.001) == 1
    assert plan.predict_depth(LAYER1) > 1 and plan.predict_depth(LAYER1) > 1  # asking twice counts nothing
    assert depth_of_iteration(policy, 0.001) > 1


def two_buckets(small_fifo: int = 2) -> PolicySettings:
    return PolicySettings(buckets=(BucketSettings(1, SHAPE, Thresholds(1e-9, 1e-9, 1e-9), fifo_len=8),
                                   BucketSettings(4, SHAPE, Thresholds(1e-9, 1e-9, 1e-9), fifo_len=small_fifo)),
                          costs=costs())


def test_buckets_keep_their_own_fifos_and_do_not_truncate_each_other():
    policy = make_policy("cast", two_buckets())
    for i in range(8):
        depth_of_iteration(policy, 0.1 + 0.1 * i)  # batch 1: eight distinct ratios into A_1
    history = policy.depth_ratios(1).history(1)
    assert len(history) == 8
    depth_of_iteration(policy, 0.05, batch_size=4)  # one iteration of the fifo_len-2 bucket
    assert policy.depth_ratios(1).history(1) == history
    assert policy.depth_ratios(4).history(1) == (1.0, pytest.approx(0.05))
    assert policy.depth_ratios(3) is policy.depth_ratios(4) is not policy.depth_ratios(1)
    policy.reconfigure(two_buckets(small_fifo=1))  # only the batch-4 bucket's fifo_len changes
    depth_of_iteration(policy, 0.07, batch_size=4)
    assert policy.depth_ratios(1).history(1) == history
    assert policy.depth_ratios(4).history(1) == (pytest.approx(0.07),)
