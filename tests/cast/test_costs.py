import math

import pytest
import torch

from sglang_cast.cast import CostModel, CostTable, Thresholds, select_bucket
from sglang_cast.cast.costs import make_monotone


@pytest.mark.parametrize(
    "context, expected",
    [(0, 128), (1, 128), (127, 128), (128, 256), (255, 256), (383, 384), (384, 512), (511, 512),
     (512, 512), (10**6, 512)],
)
def test_select_rounds_up_and_clamps(context, expected):
    assert select_bucket(context, bucket=128, num_buckets=4) == expected


def _table(batch_sizes=(1, 4, 8), buckets=2, n=4):
    ms = torch.zeros(len(batch_sizes), buckets, n, dtype=torch.float64)
    for i, b in enumerate(batch_sizes):
        for m in range(buckets):
            ms[i, m] = torch.tensor([10.0 * b + m + k for k in range(1, n + 1)])
    return CostTable(bucket=256, num_buckets=buckets, batch_sizes=tuple(batch_sizes), ms=ms)


def test_unprofiled_batch_uses_next_larger_profiled_size():
    table = _table()
    assert table(2, 0, 1) == pytest.approx(table(4, 0, 1))
    assert table(5, 300, 3) == pytest.approx(table(8, 300, 3))
    assert table(4, 0, 1) != pytest.approx(table(1, 0, 1))


def test_batch_above_largest_extrapolates_from_two_largest():
    table = _table()
    f4, f8 = table(4, 0, 2), table(8, 0, 2)
    assert table(16, 0, 2) == pytest.approx(f8 + (f8 - f4) * (16 - 8) / (8 - 4), rel=1e-6)


def test_n_beyond_table_extrapolates_linearly():
    table = _table(n=4)
    row = table.row(1, 0, 7)
    assert row.numel() == 7
    assert float(row[6] - row[5]) == pytest.approx(float(row[3] - row[2]), rel=1e-3)


def test_rows_are_cleaned_to_strictly_increasing():
    noisy = torch.tensor([5.0, 4.0, 4.0, 6.0, 5.5], dtype=torch.float64)
    clean = make_monotone(noisy)
    assert (clean[1:] > clean[:-1]).all()
    assert (clean >= noisy).all()
    assert float(clean[1]) == pytest.approx(5.0, abs=1e-5)


def test_dict_round_trip():
    costs = CostModel(target=_table(), draft=_table(batch_sizes=(1, 2)))
    again = CostModel.from_dict(costs.to_dict())
    assert torch.allclose(again.target.ms, costs.target.ms)
    assert again.draft.batch_sizes == (1, 2)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.update(batch_sizes=[], ms=[]), "batch_sizes"),
        (lambda d: d["ms"][0][0].__setitem__(0, math.nan), "NaN"),
        (lambda d: d["ms"][0][0].__setitem__(0, -1.0), "positive"),
        (lambda d: d.update(bucket=0), "bucket"),
        (lambda d: d.pop("ms"), "ms"),
        (lambda d: d.update(ms=[[1.0]]), "shape"),
    ],
)
def test_bad_tables_raise_value_error_naming_the_field(mutate, field):
    data = _table().to_dict()
    mutate(data)
    with pytest.raises(ValueError, match=field):
        CostTable.from_dict(data, "target")


@pytest.mark.parametrize("name", ["c1", "c2", "c3"])
@pytest.mark.parametrize("value", [0.0, -2.0, math.nan])
def test_non_positive_thresholds_are_rejected(name, value):
    with pytest.raises(ValueError, match=name):
        Thresholds(**{name: value})


def test_cached_rows_answer_what_a_fresh_table_computes():
    """Rows are cached per batch size and bucket at the longest length asked so far; a
    shorter row is a prefix of a longer one, so every (B, c, n_max) in any order gets
    exactly the uncached row, including noisy (non-monotone) and extended ones."""
    ms = torch.tensor([[[5.0, 4.0, 6.0, 9.0], [7.0, 7.5, 7.2, 8.0]],
                       [[8.0, 9.5, 9.0, 12.0], [9.0, 11.0, 10.5, 14.0]]], dtype=torch.float64)

    def table() -> CostTable:
        return CostTable(bucket=256, num_buckets=2, batch_sizes=(1, 4), ms=ms.clone())

    cached = table()
    for n_max in (3, 70, 2, 5, 100, 1):
        for batch_size in (1, 2, 4, 6):
            for context in (10, 300):
                assert torch.equal(cached.row(batch_size, context, n_max), table().row(batch_size, context, n_max))
                assert cached(batch_size, context, n_max) == table()(batch_size, context, n_max)
                assert cached.row_ms(batch_size, context, n_max) == table().row(batch_size, context, n_max).tolist()
    assert len(cached._rows) == 8  # 4 batch sizes x 2 buckets, one row each
    assert all(row.shape[-1] == len(floats) == 100 for row, floats in cached._rows.values())
