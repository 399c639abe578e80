import numpy as np
import pytest
import torch

from sglang_cast.cast import (BucketSettings, ContextLookup, CostModel, CostTable, PolicySettings, RecordingExpander,
                              Thresholds, TraceIteration, TreeShape, grow_tree, make_policy, replay, replay_iteration,
                              select_verified, verify_greedy)
from support.synthetic import PathModel

SHAPE = TreeShape(top_k=4, max_depth=5, num_verify_tokens=16)


def steep_costs() -> CostModel:
    n = torch.arange(1, 65, dtype=torch.float64)
    target = CostTable(512, 4, (1, 8), torch.stack([10 + 0.6 * n**1.2, 30 + 2.0 * n**1.2]).unsqueeze(1).repeat(1, 4, 1))
    draft = CostTable(512, 4, (1, 8), torch.stack([1 + 0.2 * n, 2 + 0.5 * n]).unsqueeze(1).repeat(1, 4, 1))
    return CostModel(target=target, draft=draft)


def settings(c=(0.3, 0.5, 0.8)) -> PolicySettings:
    return PolicySettings.single(steep_costs(), shape=SHAPE, thresholds=Thresholds(*c), fifo_len=4)


def live_iteration(policy, model, roots, context):
    plan = policy.begin(roots.numel(), context)
    tree = grow_tree(plan, model, roots)
    vtree = select_verified(tree, plan.verify_count(tree))
    result = verify_greedy(vtree, model.argmax_for(tree, vtree.node_ids))
    return result.num_accepted, plan


def record_iteration(model, roots, context):
    plan = make_policy("eagle2", settings()).begin(roots.numel(), context)
    recorder = RecordingExpander(model, plan.top_k)
    tree = grow_tree(plan, recorder, roots)
    all_nodes = torch.arange(tree.size).expand(tree.batch_size, -1)
    return recorder.finish(tree, torch.full((roots.numel(),), context), model.argmax_for(tree, all_nodes))


@pytest.mark.parametrize("name", ["eagle2", "cast", "goodput", "cast-rerank", "cast-rerank-depth",
                                  "cast-depth-breadth"])
def test_replay_reproduces_live_accepted_lengths(name):
    model = PathModel(vocab=10, seed=3, agreement=0.7)
    live, replayed = make_policy(name, settings()), make_policy(name, settings())
    exact = 0
    for it in range(25):
        roots = torch.tensor([it % 10, (3 * it + 1) % 10, (7 * it + 2) % 10])
        accepted, plan = live_iteration(live, model, roots, context=100 + it)
        outcome = replay_iteration(record_iteration(model, roots, 100 + it), replayed)
        if outcome.unrecorded == 0:
            exact += 1
            assert outcome.num_accepted == accepted
            assert outcome.verified == plan.verified
    assert exact >= 20


def test_eagle2_grows_the_fixed_tree():
    model = PathModel()
    plan = make_policy("eagle2", settings()).begin(2, 10)
    tree = grow_tree(plan, model, torch.tensor([1, 2]))
    # K kept per layer, and every drafted child in the rerank pool: K + (H-1)·K² nodes
    assert plan.kept == [SHAPE.top_k] * SHAPE.max_depth
    assert tree.size == 1 + SHAPE.top_k + (SHAPE.max_depth - 1) * SHAPE.top_k**2 == 1 + SHAPE.pool_size
    assert plan.verify_count(tree) == SHAPE.num_verify_tokens - 1


def test_cast_prunes_where_costs_are_steep_and_records_depth_ratios():
    model = PathModel(seed=5)
    policy = make_policy("cast", settings(c=(2.0, 3.0, 2.0)))
    plan = policy.begin(1, 10)
    tree = grow_tree(plan, model, torch.tensor([4]))
    assert tree.size < 1 + SHAPE.pool_size
    assert plan.verify_count(tree) <= tree.size - 1
    if len(plan.kept) >= 2:
        assert len(policy.depth_ratios(1).history(1)) == 2  # initial 1.0 plus one observed ratio


def grown(name, c, roots=(4, 7)):
    plan = make_policy(name, settings(c=c)).begin(len(roots), 10)
    tree = grow_tree(plan, PathModel(seed=5), torch.tensor(roots))
    return plan, tree, plan.verify_count(tree)


def test_ablation_switches_off_one_component_at_a_time():
    steep = (3.0, 3.0, 3.0)  # prunes everything CAST can prune on these costs
    full_tree = 1 + SHAPE.pool_size
    # rerank only: EAGLE-2's full tree, but fewer nodes verified than EAGLE-2's budget
    plan, tree, verified = grown("cast-rerank", steep)
    assert tree.size == full_tree and plan.kept == [SHAPE.top_k] * SHAPE.max_depth
    assert verified < SHAPE.num_verify_tokens - 1
    # + depth pruning: full width per layer, fewer layers
    plan, tree, _ = grown("cast-rerank-depth", steep)
    assert set(plan.kept) == {SHAPE.top_k} and len(plan.kept) < SHAPE.max_depth
    # + breadth pruning (= CAST): narrower layers than top-k
    plan, _, cast_verified = grown("cast", steep)
    assert min(plan.kept) < SHAPE.top_k
    # depth + breadth pruning without the rerank: CAST's tree, EAGLE-2's verify budget
    plan, tree, verified = grown("cast-depth-breadth", steep)
    assert min(plan.kept) < SHAPE.top_k and len(plan.kept) < SHAPE.max_depth
    assert verified == min(tree.size - 1, SHAPE.num_verify_tokens - 1) and verified > cast_verified
    # with negligible thresholds every variant is EAGLE-2
    eagle2 = grown("eagle2", (1.0, 1.0, 1.0))
    for name in ("cast-rerank", "cast-rerank-depth", "cast-depth-breadth", "cast"):
        plan, tree, verified = grown(name, (1e-9, 1e-9, 1e-9))
        assert (tree.size, verified) == (eagle2[1].size, eagle2[2])


def test_reconfigure_takes_effect_at_next_iteration_only():
    policy = make_policy("cast", settings(c=(0.1, 0.1, 0.1)))
    plan = policy.begin(1, 10)
    policy.reconfigure(settings(c=(50.0, 50.0, 50.0)))
    assert plan.bucket.thresholds.c1 == 0.1  # the running iteration keeps its snapshot
    assert policy.begin(1, 10).bucket.thresholds.c1 == 50.0


def test_vanilla_replay_commits_one_token_per_sequence_at_decode_cost():
    model = PathModel()
    trace = record_iteration(model, torch.tensor([1, 2]), 50)
    result = replay([trace], make_policy("vanilla", settings()))
    assert result.tokens == 2 and result.outcomes[0].verified == 0
    assert result.time_ms == pytest.approx(steep_costs().target(2, 50, 1))


def test_trace_round_trips_through_a_plain_dict():
    trace = record_iteration(PathModel(), torch.tensor([1, 2]), 50)
    again = TraceIteration.from_dict(trace.to_dict())
    assert np.array_equal(again.tree.depths, trace.tree.depths)
    assert torch.equal(again.verdicts(), trace.verdicts())
    policy = make_policy("cast", settings())
    assert replay_iteration(again, policy).num_accepted == replay_iteration(trace, make_policy("cast", settings())).num_accepted


def test_a_buckets_lookup_branch_is_validated_and_round_trips():
    """``lookup_depth`` is a bucket's own knob: stored in profiles, 0 (no branch) when a
    profile predates it, refused outside [0, 32] with the field named."""
    bucket = BucketSettings(4, SHAPE, lookup_depth=6)
    assert BucketSettings.from_dict(bucket.to_dict()) == bucket and bucket.lookup == ContextLookup(depth=6)
    assert BucketSettings.from_dict({"max_batch_size": 2}).lookup is None
    for bad in (-1, 33, 2.5, True):
        with pytest.raises(ValueError, match=r"profile.buckets\[0\].lookup_depth must be an integer in \[0, 32\]"):
            BucketSettings.from_dict({"max_batch_size": 2, "lookup_depth": bad}, "profile.buckets[0]")
    both = PolicySettings(buckets=(BucketSettings(1, SHAPE), bucket), costs=steep_costs()).with_lookup(3)
    assert [b.lookup_depth for b in both.buckets] == [3, 3]


def test_unknown_policy_name_is_a_clear_error():
    with pytest.raises(ValueError, match="policy must be one of"):
        make_policy("medusa", settings())


def test_a_bucket_with_speculation_off_plans_plain_decoding_and_round_trips():
    bucket = BucketSettings(4, SHAPE, speculate=False)
    assert BucketSettings.from_dict(bucket.to_dict()) == bucket
    assert BucketSettings.from_dict({"max_batch_size": 2}).speculate is True
    with pytest.raises(ValueError, match=r"profile.buckets\[1\].speculate must be true or false, got 'no'"):
        BucketSettings.from_dict({"max_batch_size": 2, "speculate": "no"}, "profile.buckets[1]")
    policy = make_policy("cast", PolicySettings(buckets=(BucketSettings(1, SHAPE), bucket), costs=steep_costs()))
    assert policy.begin(1, 10).max_depth == SHAPE.max_depth
    plan = policy.begin(3, 10)
    assert plan.max_depth == 0 and plan.verify_count(grow_tree(plan, PathModel(), torch.tensor([1, 2, 3]))) == 0
    static = make_policy("eagle2", PolicySettings(buckets=(BucketSettings(1, SHAPE), bucket), costs=steep_costs()))
    assert static.begin(3, 10).max_depth == SHAPE.max_depth  # the EAGLE-2 baseline always drafts
