"""Typed server configuration: what the HTTP layer needs beyond the Engine itself.

Kept apart from the command line so tests (and other launchers) can build the app
around an Engine they constructed themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # kept out of the import path of `launch_args`, so --help answers without loading torch
    from ..cast import PolicySettings
    from ..profile import LoadedProfile
    from .startup_calibration import ServedCalibration


@dataclass(frozen=True)
class ShapeOverride:
    """``--speculative-num-steps`` / ``--speculative-eagle-topk`` /
    ``--speculative-num-draft-tokens`` / ``--cast-lookup-depth``: each knob that is set
    replaces that knob in every profile bucket, including profiles swapped in later by
    hot-reload, so the operator's explicit tree shape survives a profile update."""

    max_depth: int | None = None
    top_k: int | None = None
    num_verify_tokens: int | None = None
    lookup_depth: int | None = None  # the prompt-lookup branch's tokens (`BucketSettings.lookup_depth`)

    def given(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def apply(self, settings: PolicySettings) -> PolicySettings:
        """``settings`` with the given knobs in every bucket (``TreeShape`` and
        ``BucketSettings`` validate them)."""
        knobs = self.given()
        lookup = {"lookup_depth": knobs.pop("lookup_depth")} if "lookup_depth" in knobs else {}
        if not knobs and not lookup:
            return settings
        return replace(settings, buckets=tuple(replace(b, shape=replace(b.shape, **knobs), **lookup)
                                               for b in settings.buckets))


# Speculation is switched on only where it wins by at least this share, both by the
# server's live gate (and off only where it loses by more: hysteresis) and by the tuner's
# live gate before it publishes a bucket speculating (`cast-autotune tune
# --live-min-speedup`).  Timed runs on these shared VMs differ by more than a few percent
# round to round, so a smaller win is not resolved (docs/autotune.md).
SPECULATION_WIN_MARGIN = 0.05


@dataclass(frozen=True)
class LiveGateConfig:
    """Window sizes and probe pacing of the live calibration (``calibration.py``; the
    defaults are documented in docs/server.md).  ``switching`` False measures and
    exports only (``--cast-live-gate off``)."""

    switching: bool = True
    window: int = 32  # speculative iterations per bucket the rates, ratios and the refit see
    min_samples: int = 16  # speculative iterations in the window before the gate may decide
    plain_window: int = 32  # plain iterations per bucket kept for the live plain scale
    min_plain_samples: int = 4  # plain iterations needed before the live scale replaces the table's
    plain_stale_after: int = 1024  # bucket iterations after which the newest plain one no longer counts
    probe_after: int = 64  # plain iterations of a switched-off bucket before it speculates again
    max_probe_after: int = 1024  # the wait after repeated failed probes doubles up to this
    # Hysteresis: speculation switches off when it loses to plain decoding by more than this share
    # and a probe or exploration switches it on when it wins by at least that (an AVX2 EPYC near break-even
    # flapped 29 times in 5 minutes without it).
    margin: float = SPECULATION_WIN_MARGIN
    # The share of a profile-off bucket's (``speculate: false``) iterations that re-test
    # speculation with the profile's tree; 0: such buckets never speculate (the profile's ``explore_share``).
    explore_share: float = 0.02

    @property
    def explore_after(self) -> int:
        """Plain iterations between two explorations of a profile-off bucket: one
        exploration (its catch-up iteration and ``min_samples`` measured ones) takes at
        most ``explore_share`` of the bucket's iterations."""
        if not self.explore_share:
            return 0
        return math.ceil((self.min_samples + 1) * (1 / self.explore_share - 1))

    def __post_init__(self) -> None:
        for name in ("window", "min_samples", "plain_window", "min_plain_samples", "plain_stale_after",
                     "probe_after", "max_probe_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.min_samples > self.window:
            raise ValueError(f"min_samples must be <= window ({self.window}), got {self.min_samples}")
        if self.min_plain_samples > self.plain_window:
            raise ValueError(f"min_plain_samples must be <= plain_window ({self.plain_window}), "
                             f"got {self.min_plain_samples}")
        if isinstance(self.margin, bool) or not 0 <= self.margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {self.margin!r}")
        if isinstance(self.explore_share, bool) or not 0 <= self.explore_share <= 0.02:
            raise ValueError(f"explore_share must be in [0, 0.02], got {self.explore_share!r}")
        if self.max_probe_after < self.probe_after:
            raise ValueError(f"max_probe_after must be >= probe_after ({self.probe_after}), "
                             f"got {self.max_probe_after}")


MIN_REQUEST_BYTES = 1 << 20
REQUEST_BYTES_PER_CONTEXT_TOKEN = 1024
DEFAULT_MAX_TOP_LOGPROBS = 20  # vLLM's default --max-logprobs and OpenAI's top_logprobs maximum


def default_max_request_bytes(context_length: int) -> int:
    """``max(1 MiB, context_length x 1 KiB)``: room for a prompt that fills the
    context even with long tokens written as JSON ``\\uXXXX`` escapes, and no more."""
    return max(MIN_REQUEST_BYTES, context_length * REQUEST_BYTES_PER_CONTEXT_TOKEN)


@dataclass(frozen=True)
class ServerConfig:
    """Everything the app reads besides the Engine.

    ``model_path`` is what ``/get_model_info`` reports: SGLang frontends pick their
    chat template from it.  ``profile`` is the profile the engine's policy was built
    from (``None`` when running eagle2/vanilla without one); its file is watched for
    hot-reload.
    """

    served_model_name: str
    model_path: str
    max_queued_requests: int = 64
    api_key: str | None = None
    admin_api_key: str | None = None  # guards the admin routes instead of api_key when set
    max_request_bytes: int | None = None  # None: default_max_request_bytes(engine context length)
    max_top_logprobs: int = DEFAULT_MAX_TOP_LOGPROBS
    max_in_flight_requests: int | None = None  # None: running + queued + IN_FLIGHT_HEADROOM
    profile: LoadedProfile | None = None
    shape_override: ShapeOverride = field(default_factory=ShapeOverride)
    profile_poll_seconds: float = 0.5
    live_gate: LiveGateConfig = field(default_factory=LiveGateConfig)
    calibration: ServedCalibration | None = None  # --cast-calibrate: the fit serving, kept for hot-reloads
    server_args: dict[str, object] = field(default_factory=dict)  # echoed by /server_info

    def __post_init__(self) -> None:
        if self.max_queued_requests < 0:
            raise ValueError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
        if self.profile_poll_seconds <= 0:
            raise ValueError(f"profile_poll_seconds must be > 0, got {self.profile_poll_seconds}")
        if self.max_request_bytes is not None and self.max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be >= 1, got {self.max_request_bytes}")
        if self.max_in_flight_requests is not None and self.max_in_flight_requests < 1:
            raise ValueError(f"max_in_flight_requests must be >= 1, got {self.max_in_flight_requests}")
        if self.max_top_logprobs < 0:
            raise ValueError(f"max_top_logprobs must be >= 0, got {self.max_top_logprobs}")

    def request_bytes_limit(self, context_length: int) -> int:
        return self.max_request_bytes or default_max_request_bytes(context_length)
