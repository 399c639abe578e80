"""Algorithm 1 of CAST: the largest index whose chord slopes to every earlier
index stay at or above a threshold (docs/design/cast.md §3).

With utilities ``u`` and costs ``c`` (both increasing in the index), index ``j`` is
*valid* when every ``i < j`` has ``(u[j] - u[i]) / (c[j] - c[i]) >= C``: going from
``i`` items to ``j`` items buys at least ``C`` utility per unit of cost.  The answer
is the largest valid index, counted from 1 (index 1 is always valid), i.e. "how
many items to take".

Costs strictly increase, so multiplying by ``c[j] - c[i] > 0`` turns the condition
into ``g[j] >= g[i]`` with ``g = u - C·c``: index ``j`` is valid exactly when
``g[j]`` reaches the running maximum of ``g`` before it.  One pass, O(n), on host
floats: a policy decides on a handful to a few hundred host numbers, where a
Python loop beats the dozen tensor ops an ``n × n`` slope matrix takes (~60 µs per
decision, several decisions per iteration).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

Floats = Sequence[float] | torch.Tensor  # 1-D


def _as_floats(values: Floats) -> list[float]:
    if isinstance(values, torch.Tensor):
        if values.dim() != 1:
            raise ValueError(f"utilities and costs must be 1-D, got shape {list(values.shape)}")
        if values.device.type != "cpu":
            raise ValueError(f"utilities and costs must be host values, got a tensor on {values.device}; "
                             "policies decide on host copies (cast/expand.py)")
        return values.tolist()
    return list(values)


def _check(utilities: Floats, costs: Floats, threshold: float) -> tuple[list[float], list[float]]:
    """The inputs as host float lists, after checking them (errors name the problem)."""
    u, c = _as_floats(utilities), _as_floats(costs)
    if len(u) != len(c):
        raise ValueError(f"utilities and costs must be of the same length, got {len(u)} and {len(c)}")
    if not u:
        raise ValueError("utilities must hold at least one candidate")
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a finite number > 0, got {threshold!r}")
    if not all(map(math.isfinite, u)) or not all(map(math.isfinite, c)):
        raise ValueError("utilities and costs must be finite (NaN/inf found)")
    if any(later <= earlier for earlier, later in zip(c, c[1:])):
        raise ValueError("costs must be strictly increasing (clean the table with make_monotone)")
    return u, c


def largest_valid_index(utilities: Floats, costs: Floats, threshold: float) -> int:
    """Algorithm 1 as one running-maximum pass over ``g = u - C·c`` (module docstring);
    ``utilities`` and ``costs`` are host floats (lists or CPU tensors)."""
    u, c = _check(utilities, costs, threshold)
    best, running = 1, u[0] - threshold * c[0]
    for j in range(1, len(u)):
        gain = u[j] - threshold * c[j]
        if gain >= running:
            best, running = j + 1, gain
    return best
