"""Start-up calibration: the fit of a profile's tables to anchors timed here
(cast/table_fit.py), the timing (engine/table_calibration.py) and when the server does
it (server/startup_calibration.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from sglang_cast.cast import CostModel, CostTable
from sglang_cast.cast.table_fit import Anchor, fit_tables
from sglang_cast.engine.table_calibration import DRAFT_POINTS, TARGET_POINTS, time_anchors
from sglang_cast.hardware import MachineIdentity
from sglang_cast.profile import PROFILE_DIR, Profile, ProfileError, load_profile
from sglang_cast.server.startup_calibration import ServedCalibration, wanted
from sglang_cast.server.launch_args import build_parser, parse_launch_args


def costs() -> CostModel:
    """A profile's tables: target 10 + 2n ms at B = 1 (x1.5 at B = 4), draft a tenth."""
    n = torch.arange(1, 33, dtype=torch.float64)
    target = torch.stack([10 + 2 * n, 1.5 * (10 + 2 * n)]).view(2, 1, -1)
    return CostModel(CostTable(1024, 1, (1, 4), target), CostTable(1024, 1, (1, 4), target / 10))


def anchors(measure, points=((1, 1), (1, 4), (1, 16), (4, 1), (4, 8))) -> list[Anchor]:
    """Anchors whose measured ms is ``measure(role, table_ms)``; every other one held out."""
    model = costs()
    out = []
    for role in ("target", "draft"):
        table = model.target if role == "target" else model.draft
        out += [Anchor(role, b, 128, n, measure(role, table(b, 128, n)), held_out=i % 2 == 1)
                for i, (b, n) in enumerate(points)]
    return out


def test_a_machine_that_is_uniformly_faster_gets_one_scale_per_table():
    fit = fit_tables(anchors(lambda role, ms: ms * (0.6 if role == "target" else 2.0)), costs())
    assert fit.target.scale == pytest.approx(0.6) and fit.target.offset_ms == 0
    assert fit.draft.scale == pytest.approx(2.0) and fit.draft.offset_ms == 0
    assert fit.target.check_error == pytest.approx(0, abs=1e-9)
    assert fit.target.table_error == pytest.approx(1 / 0.6 - 1)  # the profile charged 1.67x the measured
    calibrated = fit.apply(costs())
    assert calibrated.target(1, 128, 8) == pytest.approx(0.6 * costs().target(1, 128, 8))
    assert calibrated.draft(4, 300, 3) == pytest.approx(2.0 * costs().draft(4, 300, 3))
    assert calibrated.overhead == costs().overhead


def test_a_table_whose_fixed_part_differs_gets_an_offset_that_carries_to_held_out_anchors():
    # Here each forward costs 0.5x the table plus 4 ms of dispatch: a scale alone cannot fit both ends.
    fit = fit_tables(anchors(lambda role, ms: 0.5 * ms + 4.0), costs())
    assert fit.target.scale == pytest.approx(0.5, rel=1e-6) and fit.target.offset_ms == pytest.approx(4.0, rel=1e-6)
    assert fit.target.check_error == pytest.approx(0, abs=1e-6)
    assert fit.draft.offset_ms == pytest.approx(4.0, rel=1e-6)  # the draft's table is small: the offset dominates


def test_noise_alone_keeps_the_scale_only_fit():
    noise = iter([1.03, 0.98, 1.01, 0.97, 1.02] * 2)
    fit = fit_tables(anchors(lambda role, ms: 1.4 * ms * next(noise)), costs())
    assert fit.target.offset_ms == 0 and fit.target.scale == pytest.approx(1.4, rel=0.03)
    assert fit.target.check_error < 0.06


def test_a_table_flat_over_the_anchors_keeps_the_scale_only_fit():
    """A tiny model's forwards all cost about the same in the table: measured ratios
    that spread there cannot tell a slope from an offset, so the scale-only fit stays
    (an affine fit through two table values 0.1 % apart once gave scale 15,273)."""
    n = torch.arange(1, 33, dtype=torch.float64)
    flat = (7.27 + 0.001 * n).view(1, 1, -1)
    model = CostModel(CostTable(1024, 1, (1,), flat), CostTable(1024, 1, (1,), flat / 10))
    measured = {1: 0.74, 4: 0.95, 10: 0.96, 16: 1.60}
    points = [Anchor(role, 1, 128, n, measured[n] / (1 if role == "target" else 10), held_out=False)
              for role in ("target", "draft") for n in measured]
    fit = fit_tables(points, model)
    assert fit.target.offset_ms == 0 and 0.09 < fit.target.scale < 0.2
    assert fit.draft.offset_ms == 0


def test_a_table_without_a_fitted_anchor_is_an_error():
    only_target = [a for a in anchors(lambda role, ms: ms) if a.role == "target"]
    with pytest.raises(ValueError, match="no anchor to fit the draft table"):
        fit_tables(only_target, costs())


def test_anchors_are_timed_on_the_loaded_models_and_fit_the_tables():
    from support.training import random_head, tiny

    target = tiny()
    draft = random_head(target)
    timings = time_anchors(target.model, draft, max_batch=4)
    roles = [a.role for a in timings.anchors]
    assert roles.count("target") == sum(b <= 4 for b, _ in TARGET_POINTS)
    assert roles.count("draft") == sum(b <= 4 for b, _ in DRAFT_POINTS)
    assert all(a.measured_ms > 0 and a.context_len == 128 for a in timings.anchors)
    assert {a.held_out for a in timings.anchors} == {True, False}
    fit = timings.fit(costs())
    assert fit.target.scale > 0 and fit.draft.scale > 0


def machine(**changes) -> MachineIdentity:
    return replace(MachineIdentity(device_type="cpu", name="AMD EPYC", cpu_count=2, isa_class="avx2",
                                   vendor="AuthenticAMD", family=25, model=1, stepping=1), **changes)


def profile_from(recorded: MachineIdentity) -> Profile:
    """The shipped CPU profile as if ``recorded`` had measured it."""
    shipped = load_profile(PROFILE_DIR / "cpu.yaml").profile
    return replace(shipped, provenance={**shipped.provenance, "machine": recorded.to_dict()})


@pytest.mark.parametrize("mode, recorded, expected", [
    ("auto", machine(), False),  # the profile's own machine
    ("auto", machine(model=17, family=25), True),  # same ISA class, another CPU
    ("auto", machine(isa_class="amx"), True),
    ("on", machine(), True),
    ("off", machine(isa_class="amx"), False),
])
def test_calibration_is_wanted_where_the_profile_was_measured_elsewhere_or_asked_for(mode, recorded, expected):
    assert wanted(mode, profile_from(recorded), machine()) is expected


def test_a_reloaded_profile_is_fitted_to_the_start_up_anchors_and_one_from_here_is_served_as_is():
    served = ServedCalibration("auto", machine(), time_free_timings(), report=None)
    foreign = profile_from(machine(isa_class="amx"))
    settings, calibration = served.settings_for(foreign, replace(foreign.settings, costs=costs()))
    assert settings.costs.target(1, 128, 1) == pytest.approx(0.5 * costs().target(1, 128, 1))
    assert calibration.report["target"]["scale"] == pytest.approx(0.5)
    own = profile_from(machine())
    settings, calibration = served.settings_for(own, replace(own.settings, costs=costs()))
    assert settings.costs.target(1, 128, 1) == costs().target(1, 128, 1) and calibration.report is None


def time_free_timings():
    from sglang_cast.engine.table_calibration import AnchorTimings

    return AnchorTimings(tuple(anchors(lambda role, ms: 0.5 * ms)), seconds=1.5)


def test_cast_calibrate_is_a_native_engine_flag():
    parser = build_parser()
    assert parse_launch_args(["--cast-calibrate", "off"], parser).calibrate == "off"
    assert parse_launch_args([], parser).calibrate == "auto"
    with pytest.raises(SystemExit):
        parse_launch_args(["--backend", "sglang", "--cast-calibrate", "on"], parser)


def test_a_profile_states_its_explore_share_and_refuses_one_above_two_percent():
    shipped = load_profile(PROFILE_DIR / "cpu.yaml").profile
    assert shipped.explore_share == 0.02  # not written in the file: the default
    data = {**shipped.to_dict(), "explore_share": 0.005}
    assert Profile.from_dict(data).explore_share == 0.005
    assert Profile.from_dict(Profile.from_dict(data).to_dict()).explore_share == 0.005
    for bad in (0.03, -0.01, "often", True):
        with pytest.raises(ProfileError, match=r"profile.explore_share: expected a number in \[0, 0.02\]"):
            Profile.from_dict({**data, "explore_share": bad})


def test_show_says_which_profile_this_machine_serves_and_whether_it_was_measured_here():
    from autotune.report import served_profile_line

    line = served_profile_line()
    assert line.startswith(str(PROFILE_DIR))
    assert "measured on this machine" in line or "the server calibrates its tables at start-up" in line


def test_show_names_a_served_profile_tuned_with_another_head_than_the_shipped_one(tmp_path, monkeypatch):
    import autotune.report as report
    from sglang_cast.engine.build import default_draft_path
    from sglang_cast.models.digest import weights_digest
    from sglang_cast.profile import save_profile

    shipped = load_profile(PROFILE_DIR / "cpu.yaml").profile
    head = weights_digest(default_draft_path(None))
    for recorded, noted in (("sha256:000000000000", True), (head, False)):
        model = {**shipped.model, "draft": f"sglang_cast/assets/smollm2-135m-eagle#{recorded}"}
        path = save_profile(replace(shipped, model=model), tmp_path / "cpu.yaml")
        monkeypatch.setattr(report, "find_profile", lambda label: path)
        lines = report.served_profile_line().splitlines()
        assert len(lines) == (2 if noted else 1), lines
        if noted:
            assert recorded in lines[1] and head in lines[1] and "re-tune" in lines[1]
