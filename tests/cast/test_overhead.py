"""The host-overhead table (cast/overhead.py) and where it is charged: the cost model's
iteration costs, trace replay's ``charge``, the policies' online decisions and the
normalisation every threshold is read against (docs/design/cast.md §2, §4, §5)."""

import logging

import pytest
import torch
import yaml

from sglang_cast.cast import (CostModel, CostTable, DraftTree, OverheadTable, PolicySettings, StepSample, Thresholds,
                              TreeShape, charge, fit_overhead, make_policy)
from sglang_cast.cast.overhead import TERMS
from sglang_cast.profile import Profile, load_profile
from support.costs import overhead

N = torch.arange(1, 65, dtype=torch.float64)


def flat_costs(overhead: OverheadTable | None = None) -> CostModel:
    """f_T(n) = 10 + n, f_D(n) = 1 + 0.1 n at every batch and context."""
    target = CostTable(1 << 20, 1, (1,), (10 + N).view(1, 1, -1))
    draft = CostTable(1 << 20, 1, (1,), (1 + 0.1 * N).view(1, 1, -1))
    return CostModel(target, draft, overhead)


def chain(values: list[float]) -> DraftTree:
    """One sequence, a chain of draft nodes with the given values."""
    tree = DraftTree.from_roots(torch.tensor([0]))
    for token, value in enumerate(values, start=1):
        tree.add_layer(torch.tensor([[token]]), torch.tensor([[token - 1]]), torch.tensor([[value]], dtype=torch.float64))
    return tree


def grown_eagle2_plan(table: OverheadTable | None):
    """An EAGLE-2 plan (top-k 2, depth 3) that drafted three layers at batch 1, context 10."""
    plan = make_policy("eagle2", PolicySettings.single(flat_costs(table), TreeShape(2, 3, 8))).begin(1, 10)
    for layer, values in enumerate(([0.9, 0.5], [0.4, 0.3], [0.2, 0.1]), start=1):
        plan.keep(layer, torch.tensor([values], dtype=torch.float64))
        plan.grow(layer)
    return plan


# ------------------------------------------------------------------ the table

def test_table_round_trips_and_errors_name_the_field():
    table = overhead(1.0, 2.0, 0.5, 0.25, sizes=(1, 4), buckets=2)
    assert OverheadTable.from_dict(table.to_dict()).to_dict() == table.to_dict()
    bad = table.to_dict() | {"terms": ["a", "b", "c", "d"]}
    with pytest.raises(ValueError, match=r"costs.overhead.terms"):
        OverheadTable.from_dict(bad, "costs.overhead")
    negative = table.to_dict()
    negative["ms"][0][0][1] = -1.0
    with pytest.raises(ValueError, match=r"costs.overhead: .*>= 0"):
        OverheadTable.from_dict(negative, "costs.overhead")
    with pytest.raises(ValueError, match=r"shape"):
        OverheadTable(128, 1, (1,), torch.zeros(1, 1, 3))


def test_terms_follow_the_forward_tables_batch_rule():
    """Between profiled sizes: the next size up; above the largest: linear, clamped at 0."""
    ms = torch.tensor([[[1.0, 2.0, 0.5, 0.1]], [[2.0, 4.0, 0.25, 0.2]]], dtype=torch.float64)
    table = OverheadTable(1 << 20, 1, (1, 4), ms)
    assert table.terms(3, 0).spec_base == 4.0
    assert table.terms(7, 0).plain == pytest.approx(3.0)  # 2 + (2 - 1) * (7 - 4) / 3
    assert table.terms(40, 0).per_layer == 0.0  # 0.25 - 0.25 * 12 < 0, clamped


def test_fit_recovers_planted_terms():
    """Whole steps made from known terms (with small zero-mean noise) give them back."""
    g = torch.Generator().manual_seed(0)
    truth = {1: (0.4, 1.9, 0.3, 0.02), 4: (0.7, 2.5, 0.5, 0.05)}
    samples = []
    for batch, (plain, base, layer, token) in truth.items():
        for depth in range(0, 7):
            for verified in (0,) if depth == 0 else (2, 8, 20, 40):
                for _ in range(3):
                    exact = plain if depth == 0 else base + layer * (depth - 1) + token * verified
                    noise = float(torch.randn(1, generator=g)) * 0.01
                    samples.append(StepSample(batch, 100, depth, verified, exact + noise))
    table = fit_overhead(samples, (1, 4), 1 << 20, 1)
    for i, batch in enumerate((1, 4)):
        assert table.ms[i, 0].tolist() == pytest.approx(list(truth[batch]), abs=0.02)


def test_fit_fills_an_unmeasured_cell_from_its_neighbour_and_clamps_negatives():
    samples = [StepSample(1, 10, 0, 0, 0.5)] * 3 + [StepSample(1, 10, d, v, 1.0 + 0.2 * d - 0.001 * v)
                                                     for d in (1, 3, 5) for v in (4, 30)]
    table = fit_overhead(samples, (1, 8), 128, 2)
    assert (table.ms >= 0).all()
    assert table.ms[0, 0, TERMS.index("per_token")] == 0.0  # fitted negative, clamped
    assert torch.equal(table.ms[1, 1], table.ms[0, 0])  # batch 8, bucket 2 had no sample


# ------------------------------------------------------------------ charging

def test_charge_adds_the_host_terms_of_plain_and_speculative_steps():
    costs = flat_costs(overhead(plain=0.5, spec_base=2.0, per_layer=0.3, per_token=0.1))
    settings = PolicySettings.single(costs, TreeShape(2, 3, 8))
    plain = make_policy("vanilla", settings).begin(1, 10)
    assert charge(plain, 0, 0, 0) == (0.0, pytest.approx(11.0 + 0.5))
    plan = make_policy("eagle2", settings).begin(1, 10)
    plan.keep(1, torch.tensor([[0.9, 0.5]], dtype=torch.float64))
    assert plan.grow(1)
    plan.keep(2, torch.tensor([[0.4, 0.3]], dtype=torch.float64))
    draft_ms, verify_ms = charge(plan, 4, 2, 1)
    # layer 1 (2 rows) + its host work, then catch-up on 1 accepted + bonus (2 rows)
    assert draft_ms == pytest.approx((1.2 + 0.3) + 1.2, abs=1e-4)
    assert verify_ms == pytest.approx(15.0 + 2.0 + 0.1 * 4, abs=1e-4)


def test_no_overhead_charges_exactly_the_forwards():
    """An old profile: every iteration cost is the paper's forward-only cost."""
    costs = flat_costs()
    assert costs.plain_ms(3, 50) == costs.target(3, 50, 1)
    assert costs.verify_row(3, 50, 9) == costs.target.row(3, 50, 9).tolist()
    assert costs.draft_layer_row(3, 50, 5) == costs.draft.row(3, 50, 5).tolist()


def test_rerank_normalises_by_one_plain_step():
    """C3 (§5): ``c_k = f_T(k+1) / f_T(1)``.  With f_T(n) = 10 + n and nodes worth 0.5 the
    normalised chord slope is 0.5 · 11 ≥ 1 (verify all six); un-normalised it would be
    0.5 < 1 (verify one)."""
    plan = make_policy("cast", PolicySettings.single(flat_costs(), TreeShape(1, 6, 16),
                                                     Thresholds(1e-9, 1e-9, 1.0))).begin(1, 10)
    assert plan.verify_count(chain([0.5] * 6)) == 6


def test_rerank_unit_includes_the_plain_steps_host_work():
    """The unit is one plain step with its host work: a large ``plain`` term makes the
    same verified token cheaper in plain-step units, so C3 = 1 accepts more nodes."""
    thresholds = Thresholds(1e-9, 1e-9, 1.0)
    tree = chain([0.08] * 6)
    no_host = make_policy("cast", PolicySettings.single(flat_costs(), TreeShape(1, 6, 16), thresholds)).begin(1, 10)
    slow_host = make_policy("cast", PolicySettings.single(flat_costs(overhead(plain=20.0)), TreeShape(1, 6, 16),
                                                          thresholds)).begin(1, 10)
    assert no_host.verify_count(tree) == 1  # 0.08 · 11 < 1 after the first
    assert slow_host.verify_count(tree) == 6  # 0.08 · 31 >= 1


def test_commit_cost_per_token_shrinks_the_verified_set():
    """A bigger verify costs its forward plus its commit: a large ``per_token`` makes
    C3 stop earlier on the same tree."""
    thresholds = Thresholds(1e-9, 1e-9, 1.0)
    tree = chain([0.5] * 6)
    cheap = make_policy("cast", PolicySettings.single(flat_costs(), TreeShape(1, 6, 16), thresholds)).begin(1, 10)
    costly = make_policy("cast", PolicySettings.single(flat_costs(overhead(per_token=9.0)), TreeShape(1, 6, 16),
                                                       thresholds)).begin(1, 10)
    assert cheap.verify_count(tree) == 6
    assert costly.verify_count(tree) == 1  # 0.5 · 11 / 10 < 1


def test_layer_host_work_stops_depth_earlier():
    """C2 (§4) divides by the layer's normalised cost, host work included."""
    thresholds = Thresholds(1e-9, 1.0, 1e-9)
    values = torch.tensor([[0.5]], dtype=torch.float64)
    grows = []
    for per_layer in (0.0, 10.0):
        plan = make_policy("cast", PolicySettings.single(flat_costs(overhead(per_layer=per_layer)),
                                                         TreeShape(1, 4, 16), thresholds)).begin(1, 10)
        plan.keep(1, values)
        grows.append(plan.grow(1))
    assert grows == [True, False]  # 0.5 / (1.1 / 11) = 5 >= 1; 0.5 / (11.1 / 11) < 1


def test_goodput_charges_host_work_in_its_rate():
    """Goodput's rate divides by ms with host work: a large per-layer cost stops it at depth 1."""
    values = torch.tensor([[0.9]], dtype=torch.float64)
    grows = []
    for per_layer in (0.0, 50.0):
        policy = make_policy("goodput", PolicySettings.single(flat_costs(overhead(per_layer=per_layer)),
                                                              TreeShape(1, 4, 16)))
        for _ in range(16):
            policy.depth_ratios().push(1, 0.9)
        plan = policy.begin(1, 10)
        plan.keep(1, values)
        grows.append(plan.grow(1))
    assert grows == [True, False]


# ------------------------------------------------------------------ profiles

def test_old_profile_without_overhead_loads_with_one_warning(tmp_path, caplog):
    settings = PolicySettings.single(flat_costs(), TreeShape(2, 2, 4))
    profile = Profile("cpu", "test cpu", "measured", settings)
    data = profile.to_dict()
    assert "overhead" not in data["costs"]
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    with caplog.at_level(logging.WARNING, logger="sglang_cast.profile"):
        loaded = load_profile(path)
    assert loaded.profile.settings.costs.overhead is None
    assert len([r for r in caplog.records if "host-overhead" in r.getMessage()]) == 1


def test_profile_with_overhead_round_trips_without_warning(tmp_path, caplog):
    settings = PolicySettings.single(flat_costs(overhead(0.5, 2.0, 0.3, 0.1)), TreeShape(2, 2, 4))
    path = tmp_path / "new.yaml"
    path.write_text(yaml.safe_dump(Profile("cpu", "test cpu", "measured", settings).to_dict()))
    with caplog.at_level(logging.WARNING, logger="sglang_cast.profile"):
        loaded = load_profile(path)
    assert loaded.profile.settings.costs.overhead.terms(1, 0).spec_base == 2.0
    assert not caplog.records


def test_unknown_costs_field_is_refused_by_name():
    data = flat_costs().to_dict() | {"overheads": {}}
    with pytest.raises(ValueError, match=r"profile.costs: unknown field\(s\) \['overheads'\]"):
        CostModel.from_dict(data, "profile.costs")


def test_charge_of_a_step_adds_the_host_ms_its_fitted_terms_give():
    """What the fit says a step of depth d verifying v nodes costs beyond its forwards
    (``OverheadTerms.iteration_ms``, the fit's own design) is exactly what ``charge`` adds:
    ``per_layer`` once per expanding draft forward (depth - 1), not once per layer."""
    table = overhead(plain=0.5, spec_base=2.0, per_layer=0.3, per_token=0.1)
    with_host, bare = (grown_eagle2_plan(t) for t in (table, None))
    host = sum(charge(with_host, 4, 3, 1)) - sum(charge(bare, 4, 3, 1))
    assert host == pytest.approx(table.terms(1, 10).iteration_ms(3, 4), abs=1e-4)
    assert host == pytest.approx(2.0 + 0.3 * 2 + 0.1 * 4, abs=1e-4)


def test_charge_without_host_is_the_forwards_alone():
    """``charge(..., host=False)``: what a timed step minus its host work should take — the
    same plan's forwards, whatever overhead its cost model carries."""
    table = overhead(plain=0.5, spec_base=2.0, per_layer=0.3, per_token=0.1)
    with_host, bare = (grown_eagle2_plan(t) for t in (table, None))
    assert charge(with_host, 4, 3, 1, host=False) == charge(bare, 4, 3, 1)
    assert charge(with_host, 4, 3, 1, host=False) != charge(with_host, 4, 3, 1)
    plain = make_policy("vanilla", PolicySettings.single(flat_costs(table), TreeShape(2, 3, 8))).begin(1, 10)
    assert charge(plain, 0, 0, 0, host=False) == (0.0, pytest.approx(11.0))


def test_cached_terms_answer_what_a_fresh_table_computes():
    """Terms are cached per batch size and context bucket: asked in any order, each
    (B, c) gets exactly what an uncached table computes."""
    ms = torch.arange(2 * 2 * len(TERMS), dtype=torch.float64).view(2, 2, len(TERMS)) / 10

    def table() -> OverheadTable:
        return OverheadTable(256, 2, (1, 8), ms.clone())

    cached = table()
    for batch_size, context in [(1, 10), (8, 300), (4, 10), (1, 300), (8, 10), (4, 300), (1, 10)]:
        assert cached.terms(batch_size, context) == table().terms(batch_size, context)
    assert cached.terms(1, 10) != cached.terms(1, 300) and len(cached._terms) == 6
