"""``weight_format="auto"``: which format the target's linears / LM head run in here.

The one rule every entry point (``EngineArgs``, the server, ``tools/bench.py``,
``cast-autotune``) goes through.  The cheapest format depends on the CPU (AMX,
AVX-512 or AVX2 kernels) and on the verify size M, so it is decided by measurement,
never from the CPU's name:

1. an explicit format is used as given;
2. on CUDA, ``auto`` is the dense model dtype (packed formats are CPU-only); what then
   runs is named by `running_format` for the dtype (``bf16``, not the spec ``fp32``);
3. a *measured* profile that records ``model.weight_format`` decides: its trees and
   cost tables were tuned for that format.  If the profile records another ISA class
   than this CPU's, one warning names both and the fix;
4. otherwise (no profile, an analytic profile, an old profile without a format) a few
   target forwards of every candidate (`candidates`: the AMX tile and VNNI formats join
   on CPUs that can run them) are timed at M = 1 and, when the policy
   speculates, at the largest verify size; the format with the lowest summed cost
   wins (M = 1 is what a non-speculating bucket and plain decoding pay, the verify
   size what a speculating iteration pays; a format must be cheap at both).
   Candidates are timed round-robin (every format once per round) so a burst of load
   on a shared machine hits all of them alike; the measurement stops starting new
   rounds after ``MEASURE_BUDGET_S``.  When a draft head runs (``draft_sizes``), its
   format (``WeightFormat.draft``) is chosen the same way next: draft forwards of every
   `draft_candidates` format on the chosen target, at one token and at a layer's
   rows (the largest top-k).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from ..cast import PolicySettings
from ..hardware import isa_class
from ..models.weights import DraftFormat, WeightFormat, WeightFormatError
from .timing import round_robin_medians

AUTO = "auto"
DENSE = str(WeightFormat())  # "fp32": the model's own dtype, no packing
DENSE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}  # a dense weight, by dtype
CANDIDATES = ("fp32", "bf16", "int8", "int4/int8")
DRAFT_CANDIDATES = ("fp32", "bf16", "int8")  # the draft head's linears (int4 re-quantises a trained head)
AMX_CANDIDATES = ("int4amx/int8amx",)  # timed too where the AMX tile kernels run (models/amx_tiles.py)
AMX_DRAFT_CANDIDATES = ("int8amx",)
VNNI_CANDIDATES = ("int4vnni/int8vnni",)  # timed too where the VNNI kernels run (models/vnni_dot.py)
VNNI_DRAFT_CANDIDATES = ("int8vnni",)
MEASURE_CONTEXT = 256  # committed tokens the timed forwards attend to
MEASURE_ROUNDS = 5  # timed rounds per (format, M); the median is kept
MEASURE_WARMUP = 2  # untimed rounds first (allocator growth, kernel selection)
MEASURE_BUDGET_S = 60.0  # no new round starts after this; at least one timed round always runs

log = logging.getLogger(__name__)

# Times one target forward of format ``fmt`` with ``m`` new tokens at batch 1, in ms.
TimeOnce = Callable[[str, int], float]


@dataclass(frozen=True)
class FormatChoice:
    """The format chosen and why: ``explicit``, ``cuda``, ``profile`` or ``measured``
    (then ``costs_ms[format][M]`` holds the median ms of each timed forward)."""

    weight_format: str
    reason: str
    costs_ms: dict[str, dict[int, float]] = field(default_factory=dict)
    draft_costs_ms: dict[str, dict[int, float]] = field(default_factory=dict)  # the draft's, when measured

    def describe(self, dtype: torch.dtype = torch.float32) -> str:
        """One line for the log; the format named for what runs in a model of ``dtype``."""
        if not self.costs_ms:
            return f"weight format {running_format(self.weight_format, dtype)} ({self.reason})"

        def listed(costs: dict[str, dict[int, float]]) -> str:
            return "; ".join(f"{fmt} " + ", ".join(f"M={m} {ms:.1f} ms" for m, ms in by_m.items())
                             for fmt, by_m in costs.items())
        draft = f"; draft head: {listed(self.draft_costs_ms)}" if self.draft_costs_ms else ""
        return f"weight format {self.weight_format} (measured, cheapest summed over M: {listed(self.costs_ms)}{draft})"


def parse_requested(spec: str) -> str:
    """``auto`` or a canonical format name; ``ValueError`` naming ``weight_format`` otherwise."""
    if spec == AUTO:
        return AUTO
    try:
        return str(WeightFormat.parse(spec))
    except WeightFormatError as err:
        raise WeightFormatError(f"{err.reason} (or 'auto')") from None


def running_format(weight_format: str, dtype: torch.dtype) -> str:
    """The name of what multiplies at run time: a packed part (``bf16``, ``int8``,
    ``int4``) as is; a dense part (spec ``fp32``: no packing, the model's own weights)
    named by the model ``dtype``.  So the spec ``fp32`` of a bfloat16 model on CUDA
    runs as ``bf16``, and ``int4/fp32`` of a bfloat16 model as ``int4/bf16``."""
    if dtype not in DENSE_NAMES:
        raise ValueError(f"dtype: {dtype} is not one of {', '.join(map(str, DENSE_NAMES))}")
    fmt = WeightFormat.parse(weight_format)
    linears, lm_head = (DENSE_NAMES[dtype] if part.value == DENSE else part.value for part in (fmt.linears, fmt.lm_head))
    return fmt.spelled(linears, lm_head)


def verify_sizes(settings: PolicySettings | None, drafts: bool) -> tuple[int, ...]:
    """The Ms a format is timed at: 1, plus the largest verify size of a speculating
    bucket when a draft head runs (``drafts``: the policy's ``needs_draft``)."""
    if not drafts or settings is None:
        return (1,)
    sizes = [b.shape.num_verify_tokens for b in settings.buckets if b.speculate]
    return (1, max(sizes)) if sizes and max(sizes) > 1 else (1,)


def draft_sizes(settings: PolicySettings | None, drafts: bool) -> tuple[int, ...]:
    """The row counts a draft format is timed at: 1 and the largest top-k of a
    speculating bucket; none when no draft head runs (``drafts`` False)."""
    if not drafts or settings is None:
        return ()
    widths = [b.shape.top_k for b in settings.buckets if b.speculate]
    if not widths:
        return ()
    return (1, max(widths)) if max(widths) > 1 else (1,)


def profile_format(profile, this_isa: str, flags: frozenset[str] | None = None) -> str | None:
    """The format a measured profile was tuned with, or None if it records none.

    Warns once when the profile was measured on another ISA class than ``this_isa``; a
    format of our kernels on a CPU that cannot run them (AMX tiles without AMX, VNNI
    without AVX512-VNNI; ``flags``: another CPU's, for tests) runs its parts on torch's
    kernels instead, with a warning, rather than refusing to start.
    ``profile`` is a ``sglang_cast.profile.Profile``.
    """
    if profile is None or profile.source != "measured" or profile.weight_format is None:
        return None
    recorded = profile.isa_class
    if recorded is not None and recorded != this_isa:
        log.warning("CAST profile %r was measured on a %s CPU, this one is %s: its weight format (%s) and trees "
                    "may not be the fastest here; run `cast-autotune profile` and `cast-autotune tune` on this "
                    "machine", profile.label, recorded, this_isa, profile.weight_format)
    tuned = WeightFormat.parse(profile.weight_format)
    reason = tuned.unavailable_reason(flags)
    if reason is not None:
        runnable = tuned.on_torch_kernels()
        log.warning("CAST profile %r runs weight format %s, whose kernels cannot run here (%s): running "
                    "%s, the same weights on torch's kernels", profile.label, tuned, reason, runnable)
        return str(runnable)
    return profile.weight_format


def candidates(flags: frozenset[str] | None = None) -> tuple[str, ...]:
    """The target formats ``auto`` times on this CPU (``flags``: another CPU's, for tests):
    torch's, and those of our kernels that run here."""
    return tuple(fmt for fmt in CANDIDATES + AMX_CANDIDATES + VNNI_CANDIDATES
                 if WeightFormat.parse(fmt).unavailable_reason(flags) is None)


def draft_candidates(flags: frozenset[str] | None = None) -> tuple[str, ...]:
    """The draft head formats ``auto`` times on this CPU, as `candidates`."""
    return tuple(fmt for fmt in DRAFT_CANDIDATES + AMX_DRAFT_CANDIDATES + VNNI_DRAFT_CANDIDATES
                 if DraftFormat.parse(fmt).linears.unavailable_reason(flags) is None)


def measure_costs(time_once: TimeOnce, candidates: Sequence[str], sizes: Sequence[int], *,
                  rounds: int = MEASURE_ROUNDS, warmup: int = MEASURE_WARMUP, budget_s: float = MEASURE_BUDGET_S,
                  clock: Callable[[], float] = time.monotonic) -> dict[str, dict[int, float]]:
    """Median ms of every (format, M), timed round-robin; stops starting rounds after
    ``budget_s`` (keeping at least one timed round)."""
    medians = round_robin_medians(lambda key: time_once(*key), [(f, m) for f in candidates for m in sizes],
                                  warmup=warmup, rounds=rounds, budget_s=budget_s, clock=clock)
    return {f: {m: medians[(f, m)] for m in sizes} for f in candidates}


def cheapest(costs_ms: dict[str, dict[int, float]]) -> str:
    """The format with the lowest cost summed over the timed Ms (first listed wins a tie)."""
    return min(costs_ms, key=lambda fmt: sum(costs_ms[fmt].values()))


def target_timer(model_path: str | None, dtype: torch.dtype, candidates: Sequence[str],
                 capacity: int) -> TimeOnce:
    """Times batch-1 target forwards of each candidate, loaded once each from ``model_path``
    (the engine's own forward and logits, as ``cast-autotune profile`` times them)."""
    from ..models import load_target
    from .table_calibration import role_timer

    timers = {fmt: role_timer(load_target(model_path, "cpu", dtype, fmt)[0], None, "target", 1, capacity, None)
              for fmt in candidates}
    return lambda fmt, m: timers[fmt].time_once(1, MEASURE_CONTEXT, m)


def draft_timer(model_path: str | None, draft_path, dtype: torch.dtype, target_format: str,
                candidates: Sequence[str], capacity: int) -> TimeOnce:
    """Times batch-1 forwards of the draft head at ``draft_path`` in each candidate
    format, on the target in ``target_format`` (the head reads its embedding)."""
    from ..models import load_draft, load_target
    from .table_calibration import role_timer

    target, _, _ = load_target(model_path, "cpu", dtype, target_format)
    timers = {fmt: role_timer(target, load_draft(draft_path, target, "cpu", dtype, DraftFormat.parse(fmt)), "draft", 1,
                              capacity, None)
              for fmt in candidates}
    return lambda fmt, m: timers[fmt].time_once(1, MEASURE_CONTEXT, m)


def choose_weight_format(requested: str, *, device: str, profile=None, sizes: Sequence[int] = (1,),
                         model_path: str | None = None, dtype: torch.dtype = torch.float32,
                         time_once: TimeOnce | None = None, this_isa: str | None = None,
                         draft_path=None, draft_rows: Sequence[int] = (),
                         time_draft: TimeOnce | None = None) -> FormatChoice:
    """Resolve ``requested`` (a format or ``auto``) by the module's rule; logs the choice.

    ``profile`` (a ``Profile`` or None) is what the engine's settings came from;
    ``sizes`` the Ms to time (`verify_sizes`); ``draft_rows`` the draft's (`draft_sizes`;
    empty: no draft head runs, it stays dense) and ``draft_path`` its checkpoint;
    ``time_once`` / ``time_draft`` replace the real forward timers (tests); ``this_isa``
    replaces ``hardware.isa_class()`` (tests).
    """
    requested = parse_requested(requested)
    if requested != AUTO:
        return FormatChoice(requested, "explicit")
    if device.startswith("cuda"):
        choice = FormatChoice(DENSE, "cuda")
        log.info("%s: packed formats run on the CPU only", choice.describe(dtype))
        return choice
    recorded = profile_format(profile, this_isa or isa_class())
    if recorded is not None:
        choice = FormatChoice(recorded, "profile")
        log.info("weight format %s, as measured and tuned in CAST profile %r", recorded, profile.label)
        return choice
    began = time.monotonic()
    targets = candidates()
    timer = time_once or target_timer(model_path, dtype, targets, MEASURE_CONTEXT + max(sizes))
    costs = measure_costs(timer, targets, sizes)
    chosen, draft_costs = WeightFormat.parse(cheapest(costs)), {}
    if draft_rows and (draft_path is not None or time_draft is not None):
        drafts = draft_candidates()
        timer = time_draft or draft_timer(model_path, draft_path, dtype, str(chosen), drafts,
                                          MEASURE_CONTEXT + max(draft_rows))
        draft_costs = measure_costs(timer, drafts, draft_rows)
        chosen = replace(chosen, draft=DraftFormat.parse(cheapest(draft_costs)))
    choice = FormatChoice(str(chosen), "measured", costs, draft_costs)
    log.info("%s; chosen in %.1f s (no measured profile records a format)", choice.describe(),
             time.monotonic() - began)
    return choice
