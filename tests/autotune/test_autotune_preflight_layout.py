"""``cast-autotune preflight`` checks a profile at the parallel layout it was made
for: the default ``--tp-size`` is the profile's, and another is refused in one
line, as the server would refuse the profile."""

from __future__ import annotations


from autotune.cli import main
from support import ROOT

TP4 = ROOT / "profiles" / "h100-tp4.yaml"
LLAMA_70B = ROOT / "profiles" / "models" / "llama-3.1-70b"


def preflight(*flags: str) -> int:
    return main(["preflight", "--profile", str(TP4), "--model-config", str(LLAMA_70B), "--gpu-memory-gb", "79.6",
                 *flags])


def test_the_default_tp_size_is_the_profiles_own(capsys):
    assert preflight() == 0
    out = capsys.readouterr().out
    assert "GPU memory (per rank)    79.60 GiB, --tp-size 4" in out and out.rstrip().endswith("FITS")
    assert preflight("--tp-size", "4") == 0 and capsys.readouterr().out == out


def test_another_tp_size_is_refused_in_one_line(capsys):
    assert preflight("--tp-size", "2") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        f"cast-autotune preflight: error: --tp-size 2: profile {TP4} was made for --tp-size 4 --pp-size 1 but this "
        "server runs --tp-size 2 --pp-size 1: its cost tables describe another forward; use a profile made for this "
        "layout (cast-autotune profile --backend sglang --tp-size 2, then tune)")
