"""The depth rule's memory (docs/design/cast.md §4, docs/cast_decisions.md D9): FIFOs
per batch-size bucket, and a layer switched off by a bad stretch coming back."""

import pytest
import torch

from sglang_cast.cast import BucketSettings, CostModel, CostTable, PolicySettings, Thresholds, TreeShape, make_policy

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


def test_reachable_depth_forecasts_deeper_layers_with_the_fifos_best_ratio():
    """``predict_depth`` scales layer ``i``'s values by ``mean(A_i)``, ``reachable_depth``
    by ``max(A_i)``; both decide with the rule itself (C2 reads ``mean(A_i)``), so a
    FIFO with one good ratio among poor ones forecasts a deeper reach, and neither
    forecast moves the FIFOs."""
    policy = policy_needing_half("cast")
    ratios = policy.depth_ratios()
    for ratio in (0.5, 0.5, 0.5, 1.0):  # mean(A_1) 0.625: layer 2 is drafted
        ratios.push(1, ratio)
    for _ in range(4):  # mean(A_2) 0.7: layer 3 only if layer 2 keeps most of layer 1's value
        ratios.push(2, 0.7)
    before = (ratios.history(1), ratios.history(2), ratios.history(3))
    plan = policy.begin(1, 10)
    assert plan.predict_depth(LAYER1) == 2
    assert plan.reachable_depth(LAYER1, 2) == SHAPE.max_depth
    assert (ratios.history(1), ratios.history(2), ratios.history(3)) == before


@pytest.mark.parametrize("name", ["cast", "goodput"])
def test_grow_within_a_limit_counts_the_stop_there_and_charges_no_layer_it_cannot_draft(name):
    """An engine limited to one layer this iteration (SGLang's runtime state): a stop at
    the limit counts towards the probe as a free ``grow`` would; a layer the rule wants
    there is neither drafted nor charged."""
    if name == "cast":
        policy = policy_needing_half(name, probe_every=3)
    else:
        policy = make_policy(name, PolicySettings.single(costs(), SHAPE, fifo_len=2))
        policy.depth_probe_every = 3
    while depth_of_iteration(policy, 1e-6) == 1 or policy.depth_ratios().mean(1) > 1e-3:
        pass  # A_1 near 0, so the rule stops after layer 1, and a probe has just run
    stops = []
    for _ in range(3):
        plan = policy.begin(1, 10)
        stops.append(plan.depth_ratios.probe_due(1))
        plan.keep(1, LAYER1)
        assert plan.grow_within(1, limit=1) is False
    assert stops == [False, False, True]  # two counted stops at the limit make the third a probe
    eager = make_policy(name, PolicySettings.single(costs(), SHAPE, fifo_len=2)).begin(1, 10)  # A_1 = 1: it grows
    eager.keep(1, LAYER1)
    assert eager.grow_within(1, limit=1) is False and eager.draft_ms == 0.0
    assert eager.grow_within(1, limit=2) is True and eager.draft_ms > 0.0


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


# ------------------------------------------------ the rules at their exact ties
EPS = 2.0**-16


class ExactTable(CostTable):
    """A cost table read as given, batch size 1 and one context bucket: a real table adds
    ``EPS·n`` (1e-6 ms) to make its rows strictly increasing, and then no cost below would
    be an exact binary fraction.  Integer milliseconds stay integers here."""

    def _cached_row(self, batch_size: int, context_len: int, n_max: int) -> tuple[torch.Tensor, list[float]]:
        row = self.ms[0, 0, :n_max].double()
        return row, row.tolist()


def exact_costs(target_fixed: float, target_per_token: float, f_t5_delta: float = 0.0) -> CostModel:
    """f_T(n) = fixed + per_token·n (f_T(5) moved by ``f_t5_delta``) and f_D(n) = n ms,
    read exactly (`ExactTable`): every cost, normalised cost and rate the depth rules
    compare below is an exact binary fraction."""
    n = torch.arange(1, 17, dtype=torch.float64)
    target = target_fixed + target_per_token * n
    target[4] += f_t5_delta
    return CostModel(target=ExactTable(1 << 20, 1, (1,), target.view(1, 1, -1)),
                     draft=ExactTable(1 << 20, 1, (1,), n.view(1, 1, -1)))


def cast_grows_past_layer_1(c2: float) -> bool:
    """CAST at layer 1 on a fresh policy (``mean(A_1)`` is the prior 1.0): layer 1 keeps
    both of ``[0.5, 0.25]`` (u = 0.75) at f_D(2) / f_T(1) = 2 / 8 = 0.25, so its depth
    score ``mean(A_1)·u / c`` is exactly 3.0."""
    costs = exact_costs(4.0, 4.0)
    plan = make_policy("cast", PolicySettings.single(costs, SHAPE, Thresholds(1e-9, c2, 1e-9))).begin(1, 10)
    assert plan.keep(1, torch.tensor([[0.5, 0.25]], dtype=torch.float64)) == 2
    assert (plan.utility[0], plan.draft_cost[0]) == (0.75, 0.25)
    return plan.grow(1)


@pytest.mark.parametrize("c2, grows", [
    (3.0, True),  # the score is C2 exactly: ``score < C2`` is false, the layer is drafted
    (3.0 - EPS, True),  # the score just above C2
    (3.0 + EPS, False),  # just below: stop
])
def test_cast_stops_only_when_the_depth_score_is_below_c2(c2, grows):
    assert cast_grows_past_layer_1(c2) is grows


def goodput_grows_past_layer_1(f_t5_delta: float) -> bool:
    """Goodput at layer 1 on a fresh policy: layer 1 keeps both of ``[0.5, 0.5]``
    (expected 1.0 more tokens, nothing drafted yet charged), so with f_T(n) = 5 + n,
    f_D(2) = 2 and the prior ``mean(A_1)`` = 1.0 its tokens per ms now are
    (1 + 1) / f_T(3) = 2 / 8 and one layer deeper (1 + 1 + 1) / (f_D(2) + f_T(5)) =
    3 / 12: the same 0.25 exactly.  ``f_t5_delta`` moves f_T(5) off the tie."""
    costs = exact_costs(5.0, 1.0, f_t5_delta)
    plan = make_policy("goodput", PolicySettings.single(costs, SHAPE)).begin(1, 10)
    assert plan.keep(1, torch.tensor([[0.5, 0.5]], dtype=torch.float64)) == 2
    assert (plan.utility[0], plan.draft_ms) == (1.0, 0.0)
    return plan.grow(1)


@pytest.mark.parametrize("f_t5_delta, grows", [
    (0.0, False),  # deeper == now exactly: ``deeper <= now`` stops (a layer must raise the rate)
    (-EPS, True),  # the deeper tree just faster: draft it
    (EPS, False),  # just slower: stop
])
def test_goodput_drafts_a_layer_only_when_it_raises_the_predicted_rate(f_t5_delta, grows):
    assert goodput_grows_past_layer_1(f_t5_delta) is grows
