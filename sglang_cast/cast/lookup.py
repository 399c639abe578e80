"""Where a query lands on a profiled grid (docs/design/cast.md §2): the context bucket
and the batch-size row.  One place for the rules every table (forward latencies, host
overhead) and every engine uses."""

from __future__ import annotations

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
