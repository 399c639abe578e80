"""Which n `profile` times by default: small trees' verify widths sit on kernel
staircases, so the default grid must not interpolate across a step."""

from autotune.grid import ProfileGrid
from sglang_cast.engine.timing import interpolate_row


def four_row_blocks(n: int) -> float:
    """ms of a forward whose kernel computes rows in blocks of 4, as the CPU's packed
    int4 GEMM does (docs/results/2026-11-29_verify_width_amx.md)."""
    return 20.0 + 8.0 * ((n + 3) // 4)


def test_the_default_grid_charges_every_small_width_what_it_costs():
    grid = ProfileGrid(max_n=32)
    timed = grid.n_values("target")
    row = interpolate_row({n: four_row_blocks(n) for n in timed}, 32)
    assert [round(ms, 6) for ms in row[:16]] == [four_row_blocks(n) for n in range(1, 17)]
    assert timed[-1] == 32 and 24 in timed and 20 not in timed  # sparse past 16


def test_an_explicit_list_is_clipped_and_keeps_both_ends():
    assert ProfileGrid(max_n=10, n_mode=(2, 4, 64)).n_values("target") == (1, 2, 4, 10)
