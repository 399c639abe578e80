"""Each cost and ratio formula of docs/design/cast.md §4–§5, pinned against a value
computed here from the cost tables, on tables built so that a regression (a term
dropped, a ratio inverted, the wrong FIFO read) changes the answer."""

import pytest
import torch

from sglang_cast.cast import CostModel, CostTable, DraftTree, PolicySettings, Thresholds, TreeShape, make_policy
from sglang_cast.cast.algorithm1 import largest_valid_index

BUCKET = 128  # context buckets: [0, 128) and [128, 256)
N = torch.arange(1, 65, dtype=torch.float64)


def table(rows: dict[int, list[torch.Tensor]]) -> CostTable:
    """``rows[batch] = [ms over n for context bucket 0, for bucket 1]``."""
    sizes = tuple(sorted(rows))
    return CostTable(BUCKET, 2, sizes, torch.stack([torch.stack(rows[b]) for b in sizes]))


def skewed_costs() -> CostModel:
    """Draft and target latencies that depend on the batch size and on the context
    bucket in different proportions, so that every normalised cost moves when a
    term is dropped; the target row is flat for n <= 3 and steep after it."""
    knee = torch.where(N <= 3, 10 + 0.01 * N, 10 + 10 * (N - 3))
    target = table({1: [knee, 2 * knee], 4: [3 * knee, 4 * knee]})
    draft = table({1: [1 + 0.5 * N, 5 + 3 * N], 4: [9 + 7 * N, 40 + 20 * N]})
    return CostModel(target=target, draft=draft)


SHAPE = TreeShape(top_k=6, max_depth=4, num_verify_tokens=16)


def cast(c1=1e-9, c2=1e-9, c3=1e-9, fifo_len=4):
    return make_policy("cast", PolicySettings.single(skewed_costs(), SHAPE, Thresholds(c1, c2, c3), fifo_len))


def expected_draft_row(batch: int, context: int, count: int) -> torch.Tensor:
    """``f_D(B, ctx, k) / f_T(B, ctx, 1)`` for k = 1..count, straight from the tables."""
    costs = skewed_costs()
    return torch.tensor([costs.draft(batch, context, k) for k in range(1, count + 1)],
                        dtype=torch.float64) / costs.target(batch, context, 1)


def decreasing(batch: int, count: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, count, generator=g, dtype=torch.float64).sort(dim=1, descending=True).values


@pytest.mark.parametrize("c1", [0.02, 0.1, 0.5])
def test_breadth_cost_is_draft_over_target_at_the_batch_and_n0_plus_kept_context(c1):
    """C1 (§4): layer i's cost row is ``f_D(B, n0 + Σ_{l<i} n_l, k) / f_T(B, same, 1)``;
    context 125 with layer 1 keeping ≥ 3 nodes puts layer 2 in the next bucket."""
    batch, context = 4, 125
    plan = cast(c1=c1).begin(batch, context)
    layer1 = decreasing(batch, SHAPE.top_k, seed=1)
    n1 = plan.keep(1, torch.cat([torch.ones(batch, 3, dtype=torch.float64), layer1[:, 3:]], dim=1))
    assert n1 >= 3
    assert plan.draft_cost[0] == pytest.approx(float(expected_draft_row(batch, context, n1)[-1]))
    layer2 = decreasing(batch, SHAPE.top_k, seed=2) * 0.9
    n2 = plan.keep(2, layer2)
    row = expected_draft_row(batch, context + n1, SHAPE.top_k)
    utility = layer2.mean(dim=0).cumsum(dim=0)
    assert n2 == largest_valid_index(utility, row, c1)
    assert plan.draft_cost[1] == pytest.approx(float(row[n2 - 1]))


def test_breadth_cost_rows_differ_by_batch_and_context():
    """The check above can only fail on a dropped term if these rows differ: batch 4
    vs 1, and layer 2's context with and without n0 (n1 >= 3)."""
    assert not torch.allclose(expected_draft_row(4, 125, 6), expected_draft_row(1, 125, 6))
    for n1 in range(3, SHAPE.top_k + 1):
        assert not torch.allclose(expected_draft_row(4, 125 + n1, 6), expected_draft_row(4, n1, 6))


def test_rerank_cost_counts_the_root():
    """C3 (§5): taking k nodes costs ``f_T(B, c, k + 1) / f_T(B, c, 1)`` — the root is
    verified too.  Target row flat up to 3 tokens then steep, a chain of nodes worth 0.5:
    two nodes (3 tokens with the root) clear C3 = 1, the third (4 tokens) does not."""
    plan = cast(c3=1.0).begin(1, 10)
    tree = DraftTree.from_roots(torch.tensor([0]))
    for token in range(1, 7):
        tree.add_layer(torch.tensor([[token]]), torch.tensor([[token - 1]]), torch.tensor([[0.5]], dtype=torch.float64))
    costs = skewed_costs()
    cost = torch.tensor([costs.target(1, 10, k + 1) for k in range(1, 7)]) / costs.target(1, 10, 1)
    assert plan.verify_count(tree) == largest_valid_index(0.5 * torch.arange(1.0, 7.0), cost, 1.0) == 2


def test_depth_ratio_is_next_layer_utility_over_this_layers_into_a_i():
    """C2 (§4): after layer i + 1 is drafted, ``φ_i = u^(i+1) / u^(i)`` enters ``A_i``
    (which starts as [1.0]); no other FIFO changes."""
    policy = cast()
    plan = policy.begin(1, 10)
    plan.keep(1, torch.tensor([[0.6, 0.3]], dtype=torch.float64))
    assert plan.grow(1)
    plan.keep(2, torch.tensor([[0.2, 0.1]], dtype=torch.float64))
    phi = 0.3 / 0.9
    assert policy.depth_ratios().mean(1) == pytest.approx((1.0 + phi) / 2)
    assert policy.depth_ratios().mean(2) == pytest.approx(1.0)


@pytest.mark.parametrize("margin, grows", [(1 - 1e-6, True), (1 + 1e-6, False)])
def test_depth_rule_reads_a_i_for_layer_i(margin, grows):
    """C2 (§4): layer i + 1 is drafted iff ``mean(A_i) · u^(i) / c^(i) >= C2``.  ``A_1``
    is pushed far from ``A_2`` (still [1.0]), so reading the wrong FIFO flips it."""
    policy = cast(fifo_len=4)
    for _ in range(4):
        policy.depth_ratios().push(1, 0.05)
    values = torch.tensor([[0.7, 0.2, 0.05]], dtype=torch.float64)
    probe = policy.begin(1, 10)
    probe.keep(1, values)
    score = 0.05 * probe.utility[0] / probe.draft_cost[0]
    policy.reconfigure(PolicySettings.single(skewed_costs(), SHAPE, Thresholds(1e-9, score * margin, 1e-9), 4))
    plan = policy.begin(1, 10)
    plan.keep(1, values)
    assert plan.grow(1) is grows
