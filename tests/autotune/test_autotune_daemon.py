"""The daemon publishes, stops cleanly on SIGTERM, and never publishes a profile
that fails validation.

Run as a script (``python tests/autotune/test_autotune_daemon.py DB OUT``) this file is the
daemon process the SIGTERM test signals: the real ``Daemon`` on tiny models.
"""

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.analytic import AnalyticGrid, analytic_profile
from autotune.daemon import Daemon, DaemonConfig, ServerWatch, live_drift
from autotune.errors import AutotuneError
from autotune.models import format_target_id
from autotune.publish import publish
from autotune.store import Store
from autotune.workflow import TuneConfig
from sglang_cast.profile import Profile, load_profile
from support import ROOT
from support.autotune import GRID, SETUP, SPACE, fill, tiny_pair, tiny_prompts


def daemon_config(output: Path, label: str = "tiny") -> DaemonConfig:
    # No live confirmation here: test_autotune_pipeline covers it, this file covers publishing and stopping.
    tune = TuneConfig(label=label, output=output, buckets=(1,), trials=3, space=SPACE, confirm_prompts=0)
    return DaemonConfig(tune=tune, grid=GRID, interval_s=1e6, poll_s=0.2, overhead_warmup=1, overhead_steps=2)


def test_daemon_stops_on_sigterm_and_leaves_a_valid_profile(tmp_path):
    db, output = tmp_path / "a.db", tmp_path / "profiles" / "tiny.yaml"
    fill(Store(db), prompts=1, batch_sizes=(1,))
    # This checkout's packages (and the tests' helpers), not whichever checkout the environment installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "tests"),
                                                                      os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, __file__, str(db), str(output)], stderr=subprocess.PIPE, text=True,
                               env=env)
    try:
        deadline = time.monotonic() + 120
        while not output.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
        assert output.exists(), "the daemon published nothing"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    log = process.stderr.read()
    assert "SIGTERM received" in log and log.rstrip().endswith("stopped") and "Traceback" not in log
    assert load_profile(output).profile.label == "tiny"
    assert not list(output.parent.glob(".*"))
    assert [p.label for p in Store(db).publications()] == ["tiny"]


def test_a_stop_request_during_a_step_publishes_nothing(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=1, batch_sizes=(1,))
    daemon = Daemon(pair, store, SETUP, daemon_config(tmp_path / "tiny.yaml"), tiny_prompts())
    daemon.stop.set()  # as the SIGTERM handler does
    assert daemon.step() is None
    assert not (tmp_path / "tiny.yaml").exists() and store.publications() == []


def test_an_invalid_profile_is_never_published(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=1, batch_sizes=(1,))
    output = tmp_path / "tiny.yaml"
    good = Daemon(pair, store, SETUP, daemon_config(output), tiny_prompts())
    first = good.step()
    before = output.read_bytes()
    # An empty label fails Profile validation: the step must fail and keep the old file.
    bad = Daemon(pair, store, SETUP, daemon_config(output, label=""), tiny_prompts())
    with pytest.raises(AutotuneError, match="refusing to publish .* profile.label"):
        bad.step()
    assert output.read_bytes() == before and load_profile(output).version == first.published.version
    assert not list(tmp_path.glob(".tiny.yaml*"))
    assert [p.version for p in store.publications()] == [first.published.version]


def test_a_step_profiles_every_weight_format_and_tunes_them_together(tmp_path):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=1, batch_sizes=(1,))
    # The tiny fp32 pair stands in for a packed one: only the measurement setup (the target id) differs.
    packed = replace(SETUP, target_model=format_target_id(SETUP.target_model, "int4/int8"))
    assert not store.measurements(packed)
    config = daemon_config(tmp_path / "tiny.yaml")
    config = replace(config, tune=replace(config.tune, weight_formats=("fp32", "int4/int8")))
    daemon = Daemon(pair, store, SETUP, config, tiny_prompts(), formats={"fp32": (pair, SETUP), "int4/int8": (pair, packed)})
    outcome = daemon.step()
    assert store.measurements(packed), "the daemon did not profile the second format"
    assert [t.weight_format for t in outcome.formats] == ["fp32", "int4/int8"] and outcome.not_profiled == ()
    assert load_profile(tmp_path / "tiny.yaml").profile.weight_format == outcome.weight_format


def test_publish_validates_the_written_bytes_before_renaming(tmp_path):
    output = tmp_path / "p.yaml"
    profile = analytic_profile("h100", grid=AnalyticGrid(batch_sizes=(1,), ctx_buckets=1, max_n=4, draft_max_n=4))
    publish(profile, output)
    broken = Profile(label=profile.label, device="", source=profile.source, settings=profile.settings)
    with pytest.raises(AutotuneError, match="profile.device"):
        publish(broken, output)
    assert load_profile(output).profile.device == profile.device
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]



def calibration_info(speculative_ratio=1.0, plain_ratio=None, iterations=32, gated=False, version="v1"):
    """A ``/server_info`` as sglang_cast/server/calibration.py writes it, one bucket."""
    def window(ratio):
        return {"iterations": 0 if ratio is None else iterations, "live_over_predicted": ratio}

    bucket = {"max_batch_size": 4, "speculate_served": True, "speculate_live": not gated,
              "speculative": window(speculative_ratio), "plain": window(plain_ratio)}
    return {"cast_profile": {"version": version},
            "cast_live_calibration": {"config": {"min_samples": 16}, "buckets": [bucket]}}


def test_live_drift_names_the_bucket_the_kind_and_the_ratio_past_the_margin():
    assert live_drift(calibration_info(1.1), margin=0.15) == []
    assert live_drift(calibration_info(1.5), margin=0.15) == [
        "bucket <= 4: speculative iterations ran 1.50x their predicted ms (margin 15%, 32 iterations)"]
    assert live_drift(calibration_info(0.5, plain_ratio=0.8), margin=0.15) == [
        "bucket <= 4: speculative iterations ran 0.50x their predicted ms (margin 15%, 32 iterations)",
        "bucket <= 4: plain iterations ran 0.80x their predicted ms (margin 15%, 32 iterations)"]
    assert live_drift(calibration_info(3.0, iterations=15), margin=0.15) == [], "a window not yet full"
    assert live_drift(calibration_info(gated=True), margin=0.15) == [
        "bucket <= 4: the server's live gate switched speculation off"]
    assert live_drift({"cast_profile": None}, margin=0.15) == [], "a server without live calibration"


def test_the_daemon_reads_a_real_servers_drift_once_per_served_profile(tmp_path, capsys):
    from support.server import SHAPE, complete_all, serve, tiny_engine

    from sglang_cast.cast import BucketSettings, CostModel, PolicySettings

    # The tiny model runs far below the 10 s plain step this cost model charges: drift on any machine.
    settings = PolicySettings(buckets=(BucketSettings(64, SHAPE),), costs=CostModel.linear(1.0, 9999.0))
    with serve(tiny_engine("cast", settings=settings)) as server:
        assert all(r.status_code == 200 for r in complete_all(server, ["alpha"]).values())
        config = replace(daemon_config(tmp_path / "tiny.yaml"), server=ServerWatch(server.url, margin=0.15))
        daemon = Daemon(tiny_pair(), Store(tmp_path / "a.db"), SETUP, config, tiny_prompts())
        reasons = daemon.server_drift()
        assert reasons and all(line.startswith("bucket <= 64: ") for line in reasons)
        assert daemon.server_drift() == [], "the same served profile is answered once"
    unreachable = replace(config, server=ServerWatch(server.url, timeout_s=1.0))
    assert Daemon(tiny_pair(), Store(tmp_path / "a.db"), SETUP, unreachable, tiny_prompts()).server_drift() == []
    assert f"server {server.url} not read" in capsys.readouterr().err
    with pytest.raises(ValueError, match="server url must start with http:// or https://, got 'localhost:1'"):
        ServerWatch("localhost:1")


def test_a_drift_step_re_profiles_every_grid_point(tmp_path, capsys):
    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=1, batch_sizes=(1,))
    daemon = Daemon(pair, store, SETUP, daemon_config(tmp_path / "tiny.yaml"), tiny_prompts())
    daemon.step()
    assert f"0 points measured, {len(GRID.points())} already stored" in capsys.readouterr().err
    daemon.step(reprofile=True)
    assert f"{len(GRID.points())} points measured, 0 already stored" in capsys.readouterr().err


def test_a_step_times_the_host_overhead_and_a_drift_step_re_times_it(tmp_path, capsys):
    """The daemon measures what tune charges: the whole-step runs missing for the setup
    (then the published profile carries the fitted overhead), and every run again
    after live drift, the stale steps dropped first."""
    from autotune.overhead import PROFILE, StepDesign

    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=1, batch_sizes=(1,))
    config = daemon_config(tmp_path / "tiny.yaml")
    runs = len(StepDesign.for_grid(GRID).runs()) * len(GRID.batch_sizes)
    daemon = Daemon(pair, store, SETUP, config, tiny_prompts())
    daemon.step()
    assert f"host overhead fp32: {runs} runs of whole steps timed, 0 already stored" in capsys.readouterr().err
    assert load_profile(tmp_path / "tiny.yaml").profile.settings.costs.overhead is not None
    first = len(store.step_cells(SETUP, PROFILE))
    daemon.step()
    assert f"host overhead fp32: 0 runs of whole steps timed, {runs} already stored" in capsys.readouterr().err
    daemon.step(reprofile=True)
    err = capsys.readouterr().err
    assert "stored steps dropped to re-time them" in err
    assert f"host overhead fp32: {runs} runs of whole steps timed, 0 already stored" in err
    assert len(store.step_cells(SETUP, PROFILE)) == first == runs


if __name__ == "__main__":
    db, output = sys.argv[1], Path(sys.argv[2])
    daemon = Daemon(tiny_pair(), Store(db), SETUP, daemon_config(output), tiny_prompts())
    daemon.install_signal_handlers()
    daemon.run()
