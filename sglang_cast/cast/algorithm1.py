"""Algorithm 1 of CAST: the largest index whose chord slopes to every earlier
index stay at or above a threshold (docs/design/cast.md §3).

With utilities ``u`` and costs ``c`` (both increasing in the index), index ``j`` is
*valid* when every ``i < j`` has ``(u[j] - u[i]) / (c[j] - c[i]) >= C``: going from
``i`` items to ``j`` items buys at least ``C`` utility per unit of cost.  The answer
is the largest valid index, counted from 1 (index 1 is always valid), i.e. "how
many items to take".
"""

from __future__ import annotations

import math

import torch


def _check(utilities: torch.Tensor, costs: torch.Tensor, threshold: float) -> None:
    if utilities.dim() != 1 or utilities.shape != costs.shape:
        raise ValueError(
            f"utilities and costs must be 1-D of the same length, got {list(utilities.shape)} and {list(costs.shape)}"
        )
    if utilities.device != costs.device:
        raise ValueError(f"utilities ({utilities.device}) and costs ({costs.device}) must be on one device; "
                         "policies decide on host copies (cast/expand.py)")
    if utilities.numel() == 0:
        raise ValueError("utilities must hold at least one candidate")
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a finite number > 0, got {threshold!r}")
    if not (torch.isfinite(utilities).all() and torch.isfinite(costs).all()):
        raise ValueError("utilities and costs must be finite (NaN/inf found)")
    if utilities.numel() > 1 and not (costs[1:] > costs[:-1]).all():
        raise ValueError("costs must be strictly increasing (clean the table with make_monotone)")


def largest_valid_index(utilities: torch.Tensor, costs: torch.Tensor, threshold: float) -> int:
    """Vectorised Algorithm 1 via an ``n × n`` slope matrix (fine for ``n <= 256``)."""
    _check(utilities, costs, threshold)
    u = utilities.double()
    c = costs.double()
    du = u.unsqueeze(0) - u.unsqueeze(1)  # [i, j] = u[j] - u[i]
    dc = c.unsqueeze(0) - c.unsqueeze(1)
    earlier = torch.ones_like(du, dtype=torch.bool).triu(diagonal=1)  # i < j
    # Only i < j pairs matter; elsewhere dc may be 0 or negative, so divide safely.
    slope = du / torch.where(earlier, dc, torch.ones_like(dc))
    bad = earlier & (slope < threshold)
    valid = ~bad.any(dim=0)
    return int(torch.nonzero(valid).max()) + 1
