"""What the plugin needs besides SGLang's own server args, and its checks.

SGLang's ``ServerArgs`` has no field for a CAST profile, so the launcher passes
the profile's path in ``SGLANG_CAST_PROFILE``; SGLang's scheduler processes
inherit the environment and load the same file.  The policy follows from the
algorithm name.  SGLang's tensors are sized once at startup by
``--speculative-num-steps/-eagle-topk/-num-draft-tokens`` (the *static shape*),
so every profile, at startup or on reload, must fit inside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ..cast import PolicySettings, TreeShape
from ..cast.settings import check_mapping
from ..profile import LoadedProfile, Profile, ProfileError, load_profile
from .runtime_shapes import NO_DRAFT, max_nodes
from .state_cover import StateCap

PROFILE_ENV = "SGLANG_CAST_PROFILE"
POLICY_OF_ALGORITHM = {"CAST": "cast", "GOODPUT": "goodput"}
MIN_TOPK = 2  # SGLang's --speculative-eagle-topk under CAST (`StaticShape.check`); buckets may use 1
DEFAULT_MAX_RUNNING_REQUESTS = 48  # SGLang's batch limit under CAST when none is given, as for its EAGLE


@dataclass(frozen=True)
class StaticShape:
    """SGLang's startup tree shape: the largest tree any iteration may use."""

    num_steps: int  # --speculative-num-steps: draft layers
    topk: int  # --speculative-eagle-topk: candidates per layer
    num_draft_tokens: int  # --speculative-num-draft-tokens: verified tokens, root included

    @classmethod
    def holding(cls, shapes: Iterable[TreeShape]) -> StaticShape:
        """The smallest static shape that holds every tree of ``shapes``; top-k 1
        trees still need topk ``MIN_TOPK`` in SGLang (see ``check``)."""
        shapes = list(shapes)
        return cls(num_steps=max(s.max_depth for s in shapes), topk=max(MIN_TOPK, *(s.top_k for s in shapes)),
                   num_draft_tokens=max(s.num_verify_tokens for s in shapes))

    @classmethod
    def covering(cls, settings: PolicySettings) -> StaticShape:
        """The smallest static shape that holds every bucket of ``settings``, with
        draft steps for its prompt-lookup branch too: a grafted branch is verified
        only as deep as the runtime state (``verify_layout``)."""
        shape = cls.holding(b.shape for b in settings.buckets)
        branches = [b.lookup_depth for b in settings.buckets if b.speculate]
        return replace(shape, num_steps=max([shape.num_steps, *branches]))

    @classmethod
    def from_flags(cls, settings: PolicySettings, source: str | Path, num_steps: int | None = None,
                   topk: int | None = None, num_draft_tokens: int | None = None) -> StaticShape:
        """A launch's shape: each flag where given, else the covering shape's value.
        The launcher and ``cast-autotune preflight`` share it, so both refuse the same
        launches: `ProfileError` when ``settings`` (from ``source``) do not fit the
        shape, ``ValueError`` when CAST cannot run it (``check``)."""
        covering = cls.covering(settings)
        shape = cls(num_steps or covering.num_steps, topk or covering.topk,
                    num_draft_tokens or covering.num_draft_tokens)
        shape.require_fit(settings, source)
        shape.check()
        return shape

    @property
    def startup_state(self) -> tuple[int, int]:
        """(depth, width) of SGLang's startup runtime state: the one SGLang builds
        and sizes itself, the largest the worker switches between."""
        return self.num_steps, self.num_draft_tokens

    def require_fit(self, settings: PolicySettings, source: str | Path) -> None:
        """Raise `ProfileError` naming every bucket of ``settings`` (from ``source``)
        that needs a larger tree than this shape."""
        problems = self.misfits(settings)
        if problems:
            raise ProfileError(f"profile {source} does not fit SGLang's startup tree shape: " + "; ".join(problems))

    def misfits(self, settings: PolicySettings) -> list[str]:
        """Why ``settings`` do not fit this shape (empty when they do)."""
        problems = []
        for bucket in settings.buckets:
            shape, where = bucket.shape, f"bucket max_batch_size={bucket.max_batch_size}"
            for field, wanted, have, flag in (
                ("max_depth", shape.max_depth, self.num_steps, "--speculative-num-steps"),
                ("top_k", shape.top_k, self.topk, "--speculative-eagle-topk"),
                ("num_verify_tokens", shape.num_verify_tokens, self.num_draft_tokens,
                 "--speculative-num-draft-tokens"),
            ):
                if wanted > have:
                    problems.append(f"{where} has {field}={wanted} but SGLang runs with {flag} {have}")
        return problems

    def check(self) -> None:
        """A verify width above ``max_nodes(topk, steps) + 1`` could never be filled.
        ``topk`` 1 is refused: SGLang then
        verifies a fixed chain of ``steps + 1`` tokens, which a draft that stops
        early (CAST's depth rule) cannot fill."""
        if self.num_steps < 1:
            raise ValueError(f"--speculative-num-steps must be >= 1 for CAST, got {self.num_steps}")
        if self.topk < MIN_TOPK:
            raise ValueError(f"--speculative-eagle-topk must be >= {MIN_TOPK} for CAST, got {self.topk} (with 1 SGLang "
                             "verifies a fixed chain, which a draft that stops early cannot fill; a profile "
                             "bucket may still use top_k 1)")
        widest = max_nodes(self.topk, self.num_steps) + 1
        if not 2 <= self.num_draft_tokens <= widest:
            raise ValueError(
                f"--speculative-num-draft-tokens must be in [2, topk + topk^2*(steps-1) + 1 = {widest}] for CAST "
                f"(the most nodes a tree of that shape drafts, plus the root), got {self.num_draft_tokens}")


# Why CAST refuses pipeline parallelism (one text for the launcher and the plugin's registration check).
PP_REFUSAL = ("SGLang 0.5.23's EAGLE worker drafts the next round on the last pipeline stage and relays only the "
              "tree to the others (eagle_worker_v2.py:1508-1545), whose runtime state (verify width) CAST switches "
              "every iteration; use --tp-size")


@dataclass(frozen=True)
class ParallelLayout:
    """The GPUs one copy of the model spans: the layout a profile's cost tables were
    measured (or estimated) for.  A TP-4 forward is another cost curve than a TP-1 one."""

    tp_size: int = 1
    pp_size: int = 1

    def __str__(self) -> str:
        return f"--tp-size {self.tp_size} --pp-size {self.pp_size}"


@dataclass(frozen=True)
class SGLangSection:
    """The plugin's part of a profile: ``provenance.sglang`` (``sglang_cast.profile``
    passes ``provenance`` through untouched; a top-level ``sglang:`` key would be
    refused by its schema today)::

        provenance:
          sglang:
            parallel: {tp_size: 1, pp_size: 1}       # the layout the costs describe
            state_cap: {max_states: 8, max_memory_share: 0.1, coverage: 0.99}
            runtime_states: [[13, 2], [13, 72], ...]  # (depth, width) pairs to build
            replay: {...}                              # how they were chosen (free-form)

    Every field is optional: a profile without one serves ``--tp-size 1
    --pp-size 1`` and the worker's fallback state grid."""

    parallel: ParallelLayout = ParallelLayout()
    cap: StateCap = StateCap()
    runtime_states: tuple[tuple[int, int], ...] | None = None

    @classmethod
    def of(cls, profile: Profile) -> SGLangSection:
        """Read and check it; a bad field raises `ProfileError` naming it."""
        where = "profile.provenance.sglang"
        data = profile.provenance.get("sglang", {})
        try:
            check_mapping(data, {"parallel", "state_cap", "runtime_states", "replay"}, where)
            parallel = data.get("parallel", {})
            check_mapping(parallel, {"tp_size", "pp_size"}, f"{where}.parallel")
            layout = ParallelLayout(**parallel)
            for name, value in (("tp_size", layout.tp_size), ("pp_size", layout.pp_size)):
                if not isinstance(value, int) or value < 1:
                    raise ValueError(f"{where}.parallel.{name}: expected an integer >= 1, got {value!r}")
            cap_fields = data.get("state_cap", {})
            check_mapping(cap_fields, {"max_states", "max_memory_share", "coverage"}, f"{where}.state_cap")
            cap = StateCap(**cap_fields)
            cap.check(f"{where}.state_cap")
            states = data.get("runtime_states")
            return cls(layout, cap, None if states is None else _states(states, f"{where}.runtime_states"))
        except ValueError as err:
            raise ProfileError(str(err)) from None


def _states(value, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: expected a non-empty list of [depth, width] pairs")
    pairs = []
    for i, pair in enumerate(value):
        if (not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(v, int) for v in pair)
                or not (tuple(pair) == NO_DRAFT or (pair[0] >= 1 and pair[1] >= 2))):
            raise ValueError(f"{where}[{i}]: expected [depth >= 1, width >= 2] or [0, 1] (no draft), got {pair!r}")
        pairs.append((pair[0], pair[1]))
    return tuple(sorted(set(pairs)))


def require_layout(profile: Profile, layout: ParallelLayout, source: str | Path) -> None:
    """Refuse, in one line, a profile whose costs describe another parallel layout."""
    made_for = SGLangSection.of(profile).parallel
    if made_for != layout:
        raise ProfileError(f"profile {source} was made for {made_for} but this server runs {layout}: its cost tables "
                           f"describe another forward; use a profile made for this layout (cast-autotune profile "
                           f"--backend sglang --tp-size {layout.tp_size}, then tune)")


def require_fits(profile: Profile, shape: StaticShape, layout: ParallelLayout | None, source: str | Path) -> None:
    """Refuse ``profile`` (from ``source``) unless it fits ``shape`` and, when
    ``layout`` is given, was made for it: one check for a profile loaded from its
    file and for one broadcast to the other ranks."""
    shape.require_fit(profile.settings, source)
    if layout is not None:
        require_layout(profile, layout, source)


def load_fitting_profile(path: str | Path, shape: StaticShape, layout: ParallelLayout | None = None) -> LoadedProfile:
    """Load and validate a profile and check it fits ``shape`` (and was made for
    ``layout`` when given); `ProfileError` says why not."""
    loaded = load_profile(path)
    require_fits(loaded.profile, shape, layout, path)
    return loaded


def draft_is_eagle3(draft_model_path: str) -> bool:
    """Whether the draft checkpoint is an EAGLE-3 head (SGLang then captures the
    target's auxiliary hidden states for it).  EAGLE-3 checkpoints name an
    ``*Eagle3*`` architecture in their ``config.json``; the file is read from a
    local directory or, for a hub id, from the Hugging Face cache/hub."""
    local = Path(draft_model_path) / "config.json"
    if local.is_file():
        config = json.loads(local.read_text())
    else:
        from transformers import PretrainedConfig

        config, _ = PretrainedConfig.get_config_dict(draft_model_path)
    return any("eagle3" in str(arch).lower() for arch in config.get("architectures") or ())


def cached_config(model_path: str) -> dict | None:
    """A model's ``config.json`` from a local directory or the Hugging Face cache,
    without touching the network; ``None`` when neither has it."""
    local = Path(model_path) / "config.json"
    if local.is_file():
        return json.loads(local.read_text())
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model_path, "config.json")
    return json.loads(Path(cached).read_text()) if isinstance(cached, str) else None
