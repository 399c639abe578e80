"""tools/setup_sglang_env.sh refuses to start an install the disk cannot hold."""

import os
import subprocess

from support import ROOT


def test_too_little_free_disk_is_refused_before_anything_is_installed(tmp_path):
    venv = tmp_path / "venv"
    env = {**os.environ, "SGLANG_VENV": str(venv), "SGLANG_ENV_MIN_FREE_GB": str(10**9)}
    done = subprocess.run(["bash", "tools/setup_sglang_env.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert f"{venv} needs about {10**9} GB free on its disk" in done.stderr
    assert "set SGLANG_VENV to a folder on a larger disk" in done.stderr
    assert not venv.exists()
