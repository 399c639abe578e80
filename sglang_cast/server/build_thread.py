"""Build the served engine on a thread that has ended before serving starts.

Why: torch's CPU ops run their parallel regions on libgomp (OpenMP), which keeps a
worker pool for every thread that has entered one.  While the threads it manages
outnumber the CPUs, a worker waits for the next region with a short throttled spin
(``gomp_throttled_spin_count_var``) and then sleeps, so every region pays a futex
wake-up.  The server's engine thread runs every iteration; had the main thread also
loaded and timed the model, its pool would live on beside the engine thread's: on a
2-core EPYC the server then decoded at 53-65 % of the engine's speed (B = 1 plain
decoding 61.7 tok/s served against 109.4 with this module;
docs/results/2026-12-07_served_omp_pools_avx512.md).  A build thread's pool goes
when the thread exits, so the engine thread's is the only one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_on_passing_thread(build: Callable[[], T]) -> T:
    """``build()`` run on a new thread, waited for, and its result returned (or what it
    raised re-raised here, ``SystemExit`` from a one-line argument error included).
    The thread is a daemon, so an interrupt while waiting does not wait for the build."""
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, build()))
        except BaseException as err:  # noqa: BLE001 - handed to the caller, whatever it is
            outcome.append((False, err))

    thread = threading.Thread(target=target, name="cast-build", daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]
