"""A profile's runtime states, chosen by replaying traces under its policy.

``cast-autotune tune`` (or ``tools/sglang_runtime_states.py`` for a profile
that exists already) calls :func:`with_runtime_states` after the buckets are
tuned: the traces are replayed under the tuned policy (``state_cover``), the
fewest states covering what it reaches are chosen under the profile's cap, and
the result is written where the plugin reads it, ``provenance.sglang``
(``plugin_config.SGLangSection``), with how it was chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, replace

from ..cast import TraceIteration, make_policy
from ..profile import Profile
from .plugin_config import SGLangSection, StaticShape
from .state_cover import StateCap, cover_states, reached_states


def with_runtime_states(profile: Profile, traces: Iterable[TraceIteration], state_bytes: Callable[[int, int], int],
                        gpu_bytes: int, cap: StateCap | None = None, policy: str = "cast",
                        traces_described: str = "") -> Profile:
    """``profile`` with ``provenance.sglang.runtime_states`` for ``policy`` (the
    profile's own cap unless ``cap`` is given; the parallel layout is kept).
    ``state_bytes(depth, width)``: one state's memory on one GPU of ``gpu_bytes``
    (``memory_plan.state_bytes_for``)."""
    section = SGLangSection.of(profile)
    cap = cap or section.cap
    shape = StaticShape.covering(profile.settings)
    reached = reached_states(traces, make_policy(policy, profile.settings))
    cover = cover_states(reached, shape.startup_state, cap, state_bytes, gpu_bytes)
    chosen = cover.to_dict()
    chosen["replay"].update(policy=policy, traces=traces_described,
                            reached={f"{d}x{w}": n for (d, w), n in sorted(reached.items())})
    sglang = {"parallel": asdict(section.parallel), "state_cap": asdict(cap), **chosen}
    return replace(profile, provenance={**profile.provenance, "sglang": sglang})
