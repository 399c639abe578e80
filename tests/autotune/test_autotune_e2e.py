"""End to end on the real embedded model (slow): quick profile (forward tables and
host overhead) → collect → tune (with the live gate) → YAML, published into the file a running server watches; the server hot-reloads it
and ``GET /cast/profile`` reports the new version.

Until the trained head ships, the draft is a random-weight EAGLE head saved to
disk, so the autotuner and the server load the same pair.
"""

import shutil
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch

from autotune.models import random_eagle_head
from sglang_cast.models import load_target, save_draft
from sglang_cast.profile import load_profile
from support import ROOT

pytestmark = pytest.mark.slow


def cli(*args: str, timeout: float = 900) -> str:
    run = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=timeout,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_quick_profile_collect_tune_and_the_server_hot_reloads_the_published_profile(tmp_path):
    target, config, _ = load_target(None, "cpu", torch.float32)
    head = tmp_path / "random-head"
    save_draft(random_eagle_head(target, config, seed=0), head)
    db, watched = str(tmp_path / "autotune.db"), tmp_path / "cpu.yaml"
    # One torch thread: on a shared CPU a team of threads spin-waits through every small op.
    pair = ("--draft-path", str(head), "--db", db, "--quiet", "--threads", "1")

    profiled = cli("profile", "--gpu", "cpu", "--quick", "--weight-format", "fp32", "--overhead-steps", "2",
                   "--overhead-warmup", "1", *pair)
    assert "host overhead (ms beyond the forwards" in profiled  # whole steps timed and fitted
    cli("collect", "--num-prompts", "2", "--max-new-tokens", "12", "--top-k", "4", "--max-depth", "3", *pair)

    # The server starts on a profile with larger trees than any the tuner may pick
    # (the server refuses a reload needing more KV room than it reserved at start).
    shutil.copy(ROOT / "profiles" / "h100.yaml", watched)
    before = load_profile(watched).version
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "sglang_cast.launch_server", "--cast-profile", str(watched), "--port", str(port),
         "--speculative-draft-model-path", str(head), "--context-length", "512", "--max-running-requests", "1",
         "--log-level", "warning", "--weight-format", "fp32"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/cast/profile"

    def status():
        try:
            return httpx.get(url, timeout=5).json()
        except httpx.HTTPError:
            assert server.poll() is None, server.stderr.read()
            return None

    try:
        assert wait_for(status, 300, "the server")["version"] == before
        out = cli("tune", "--gpu", "cpu", "--weight-format", "fp32", "--buckets", "1", "--trials", "8", "--top-k", "4", "--max-depth", "3",
                  "--max-tokens", "12", "--confirm-prompts", "1", "--confirm-max-new-tokens", "8",
                  "--output", str(watched), *pair)
        published = load_profile(watched)
        assert published.version != before and f"version {published.version}" in out
        # The bucket is gated live against plain decoding, unless replay already switched it off.
        assert "live gate B=1: CAST" in out or "(off by replay)" in out
        assert published.profile.settings.costs.overhead is not None  # tuned with the measured host work
        reloaded = wait_for(lambda: (s := status()) and s["version"] == published.version and s, 120,
                            "the hot reload")
        assert reloaded["label"] == "cpu" and reloaded["source"] == "measured" and not reloaded["last_reload_error"]
    finally:
        server.terminate()
        server.wait(timeout=60)
