"""Fitting a profile's forward tables to the machine it is served on.

A profile's ``f_T`` and ``f_D`` tables were measured on the machine that tuned it.
On another CPU or GPU the same forwards run faster or slower, mostly by one factor
per model (the GEMMs' speed), sometimes with a fixed part that differs too (launch or
dispatch overhead).  A few forwards timed here at anchor points of the tables (``B``,
``c``, ``n``) are enough to fit, per table, ``measured ≈ scale · table`` or, when the
anchors say the shape differs, ``measured ≈ scale · table + offset``; anchors held out
of the fit say how well it carries to the rest of the table.  Pure: the timing is the
engine's (`engine/table_calibration.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .costs import CostModel, CostTable

ROLES = ("target", "draft")
# Below this the scale-only fit is kept: a second term fitted to a handful of noisy
# points would chase noise.  Above it (anchors whose ratios to the table spread by
# more than 20 %) the table's shape differs on this machine and an offset is fitted,
# if the anchors' table values spread as much (else the two terms are not separable).
SHAPE_SPREAD = 1.2


@dataclass(frozen=True)
class Anchor:
    """One forward timed here, at a point of a profile's table."""

    role: str  # "target" or "draft"
    batch_size: int
    context_len: int
    n: int
    measured_ms: float
    held_out: bool  # not used by the fit: it checks it

    def table_ms(self, costs: CostModel) -> float:
        return _table(costs, self.role)(self.batch_size, self.context_len, self.n)


@dataclass(frozen=True)
class TableFit:
    """``calibrated = scale · table + offset_ms`` for one table, and how well it fits."""

    role: str
    scale: float
    offset_ms: float
    fit_error: float  # largest |calibrated / measured - 1| over the anchors fitted
    check_error: float | None  # the same over the held-out anchors (None: none held out)
    table_error: float  # the same for the uncalibrated table over every anchor

    def __call__(self, table_ms: float) -> float:
        return self.scale * table_ms + self.offset_ms

    def to_dict(self) -> dict[str, Any]:
        return {"scale": round(self.scale, 4), "offset_ms": round(self.offset_ms, 4),
                "fit_error": round(self.fit_error, 4),
                "check_error": None if self.check_error is None else round(self.check_error, 4),
                "table_error": round(self.table_error, 4)}


@dataclass(frozen=True)
class TableCalibration:
    """Both tables' fits and the anchors they came from."""

    target: TableFit
    draft: TableFit
    anchors: tuple[Anchor, ...]

    def apply(self, costs: CostModel) -> CostModel:
        """``costs`` with both forward tables calibrated (host overhead kept: it is
        Python on the host, not the forwards the anchors time)."""
        return replace(costs, target=_scaled(costs.target, self.target), draft=_scaled(costs.draft, self.draft))

    def to_dict(self, costs: CostModel) -> dict[str, Any]:
        """The fits and every anchor, measured against the profile's table and the fit."""
        fits = {"target": self.target, "draft": self.draft}
        return {**{role: fit.to_dict() for role, fit in fits.items()},
                "anchors": [{"role": a.role, "batch_size": a.batch_size, "context_len": a.context_len, "n": a.n,
                             "measured_ms": round(a.measured_ms, 4), "profile_ms": round(a.table_ms(costs), 4),
                             "calibrated_ms": round(fits[a.role](a.table_ms(costs)), 4), "held_out": a.held_out}
                            for a in self.anchors]}


def fit_tables(anchors: list[Anchor], costs: CostModel) -> TableCalibration:
    """Fit each table to its anchors (at least one fitted anchor per table)."""
    fits = {}
    for role in ROLES:
        mine = [a for a in anchors if a.role == role]
        used = [a for a in mine if not a.held_out]
        if not used:
            raise ValueError(f"no anchor to fit the {role} table on")
        fits[role] = fit_table(role, used, [a for a in mine if a.held_out], costs)
    return TableCalibration(fits["target"], fits["draft"], tuple(anchors))


def fit_table(role: str, used: list[Anchor], held_out: list[Anchor], costs: CostModel) -> TableFit:
    """Scale only (the geometric mean of measured / table), or scale and offset by least
    squares when the fitted anchors' ratios spread past `SHAPE_SPREAD`, their table
    values spread too and the offset fit is the better one on them.

    Where the table is nearly flat over the anchors (a tiny model's forwards are all
    dispatch) a slope and an offset cannot be told apart: two points 0.1 % apart in
    the table were once fitted as scale 15,273 and offset -111,127 ms."""
    pairs = [(a.table_ms(costs), a.measured_ms) for a in used]
    ratios = [m / t for t, m in pairs]
    tables = [t for t, _ in pairs]
    scale, offset = math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 0.0
    if len(pairs) >= 2 and max(ratios) / min(ratios) > SHAPE_SPREAD and max(tables) / min(tables) > SHAPE_SPREAD:
        affine = _least_squares(pairs)
        if affine is not None and _error(pairs, *affine) < _error(pairs, scale, 0.0):
            scale, offset = affine
    checks = [(a.table_ms(costs), a.measured_ms) for a in held_out]
    every = pairs + checks
    return TableFit(role, scale, offset, _error(pairs, scale, offset),
                    _error(checks, scale, offset) if checks else None, _error(every, 1.0, 0.0))


def _least_squares(pairs: list[tuple[float, float]]) -> tuple[float, float] | None:
    """``measured = a · table + b`` minimising squared relative error; None when it
    would not keep every calibrated cost positive."""
    # Relative error: weight each point by 1 / measured, so small forwards count as much as large ones.
    rows = [(t / m, 1 / m, 1.0) for t, m in pairs]
    saa = sum(x * x for x, _, _ in rows)
    sab = sum(x * y for x, y, _ in rows)
    sbb = sum(y * y for _, y, _ in rows)
    sa = sum(x for x, _, _ in rows)
    sb = sum(y for _, y, _ in rows)
    det = saa * sbb - sab * sab
    if abs(det) < 1e-12:
        return None
    a = (sa * sbb - sb * sab) / det
    b = (saa * sb - sab * sa) / det
    if a <= 0 or any(a * t + b <= 0 for t, _ in pairs):
        return None
    return a, b


def _error(pairs: list[tuple[float, float]], scale: float, offset: float) -> float:
    return max(abs((scale * t + offset) / m - 1) for t, m in pairs)


def _table(costs: CostModel, role: str) -> CostTable:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return costs.target if role == "target" else costs.draft


def _scaled(table: CostTable, fit: TableFit) -> CostTable:
    """``table`` with every cell calibrated; a cell never drops below 1 % of itself."""
    ms = table.ms.double()
    return CostTable(table.bucket, table.num_buckets, table.batch_sizes,
                     (fit.scale * ms + fit.offset_ms).clamp(min=0.01 * ms).to(table.ms.dtype))
