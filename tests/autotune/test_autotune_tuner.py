"""The replay tuner on synthetic traces with a planted optimum.

The draft always proposes token 0 first (probability 0.9) and the target agrees
with it down to depth ``ACCEPTED`` and never below, so the best tree is a chain
of exactly ``ACCEPTED`` nodes: wider trees pay verify cost for nothing, deeper
ones pay draft cost for nothing, and thresholds high enough to cut the chain
lose tokens.  An exhaustive grid over a tiny space confirms where the optimum
is; Optuna must reach it with a fraction of the evaluations.
"""

import pytest
import torch

from autotune.store import Store
from autotune.tuner import assign_buckets, even_sample, replay_bucket, tune_bucket, replay_filter
from sglang_cast.cast import BucketSettings, CostModel, OverheadTable, PolicySettings, Thresholds, TreeShape
from support.autotune import ACCEPTED, CHAIN_GRID, chain_costs, chain_trace

def test_optuna_reaches_the_planted_optimum_with_a_tenth_of_the_evaluations(tmp_path):
    traces = [chain_trace()]  # every iteration of this workload is the same
    costs = chain_costs()
    scored = [(replay_bucket(traces, s, costs).tokens_per_s, s) for s in CHAIN_GRID.settings(1)]
    grid_best, best = max(scored, key=lambda item: item[0])
    # The exhaustive grid confirms the plant: a top-1 chain of exactly ACCEPTED nodes,
    # clearly ahead of every configuration with another depth.
    assert (best.shape.top_k, best.shape.max_depth) == (1, ACCEPTED)
    assert replay_bucket(traces, best, costs).tau == pytest.approx(ACCEPTED + 1)
    assert grid_best > 1.05 * max(v for v, s in scored if s.shape.max_depth != ACCEPTED)

    trials = len(CHAIN_GRID) // 10
    result = tune_bucket(Store(tmp_path / "t.db"), "planted-b1", traces, costs, 1, CHAIN_GRID.space(), trials,
                         seed=0, progress=False)
    assert result.trials == trials
    assert result.tokens_per_s >= 0.97 * grid_best
    assert result.settings.shape.max_depth == ACCEPTED and result.tau == pytest.approx(ACCEPTED + 1)
    assert result.baselines["vanilla"] < result.tokens_per_s
    assert replay_filter(result) is result  # a tree that pays is published as tuned


def test_a_bucket_where_no_tree_pays_is_published_with_speculation_off(tmp_path):
    traces = [chain_trace(accepted=0)]  # the target rejects every draft token
    searched = tune_bucket(Store(tmp_path / "t.db"), "useless-b1", traces, chain_costs(), 1, CHAIN_GRID.space(), 6,
                           progress=False)
    assert searched.settings.speculate is True and searched.tokens_per_s < searched.baselines["vanilla"]
    result = replay_filter(searched)
    assert result.settings.speculate is False and result.summary()["speculate"] is False
    assert result.off_by == "replay" and result.summary()["speculation_off_by"] == "replay"
    assert result.tokens_per_s == result.baselines["vanilla"] and result.tau == 1.0
    assert replay_bucket(traces, result.settings, chain_costs()).tokens_per_s == pytest.approx(result.tokens_per_s)


def test_host_work_per_drafted_layer_makes_replay_choose_a_shallower_tree():
    """The planted chain pays to depth ACCEPTED on forwards alone; with 10 ms of host
    work per drafted layer (a forward costs ~1-2.5 ms here) each extra layer costs more
    than the token it adds, so replay with the overhead table picks depth 1."""
    traces = [chain_trace()]
    base = chain_costs()
    host = OverheadTable(1024, 1, (1, 4), torch.tensor([0.0, 0.0, 10.0, 0.0]).expand(2, 1, 4).clone())
    for costs, depth in ((base, ACCEPTED), (CostModel(base.target, base.draft, host), 1)):
        scored = [(replay_bucket(traces, s, costs).tokens_per_s, s) for s in CHAIN_GRID.settings(1)]
        best = max(scored, key=lambda item: item[0])[1]
        assert (best.shape.top_k, best.shape.max_depth) == (1, depth)


def test_the_incumbent_tree_is_one_of_the_first_trials_and_is_reported_beside_the_pick(tmp_path):
    """With three trials (the two corners and the incumbent) the study replays the
    incumbent, here the planted optimum, so its pick is no slower than it."""
    traces, costs = [chain_trace()], chain_costs()
    scored = [(replay_bucket(traces, s, costs).tokens_per_s, s) for s in CHAIN_GRID.settings(1)]
    optimum_rate, optimum = max(scored, key=lambda item: item[0])
    space = CHAIN_GRID.space()
    assert space.params_of(optimum) is not None
    result = tune_bucket(Store(tmp_path / "t.db"), "incumbent-b1", traces, costs, 1, space, 3, progress=False,
                         incumbent=optimum)
    assert result.baselines["incumbent"] == pytest.approx(optimum_rate)
    assert result.tokens_per_s >= optimum_rate and result.settings.shape == optimum.shape


def test_the_incumbent_is_kept_unless_the_pick_replays_above_it_by_the_margin(tmp_path):
    """A depth-1 tree, short of the planted optimum, as the incumbent: the study finds
    the optimum, which replaces it at margin 0 and at a margin just under the pick's
    lead, and leaves it published (with the pick's rate reported) at one just over."""
    traces, costs, space = [chain_trace()], chain_costs(), CHAIN_GRID.space()
    shorter = [(replay_bucket(traces, s, costs).tokens_per_s, s) for s in CHAIN_GRID.settings(1)
               if s.shape.max_depth == 1 and space.params_of(s) is not None]
    incumbent_rate, incumbent = max(shorter, key=lambda item: item[0])
    trials = len(CHAIN_GRID) // 10

    def tuned(name: str, margin: float):
        return tune_bucket(Store(tmp_path / f"{name}.db"), f"{name}-b1", traces, costs, 1, space, trials,
                           progress=False, incumbent=incumbent, incumbent_margin=margin)

    replaced = tuned("zero", 0.0)
    lead = replaced.tokens_per_s / incumbent_rate - 1
    assert lead > 0.02 and not replaced.incumbent_kept and replaced.settings.shape.max_depth == ACCEPTED
    assert replaced.baselines["incumbent"] == pytest.approx(incumbent_rate)
    assert not tuned("under", lead - 0.01).incumbent_kept
    kept = tuned("over", lead + 0.01)
    assert kept.incumbent_kept and kept.summary()["incumbent_kept"] is True
    assert kept.settings == incumbent and kept.tokens_per_s == pytest.approx(incumbent_rate)
    assert kept.tau == pytest.approx(replay_bucket(traces, incumbent, costs).tau)
    assert kept.baselines["best_trial"] == pytest.approx(replaced.tokens_per_s)


def test_an_incumbent_the_traces_cannot_replay_is_left_out(tmp_path):
    """A tree wider than the search space (and so than what the traces recorded), or a
    bucket that decodes plainly, is neither a trial nor a baseline."""
    traces, costs, space = [chain_trace()], chain_costs(), CHAIN_GRID.space()
    wide = BucketSettings(1, TreeShape(space.top_k + 1, 1, 3))
    plain = BucketSettings(1, TreeShape(1, 1, 2), Thresholds(1.0, 1.0, 1.0), fifo_len=2, speculate=False)
    assert space.params_of(wide) is None and space.params_of(plain) is not None  # plain: left out for decoding plainly
    for name, incumbent in (("wide", wide), ("plain", plain)):
        result = tune_bucket(Store(tmp_path / f"{name}.db"), f"{name}-b1", traces, costs, 1, space, 2,
                             progress=False, incumbent=incumbent)
        assert "incumbent" not in result.baselines and result.trials == 2


def test_a_named_study_resumes_instead_of_starting_over(tmp_path):
    store = Store(tmp_path / "t.db")
    traces = [chain_trace()]
    first = tune_bucket(store, "resume-b1", traces, chain_costs(), 1, CHAIN_GRID.space(), 4, progress=False)
    again = tune_bucket(store, "resume-b1", traces, chain_costs(), 1, CHAIN_GRID.space(), 6, progress=False)
    assert (first.trials, again.trials) == (4, 6)


def test_traces_go_to_the_first_bucket_covering_their_batch_size():
    traces = [chain_trace(b) for b in (1, 2, 4, 5, 9)]
    buckets = assign_buckets(traces, (1, 4, 8))
    assert {k: [t.batch_size for t in v] for k, v in buckets.items()} == {1: [1], 4: [2, 4], 8: [5, 9]}
    settings = PolicySettings(buckets=tuple(BucketSettings(size) for size in (1, 4, 8)), costs=chain_costs())
    for size, bucket in buckets.items():  # the rule a policy uses live is the one tuning used
        assert all(settings.for_batch(t.batch_size).max_batch_size == size for t in bucket)
    assert even_sample(list(range(10)), 4) == [0, 2, 5, 7]
