"""Where a query lands on a profiled grid (docs/design/cast.md §2): the context bucket
and the batch-size row.  One place for the rules every table (forward latencies, host
overhead) and every engine uses."""

from __future__ import annotations

from typing import Any

import torch


def select_bucket(context_len: int, bucket: int, num_buckets: int) -> int:
    """``select(c) = (min(floor(c / L), M - 1) + 1) · L``: the bucket boundary a
    context is charged at (docs/design/cast.md §2; the paper's ``max`` is a typo)."""
    if context_len < 0:
        raise ValueError(f"context_len must be >= 0, got {context_len}")
    return (min(context_len // bucket, num_buckets - 1) + 1) * bucket


def batch_row(rows: torch.Tensor, sizes: tuple[int, ...], batch_size: int) -> torch.Tensor:
    """The row of ``rows`` ``[len(sizes), ...]`` for any batch size (docs/design/cast.md §2):
    the smallest profiled size ``>= batch_size``; above the largest, extrapolated linearly
    from the two largest (one profiled size: that size's row)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for i, size in enumerate(sizes):
        if size >= batch_size:
            return rows[i]
    if len(sizes) == 1:
        # One profiled size gives no slope; charge the largest measurement.
        return rows[-1]
    b1, b2 = sizes[-2], sizes[-1]
    return rows[-1] + (rows[-1] - rows[-2]) * (batch_size - b2) / (b2 - b1)


def grid_to_dict(bucket: int, num_buckets: int, batch_sizes: tuple[int, ...], ms: torch.Tensor) -> dict[str, Any]:
    """A profiled grid ``ms[b, m, k]`` as the plain dict profiles store."""
    return {"bucket": bucket, "num_buckets": num_buckets, "batch_sizes": list(batch_sizes),
            "ms": [[[round(float(x), 6) for x in r] for r in per_b] for per_b in ms.tolist()]}


def grid_from_dict(data: Any, name: str, last_axis: str) -> tuple[int, int, tuple[int, ...], torch.Tensor]:
    """``(bucket, num_buckets, batch_sizes, ms)`` of a stored grid; errors name the field
    (``last_axis`` names what ``ms``'s last index counts, for the message)."""
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a mapping, got {type(data).__name__}")
    missing = [k for k in ("bucket", "num_buckets", "batch_sizes", "ms") if k not in data]
    if missing:
        raise ValueError(f"{name}: missing field(s) {missing}")
    try:
        ms = torch.tensor(data["ms"], dtype=torch.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}.ms: not a rectangular [batch][bucket][{last_axis}] list of numbers ({err})") from None
    try:
        return int(data["bucket"]), int(data["num_buckets"]), tuple(int(b) for b in data["batch_sizes"]), ms
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: bucket, num_buckets and batch_sizes must be integers ({err})") from None
