"""Cost tables from the measurements table.

The database keeps only timed points; a ``CostTable`` needs a full rectangle
``[batch size][context bucket][n = 1..N]``.  Rows are completed with
``interpolate_row`` (linear between timed ``n``), and the provenance says which
``n`` were timed, so a reader of the YAML can tell measurement from interpolation.
A batch size whose rows are incomplete (an interrupted ``profile``) is left out
and named, rather than silently shortening every other row.

The host-overhead table is fitted here too, from every stored whole step of the
setup (``profile``'s step design and ``tune``'s live runs), on the forward tables'
grid (``cast.fit_overhead``).  No stored step: no overhead table, and every cost is
the forwards' alone (the paper's model).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from sglang_cast.cast import CostModel, CostTable, OverheadTable, fit_overhead
from sglang_cast.cast.table_fit import TableCalibration
from sglang_cast.engine.timing import interpolate_row

from .errors import AutotuneError
from .store import Measurement, Setup, StepRecord, Store, nearest_setup_hint


@dataclass(frozen=True)
class RoleTable:
    table: CostTable
    timed_n: tuple[int, ...]
    left_out: tuple[int, ...] = ()  # batch sizes with incomplete rows


@dataclass(frozen=True)
class MeasuredCosts:
    costs: CostModel
    target: RoleTable
    draft: RoleTable
    points: int
    load_avg: tuple[float, float] = field(default=(0.0, 0.0))  # min/max while measuring
    steps: dict[str, int] = field(default_factory=dict)  # whole steps the overhead was fitted on, per source
    # Set when the tables are another machine's profile fitted to this one (`tune --calibrate-from`):
    # the profile and the fit, instead of measurements in the database.
    calibrated_from: dict[str, Any] | None = None

    def provenance(self) -> dict[str, Any]:
        def role(info: RoleTable) -> dict[str, Any]:
            table = info.table
            return {
                "batch_sizes": list(table.batch_sizes),
                "ctx_bucket": table.bucket,
                "ctx_buckets": table.num_buckets,
                "max_n": table.max_tokens,
                "timed_n": list(info.timed_n),
                "interpolated_n": "every other n in 1..max_n, linear between timed n (interpolate_row)",
                "incomplete_batch_sizes_left_out": list(info.left_out),
            }

        if self.costs.overhead is None:
            overhead = "not measured: no whole steps stored for this setup (every cost is the forwards' alone)"
        else:
            overhead = {"steps": dict(self.steps), "fit": "least squares per batch size and context bucket "
                        "(cast.fit_overhead); cells without steps take the nearest measured cell's terms"}
        if self.calibrated_from is not None:
            return {"calibrated_from": self.calibrated_from,
                    "overhead": "the profile's host-overhead table, kept (the anchors time forwards only)"}
        return {"timed_points": self.points, "load_avg_1min": list(self.load_avg),
                "target": role(self.target), "draft": role(self.draft), "overhead": overhead}


def calibrated_costs(profile_path: str, profile_costs: CostModel, fit: TableCalibration,
                     report: dict[str, Any]) -> MeasuredCosts:
    """Another machine's profile tables fitted to this one (`engine/table_calibration.py`),
    as the tuner takes measured ones; ``report`` (the fit and its anchors) goes into the
    published profile's provenance."""
    costs = fit.apply(profile_costs)
    return MeasuredCosts(costs, RoleTable(costs.target, ()), RoleTable(costs.draft, ()), len(fit.anchors),
                         calibrated_from={"profile": profile_path, **report})


def _role_table(rows: list[Measurement], role: str, ctx_bucket: int | None) -> RoleTable:
    points: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    for row in rows:
        points[(row.batch_size, row.context_len)][row.n] = row.median_ms
    if not points:
        raise AutotuneError(f"no {role} measurements for this setup; run `cast-autotune profile` first")
    bucket = ctx_bucket or min(c for _, c in points)
    batch_sizes = sorted({b for b, _ in points})
    depth = {b: 0 for b in batch_sizes}  # consecutive buckets L, 2L, ... present per batch size
    for b in batch_sizes:
        while (b, (depth[b] + 1) * bucket) in points:
            depth[b] += 1
    num_buckets = max(depth.values())
    if num_buckets == 0:
        raise AutotuneError(f"--ctx-bucket: no {role} measurements at context {bucket}")
    max_n = max(max(points[(b, (m + 1) * bucket)]) for b in batch_sizes if depth[b] == num_buckets
                for m in range(num_buckets))
    complete, left_out = [], []
    for b in batch_sizes:
        rows_b = [points.get((b, (m + 1) * bucket), {}) for m in range(num_buckets)]
        if depth[b] == num_buckets and all(1 in r and max(r) >= max_n for r in rows_b):
            complete.append(b)
        else:
            left_out.append(b)
    if not complete:
        raise AutotuneError(f"every {role} batch size has incomplete rows ({left_out}); rerun `cast-autotune profile`")
    ms = [[interpolate_row(points[(b, (m + 1) * bucket)], max_n) for m in range(num_buckets)] for b in complete]
    timed = sorted({n for (b, _), row in points.items() if b in complete for n in row if n <= max_n})
    table = CostTable(bucket, num_buckets, tuple(complete), torch.tensor(ms, dtype=torch.float64))
    return RoleTable(table, tuple(timed), tuple(left_out))


def fitted_overhead(records: list[StepRecord], grid: CostTable) -> OverheadTable | None:
    """The overhead table of ``records`` on ``grid``'s batch sizes and buckets; ``None`` without records."""
    if not records:
        return None
    return fit_overhead([r.timed().sample() for r in records], grid.batch_sizes, grid.bucket, grid.num_buckets)


def measured_costs(store: Store, setup: Setup, ctx_bucket: int | None = None,
                   overhead: bool = True) -> MeasuredCosts:
    """The newest measurement of every point of ``setup`` as a ``CostModel``, with the
    host overhead fitted from the setup's stored steps (``overhead=False``: the
    forwards alone, what a step's residual is measured against)."""
    rows = store.measurements(setup)
    if not rows:
        raise AutotuneError(f"no measurements in {store.path} for device {setup.device!r}, models "
                            f"{setup.target_model} + {setup.draft_model} ({setup.dtype}, torch {setup.torch_version}); "
                            f"{nearest_setup_hint(store.setups(), [setup])}; run `cast-autotune profile` first")
    target = _role_table([r for r in rows if r.role == "target"], "target", ctx_bucket)
    draft = _role_table([r for r in rows if r.role == "draft"], "draft", ctx_bucket)
    loads = [r.load_avg for r in rows]
    steps = store.step_records(setup) if overhead else []
    costs = CostModel(target=target.table, draft=draft.table, overhead=fitted_overhead(steps, target.table))
    return MeasuredCosts(costs, target, draft, len(rows), (min(loads), max(loads)),
                         dict(Counter(r.source for r in steps)))
