"""The benchmarked methods and eagle2-best's choice of static tree (see tools/bench.py)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from autotune.models import ModelPair, reference_target_id
from autotune.store import Store
from autotune.tuner import assign_buckets, even_sample, replay_settings
from sglang_cast.cast import EAGLE2_SHAPE, POLICIES, ContextLookup, PolicySettings, TreeShape, policy_class

from .inputs import BenchError

ANCHOR = "llamacpp"
DEFAULT_METHODS = "vanilla,eagle2,eagle2-best,cast,goodput"
BEST_GRID = {"max_depth": (1, 2, 3, 4, 6), "top_k": (1, 2, 4, 8, 10), "num_verify_tokens": (2, 4, 8, 16, 32, 60)}


@dataclass(frozen=True)
class Method:
    """A benchmarked method: a policy name and where its tree shape comes from."""

    label: str  # as given on the command line
    policy: str
    shape: str  # "profile" (tuned), "eagle2" (EAGLE-2's default), "best" (eagle2-best's grid choice), "anchor"
    # The prompt-lookup branch (`cast.context_lookup`): True "+lookup" adds it to every tree,
    # False "+nolookup" leaves it out; None: the profile's per-bucket choice for a profile's
    # trees, none on static trees.
    lookup: bool | None = None
    # Another profile's settings (`--against-profile`) for a profile-shaped method; None:
    # the run's own profile.
    settings: PolicySettings | None = field(default=None, compare=False, repr=False)

    @property
    def is_anchor(self) -> bool:
        return self.shape == "anchor"

    @property
    def drafts(self) -> bool:
        """Does this method run a draft head (the anchor and plain decoding do not)?"""
        return not self.is_anchor and policy_class(self.policy).needs_draft

    @classmethod
    def parse(cls, label: str) -> Method:
        base, _, suffix = label.partition("@")
        name, _, extra = base.partition("+")
        if extra:
            if extra not in ("lookup", "nolookup"):
                raise BenchError(f"--methods: {label!r}: the '+' options are '+lookup' and '+nolookup'")
            if name in (ANCHOR, "vanilla"):
                raise BenchError(f"--methods: {label!r}: '+{extra}' changes a draft tree; {name} drafts none")
            return dataclasses.replace(cls.parse(name + (f"@{suffix}" if suffix else "")), label=label,
                                       lookup=extra == "lookup")
        if name == ANCHOR:
            if suffix:
                raise BenchError(f"--methods: {label!r}: the llama.cpp anchor has no tree shape")
            return cls(label, ANCHOR, "anchor")
        if suffix not in ("", "eagle2"):
            raise BenchError(f"--methods: {label!r}: the only shape suffix is '@eagle2'")
        known = sorted(set(POLICIES) | {"eagle2-best", ANCHOR})
        if name not in known:
            raise BenchError(f"--methods: unknown method {name!r}; accepted: {known} (optionally with '@eagle2')")
        if name == "eagle2-best":
            if suffix:
                raise BenchError(f"--methods: {label!r}: eagle2-best chooses its own shape")
            return cls(label, "eagle2", "best")
        policy = policy_class(name)
        static = policy.needs_draft and not policy.cost_aware  # EAGLE-2's tree: not shaped by a profile
        return cls(label, name, "eagle2" if static or suffix == "eagle2" else "profile")


def parse_methods(text: str | None) -> list[Method]:
    """``--methods`` (default `DEFAULT_METHODS`) as `Method` values, at least one."""
    methods = [Method.parse(label.strip()) for label in (text or DEFAULT_METHODS).split(",") if label.strip()]
    if not methods:
        raise BenchError("--methods: give at least one method")
    return methods


def against(methods: list[Method], name: str, settings: PolicySettings) -> list[Method]:
    """Each drafting method shaped by the profile again, under ``settings`` (another
    profile's, named ``name``), labelled ``<method>@<name>``."""
    return [replace(m, label=f"{m.label}@{name}", settings=settings) for m in methods
            if m.shape == "profile" and m.drafts and m.settings is None]


def method_settings(method: Method, settings: PolicySettings, best: dict[int, TreeShape],
                    batch_size: int) -> tuple[PolicySettings, TreeShape | None]:
    """The settings ``method`` runs with at ``batch_size`` (its own profile's, else the
    run's ``settings``), and its static tree if it has one."""
    settings = method.settings or settings
    if method.lookup is not None:
        settings = settings.with_lookup(ContextLookup().depth if method.lookup else 0)
    elif method.shape != "profile":
        settings = settings.with_lookup(0)  # a static tree holds no branch unless asked
    if method.shape == "best":
        return settings.with_shape(best[batch_size]), best[batch_size]
    if method.shape == "eagle2":
        # The ablation adds the paper's components to EAGLE-2's tree at every batch
        # size; our per-bucket speculation switch is not one of them.
        return settings.with_shape(EAGLE2_SHAPE, speculate=True), EAGLE2_SHAPE
    return settings, None


def best_static_shapes(pair: ModelPair, settings: PolicySettings, batch_sizes: list[int],
                       db: Path, max_traces: int) -> dict[int, TreeShape]:
    """Per batch size, the static EAGLE-2 shape with the highest replayed tokens/s
    on the stored traces of that batch size's profile bucket (recorded by ``collect``
    under the fp32 target's id, whatever format the benchmark runs)."""
    store = Store(db)
    try:
        stored = store.traces(reference_target_id(pair.target_id), pair.draft_id)
    finally:
        store.close()
    if not stored:
        raise BenchError(f"eagle2-best: no traces for draft {pair.draft_id} in {db}; "
                         "run cast-autotune collect first (it records on the tuning prompts)")
    sizes = tuple(b.max_batch_size for b in settings.buckets)
    by_bucket = assign_buckets([s.trace for s in stored], sizes)
    chosen: dict[int, TreeShape] = {}
    for batch_size in batch_sizes:
        bucket = settings.for_batch(batch_size)
        traces = even_sample(by_bucket[bucket.max_batch_size], max_traces)
        if not traces:
            raise BenchError(f"eagle2-best: no traces in the bucket of batch size {batch_size} "
                             f"(max_batch_size {bucket.max_batch_size}); collect with a batch size in it")
        top_k, depth = min(t.top_k for t in traces), min(t.draft_depth for t in traces)
        grid = [TreeShape(k, h, m) for k, h, m in itertools.product(
            BEST_GRID["top_k"], BEST_GRID["max_depth"], BEST_GRID["num_verify_tokens"])
            if k <= top_k and h <= depth and m <= 1 + k * h]
        single = PolicySettings(buckets=(replace(bucket, lookup_depth=0),), costs=settings.costs)  # a static tree
        rates = {shape: replay_settings(traces, single.with_shape(shape), "eagle2").tokens_per_s
                 for shape in tqdm(grid, desc=f"eagle2-best grid, batch {batch_size}", leave=False)}
        chosen[batch_size] = max(rates, key=rates.get)
    return chosen
