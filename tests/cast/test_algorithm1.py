import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_cast.cast import CostModel, PolicySettings, Thresholds, TreeShape, make_policy
from sglang_cast.cast.algorithm1 import largest_valid_index


def largest_valid_index_loop(utilities: list[float], costs: list[float], threshold: float) -> int:
    """The O(n²) definition written as loops, in exact rational arithmetic on the given
    floats: the oracle the running-maximum pass must match."""
    u, c, t = [Fraction(x) for x in utilities], [Fraction(x) for x in costs], Fraction(threshold)
    best = 1
    for j in range(len(u)):
        if all((u[j] - u[i]) / (c[j] - c[i]) >= t for i in range(j)):
            best = j + 1
    return best


increments = st.lists(st.floats(min_value=1e-3, max_value=10.0), min_size=1, max_size=40)


@settings(max_examples=2000, deadline=None)
@given(du=increments, dc=increments, threshold=st.floats(min_value=1e-3, max_value=20.0))
def test_running_maximum_matches_the_definition(du, dc, threshold):
    """Equal to the exact answer, except that a chord whose slope is the threshold to
    within rounding (1e-9 relative) may count either way: the answer lies between the
    exact answers for a threshold 1e-9 above and below (the answer falls as the
    threshold rises)."""
    n = min(len(du), len(dc))
    u = torch.tensor(du[:n], dtype=torch.float64).cumsum(0)
    c = torch.tensor(dc[:n], dtype=torch.float64).cumsum(0)
    got = largest_valid_index(u, c, threshold)
    low = largest_valid_index_loop(u.tolist(), c.tolist(), threshold * (1 + 1e-9))
    high = largest_valid_index_loop(u.tolist(), c.tolist(), threshold * (1 - 1e-9))
    assert low <= got <= high


def test_an_invalid_middle_index_does_not_stop_the_search():
    # j=2 has slope 0.1 from j=1, but j=3 clears every earlier chord.
    u = torch.tensor([1.0, 1.1, 5.0])
    c = torch.tensor([1.0, 2.0, 3.0])
    assert largest_valid_index(u, c, 1.0) == 3
    assert largest_valid_index(u, c, 3.0) == 1


@settings(max_examples=300, deadline=None)
@given(
    batch=st.integers(1, 4),
    n=st.integers(2, 12),
    data=st.data(),
    per_token=st.floats(0.5, 5.0),
    fixed=st.floats(0.0, 20.0),
)
def test_theorem_4_1_linear_cost_breadth_selects_K(batch, n, data, per_token, fixed):
    """With c_k = λk + δ and C = mean_j v^(j)(K) / λ, breadth selection == K."""
    top_k = data.draw(st.integers(1, n))
    rows = []
    for _ in range(batch):
        gaps = data.draw(st.lists(st.floats(0.05, 1.0), min_size=n, max_size=n))
        rows.append(torch.tensor(gaps, dtype=torch.float64).flip(0).cumsum(0).flip(0))  # strictly decreasing
    values = torch.stack(rows)
    costs = CostModel.linear(per_token, fixed, draft_ratio=0.3, max_tokens=n)
    plan = make_policy("cast", PolicySettings.single(costs)).begin(batch, 100)
    normalised = plan._draft_row(1, n)
    lam = float(normalised[1] - normalised[0])
    c1 = float(values[:, top_k - 1].mean()) / lam * (1 - 1e-9)
    policy = make_policy("cast", PolicySettings.single(costs, thresholds=Thresholds(c1=c1)))
    assert policy.begin(batch, 100).keep(1, values) == top_k


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(threshold=0.0), "threshold"),
        (dict(threshold=-1.0), "threshold"),
        (dict(threshold=math.nan), "threshold"),
        (dict(u=[]), "at least one"),
        (dict(u=[1.0, math.nan]), "finite"),
        (dict(c=[2.0, 1.0]), "strictly increasing"),
    ],
)
def test_bad_inputs_name_the_problem(kwargs, field):
    u = torch.tensor(kwargs.get("u", [1.0, 2.0]), dtype=torch.float64)
    c = torch.tensor(kwargs.get("c", [1.0, 2.0][: u.numel()]), dtype=torch.float64)
    with pytest.raises(ValueError, match=field):
        largest_valid_index(u, c, kwargs.get("threshold", 1.0))


def test_tree_shape_rejects_zero_top_k():
    with pytest.raises(ValueError, match="top_k"):
        TreeShape(top_k=0)


# Exact ties: u and c are binary fractions, so g = u - C·c is computed exactly and a
# chord whose slope is C ties the running maximum to the last bit.
EPS = 2.0**-20


@pytest.mark.parametrize("threshold, expected", [
    (0.5, 2),  # the chord's slope (1.5 - 1) / (2 - 1) is the threshold: valid ("at or above")
    (0.5 - EPS, 2),  # the slope just above the threshold: valid
    (0.5 + EPS, 1),  # just below: not
])
def test_a_chord_whose_slope_is_exactly_the_threshold_is_valid(threshold, expected):
    assert largest_valid_index([1.0, 1.5], [1.0, 2.0], threshold) == expected
    assert largest_valid_index_loop([1.0, 1.5], [1.0, 2.0], threshold) == expected


@pytest.mark.parametrize("u, expected", [
    ([1.0, 1.25, 2.0], 3),  # g = [0.5, 0.25, 0.5]: index 3 ties the running maximum (index 1), past a dip
    ([1.0, 1.5, 2.0], 3),  # g = [0.5, 0.5, 0.5]: every index ties every earlier one
    ([1.0, 1.25, 2.0 - EPS], 1),  # just below the tie: index 3 loses to index 1
    ([1.0, 1.5 + EPS, 2.0], 2),  # index 2 just above: index 3 now falls just below it
])
def test_an_index_tying_the_running_maximum_is_valid(u, expected):
    assert largest_valid_index(u, [1.0, 2.0, 3.0], 0.5) == expected
    assert largest_valid_index_loop(u, [1.0, 2.0, 3.0], 0.5) == expected
