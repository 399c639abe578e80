"""Timing whole SGLang iterations of the CAST worker: the plugin's host-overhead
measurements (issue 33 item 4; the native engine's are ``autotune/overhead.py``).

An SGLang decode iteration is more than the worker's forwards: the scheduler picks
the batch and prepares it, the worker drafts (with CAST's host decisions between
layers), verifies and runs the draft-extend, and the scheduler processes the
result.  All of that happens between two consecutive calls of the worker's
``forward_batch_generation``, so one decode iteration's cost is the interval
from its call to the next, read with a device-synchronised clock
(``engine.timing.start_clock``) at every call.  An interval that ends in a prefill
(a request admitted in between) is not a decode iteration and is dropped.

From each interval the forwards the profile's tables charge for the same
iteration (``cast.charge(..., host=False)`` on the iteration's own plan) are
subtracted by the fit (``autotune`` stores ``step_ms`` and ``forward_ms``), which
leaves the host terms of ``cast.overhead``.  Inside the interval the target's verify
forward is timed on its own (``StepLog.timed_verify``, synchronised around it) and
logged with what the tables charge for it: the live gate reads the machine's drift
from the plain steps' verify forward (``f_T(B, c, 1)``), as the native gate times its
reference forward around a run, so a slower or faster machine is not read as host
work.  Logging is off unless the worker's
process has ``STEP_PROFILE_ENV`` set: ``cast-autotune profile --backend sglang``
sets it when it launches SGLang to time its step design
(``sglang_plugin.profile_steps``); a serving worker never syncs for it.

This module imports no SGLang, so its rules are tested on CPU with stand-in
workers (tests/plugin/test_sglang_plugin_steps.py).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..cast import IterationPlan, charge
from ..cast.policies import POLICIES
from ..engine.timing import start_clock

STEP_PROFILE_ENV = "SGLANG_CAST_STEP_PROFILE"


@dataclass(frozen=True)
class StepProfileMode:
    """What a worker started for the step design does differently: it logs every
    decode iteration to ``log`` (JSON lines of :class:`LoggedStep`) and decides with
    ``policy`` instead of its algorithm's (``eagle2`` runs the design's fixed trees;
    ``None`` keeps the algorithm's, e.g. CAST on a ``speculate: false`` profile for
    the plain-decoding runs)."""

    log: str
    policy: str | None = None

    def __post_init__(self) -> None:
        if not self.log:
            raise ValueError(f"{STEP_PROFILE_ENV}.log: expected the path of the step log, got {self.log!r}")
        if self.policy is not None and self.policy not in POLICIES:
            raise ValueError(f"{STEP_PROFILE_ENV}.policy: expected one of {sorted(POLICIES)}, got {self.policy!r}")

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> StepProfileMode | None:
        """The mode ``STEP_PROFILE_ENV`` names, ``None`` when it is unset (serving)."""
        raw = (os.environ if environ is None else environ).get(STEP_PROFILE_ENV)
        if not raw:
            return None
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"{STEP_PROFILE_ENV}: not JSON ({err})") from None
        if not isinstance(data, dict) or set(data) - {"log", "policy"}:
            raise ValueError(f"{STEP_PROFILE_ENV}: expected a JSON object with 'log' and optional 'policy', "
                             f"got {raw!r}")
        return cls(str(data.get("log", "")), data.get("policy"))


@dataclass(frozen=True)
class LoggedStep:
    """One whole decode iteration as the worker saw it; the fields of
    ``autotune.store.TimedStep``, so the profiler stores it unchanged."""

    batch_size: int
    context_len: int  # the longest committed context (what the plan was charged at)
    depth: int  # draft layers grown (0: the zero-step state, no draft)
    verified: int  # draft nodes verified per sequence
    tokens: int  # committed: accepted drafts plus one bonus per sequence
    step_ms: float  # from this iteration's call to the next, synchronised on both sides
    forward_ms: float  # what the profile's forward tables charge for it
    verify_ms: float | None = None  # the target's verify forward, timed on its own (None: not timed)
    verify_charge_ms: float | None = None  # what the target table charges for it, f_T(B, c, verified + 1)

    def speed(self) -> float | None:
        """The verify forward's time over its table charge (how much slower the
        machine ran than when profiled), ``None`` when it was not timed."""
        if self.verify_ms is None or not self.verify_charge_ms:
            return None
        return self.verify_ms / self.verify_charge_ms


def median_speed(steps: Iterable[LoggedStep]) -> float | None:
    """The median `LoggedStep.speed` of ``steps`` (``None`` when none timed its verify):
    how much slower than its forward tables the machine ran them."""
    speeds = [speed for step in steps if (speed := step.speed()) is not None]
    return statistics.median(speeds) if speeds else None


@dataclass
class _OpenStep:
    """An iteration whose call has been timed and whose end is the next call."""

    stop: Callable[[], float]
    plan: IterationPlan | None = None
    depth: int = 0
    verified: int = 0
    accept_lens: torch.Tensor | None = None  # [B] committed tokens per sequence, bonus included
    verify_ms: float | None = None  # the verify forward(s) timed inside the iteration

    def close(self, elapsed_ms: float) -> LoggedStep | None:
        """The finished iteration, or ``None`` if it never ran a decode (an idle batch)."""
        if self.plan is None or self.accept_lens is None:
            return None
        accepted = [int(n) for n in self.accept_lens.tolist()]  # after the sync: no extra wait
        plan = self.plan
        draft_ms, verify_charge_ms = charge(plan, self.verified, self.depth, max(accepted) - 1, host=False)
        return LoggedStep(plan.batch_size, plan.context_len, self.depth, self.verified, sum(accepted), elapsed_ms,
                          draft_ms + verify_charge_ms, self.verify_ms,
                          verify_charge_ms if self.verify_ms is not None else None)


class StepLog:
    """The worker's side: ``arrive`` at every ``forward_batch_generation`` call,
    ``ran`` after each decode iteration; finished iterations are appended to the
    log file at once (a profile cut short keeps what it timed)."""

    def __init__(self, path: str | Path, device: torch.device,
                 clock: Callable[[torch.device], Callable[[], float]] = start_clock) -> None:
        """``clock(device)`` starts an interval and returns its stop (``start_clock``:
        synchronised on both sides; tests pass a planted clock)."""
        self.path = Path(path)
        self.device = device
        self.clock = clock
        self._open: _OpenStep | None = None

    def arrive(self, decode: bool) -> None:
        """A call of the worker: it ends the open iteration (kept only if this call
        is a decode too: a prefill in between is not part of a decode iteration) and
        opens the next one when ``decode``."""
        stop = self.clock(self.device)  # synchronised: everything before this call has finished
        if self._open is not None and decode:
            finished = self._open.close(self._open.stop())
            if finished is not None:
                with self.path.open("a") as out:
                    out.write(json.dumps(asdict(finished)) + "\n")
        self._open = _OpenStep(stop) if decode else None

    def timed_verify(self, forward: Callable) -> Callable:
        """``forward`` (the target worker's ``forward_batch_generation``) with its verify
        calls (``is_verify=True``) timed, synchronised on both sides, into the open
        iteration; its other calls (prefills) run untimed."""
        def timed(*args, **kwargs):
            if not kwargs.get("is_verify") or self._open is None:
                return forward(*args, **kwargs)
            stop = self.clock(self.device)
            output = forward(*args, **kwargs)
            self._open.verify_ms = (self._open.verify_ms or 0.0) + stop()
            return output
        return timed

    def ran(self, plan: IterationPlan, depth: int, verified: int, accept_lens: torch.Tensor | None) -> None:
        """What the open iteration ran: its plan (charged at its batch size and
        context), the layers drafted, the nodes verified per sequence and the
        tokens each sequence committed ``[B]`` (read after the next call's sync;
        ``None``: the iteration produced none and is not logged)."""
        if self._open is not None and accept_lens is not None:
            self._open.plan, self._open.depth, self._open.verified = plan, depth, verified
            self._open.accept_lens = accept_lens.clone()  # the worker may reuse the buffer


def read_steps(path: str | Path, start: int = 0) -> tuple[list[LoggedStep], int]:
    """The steps logged in ``path`` from byte ``start`` on, and the offset after
    them (the profiler reads each batch size's steps as they arrive)."""
    path = Path(path)
    if not path.exists():
        return [], start
    with path.open("rb") as log:
        log.seek(start)
        data = log.read()
    complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
    steps = [LoggedStep(**json.loads(line)) for line in complete.decode().splitlines() if line.strip()]
    return steps, start + len(complete)
