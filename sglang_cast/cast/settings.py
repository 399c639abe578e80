"""Typed policy settings: tree shape and thresholds per batch-size bucket.

One ``PolicySettings`` object is what a YAML profile, the autotuner and the
command line all produce; policies only ever read it.  Validation lives here so
every edge (CLI, HTTP, YAML, tests) gets the same error messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from .context_lookup import ContextLookup
from .costs import CostModel


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_mapping(data: Any, known: set[str], name: str) -> None:
    """A dict with no field outside ``known``; the error names ``name`` and the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{name}: unknown field(s) {unknown}; accepted: {sorted(known)}")


@dataclass(frozen=True)
class TreeShape:
    """EAGLE-2's three knobs.  ``num_verify_tokens`` (``m``) counts the root, like
    SGLang's ``--speculative-num-draft-tokens``: at most ``m - 1`` draft nodes are
    verified.  Defaults are EAGLE-2's (depth 6, top-k 10, 60 tokens)."""

    top_k: int = 10
    max_depth: int = 6
    num_verify_tokens: int = 60

    def __post_init__(self) -> None:
        _positive_int("top_k", self.top_k)
        _positive_int("max_depth", self.max_depth)
        _positive_int("num_verify_tokens", self.num_verify_tokens)
        if self.num_verify_tokens < 2:
            raise ValueError(f"num_verify_tokens must be >= 2 (root + one draft token), got {self.num_verify_tokens}")

    @classmethod
    def fitted(cls, top_k: int, max_depth: int, num_verify_tokens: int) -> TreeShape:
        """The shape with ``num_verify_tokens`` cut to what its pool can fill
        (``pool_size + 1``): a larger ``m`` verifies nothing more, and SGLang refuses a
        ``--speculative-num-draft-tokens`` above ``topk + topk^2*(steps-1) + 1``."""
        pool = cls(top_k, max_depth, num_verify_tokens).pool_size
        return cls(top_k, max_depth, min(num_verify_tokens, pool + 1))

    @property
    def pool_size(self) -> int:
        """Draft nodes of the full EAGLE-2 expansion, the rerank pool: the root's ``K``
        children, then ``K²`` children of the ``K`` kept nodes per further layer."""
        return self.top_k + (self.max_depth - 1) * self.top_k**2

    @property
    def kv_room(self) -> int:
        """KV positions past the context one iteration with this shape may use: the
        root, every node fed to the draft (``top_k`` per level, ``max_depth`` levels) and the
        verified tokens.  Engines reserve the largest of these once, with their caches."""
        return 1 + self.top_k * self.max_depth + self.num_verify_tokens


MAX_LOOKUP_DEPTH = 32  # the longest prompt-lookup branch a bucket may add to its trees
EAGLE2_SHAPE = TreeShape()  # EAGLE-2's default static tree: depth 6, top-k 10, 60 tokens


def bucket_index(batch_size: int, max_batch_sizes: Sequence[int]) -> int:
    """Index of the first bucket whose ``max_batch_size`` covers ``batch_size``; the
    last bucket covers every larger batch.  ``max_batch_sizes`` is increasing."""
    return next((i for i, size in enumerate(max_batch_sizes) if batch_size <= size), len(max_batch_sizes) - 1)


@dataclass(frozen=True)
class Thresholds:
    """CAST's C1 (breadth), C2 (depth) and C3 (rerank), all > 0."""

    c1: float = 1.0
    c2: float = 1.0
    c3: float = 1.0

    def __post_init__(self) -> None:
        for name in ("c1", "c2", "c3"):
            _positive_float(name, getattr(self, name))


@dataclass(frozen=True)
class BucketSettings:
    """Settings used for every batch size up to ``max_batch_size``.

    ``speculate=False`` turns drafting off for the bucket: at batch sizes where even
    the smallest tree costs more than it returns (large batches on a compute-bound
    device), the policy decodes plainly instead.  The autotuner sets it when replay
    says vanilla beats the best tree it found (docs/cast_decisions.md).

    ``lookup_depth`` tokens of the prompt-lookup branch (`context_lookup`) join every
    drafted tree of the bucket, ranked with the drafted nodes; 0 leaves it out.  The
    autotuner chooses it per bucket like the tree's shape.
    """

    max_batch_size: int
    shape: TreeShape = field(default_factory=TreeShape)
    thresholds: Thresholds = field(default_factory=Thresholds)
    fifo_len: int = 8
    speculate: bool = True
    lookup_depth: int = 0

    def __post_init__(self) -> None:
        _positive_int("max_batch_size", self.max_batch_size)
        _positive_int("fifo_len", self.fifo_len)
        if not isinstance(self.speculate, bool):
            raise ValueError(f"speculate must be true or false, got {self.speculate!r}")
        depth = self.lookup_depth
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_LOOKUP_DEPTH:
            raise ValueError(f"lookup_depth must be an integer in [0, {MAX_LOOKUP_DEPTH}] (0: no lookup branch), "
                             f"got {depth!r}")

    @property
    def lookup(self) -> ContextLookup | None:
        """The bucket's prompt-lookup branch, or ``None`` when it has none."""
        return ContextLookup(depth=self.lookup_depth) if self.lookup_depth else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_batch_size": self.max_batch_size,
            "top_k": self.shape.top_k,
            "max_depth": self.shape.max_depth,
            "num_verify_tokens": self.shape.num_verify_tokens,
            "c1": self.thresholds.c1,
            "c2": self.thresholds.c2,
            "c3": self.thresholds.c3,
            "fifo_len": self.fifo_len,
            "speculate": self.speculate,
            "lookup_depth": self.lookup_depth,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "bucket") -> BucketSettings:
        check_mapping(data, {"max_batch_size", "top_k", "max_depth", "num_verify_tokens", "c1", "c2", "c3",
                             "fifo_len", "speculate", "lookup_depth"}, name)
        if "max_batch_size" not in data:
            raise ValueError(f"{name}: missing field 'max_batch_size'")
        shape_defaults, thr_defaults = TreeShape(), Thresholds()
        try:
            return cls(
                max_batch_size=data["max_batch_size"],
                shape=TreeShape(
                    top_k=data.get("top_k", shape_defaults.top_k),
                    max_depth=data.get("max_depth", shape_defaults.max_depth),
                    num_verify_tokens=data.get("num_verify_tokens", shape_defaults.num_verify_tokens),
                ),
                thresholds=Thresholds(
                    c1=data.get("c1", thr_defaults.c1),
                    c2=data.get("c2", thr_defaults.c2),
                    c3=data.get("c3", thr_defaults.c3),
                ),
                fifo_len=data.get("fifo_len", 8),
                speculate=data.get("speculate", True),
                lookup_depth=data.get("lookup_depth", 0),
            )
        except ValueError as err:
            raise ValueError(f"{name}.{err}") from None


@dataclass(frozen=True)
class PolicySettings:
    """Everything a policy reads: per-batch buckets and the cost tables."""

    buckets: tuple[BucketSettings, ...]
    costs: CostModel

    def __post_init__(self) -> None:
        if not self.buckets:
            raise ValueError("buckets must hold at least one batch-size bucket")
        sizes = [b.max_batch_size for b in self.buckets]
        if sizes != sorted(set(sizes)):
            raise ValueError(f"buckets must have distinct increasing max_batch_size, got {sizes}")

    def for_batch(self, batch_size: int) -> BucketSettings:
        """The first bucket covering ``batch_size``; the last bucket covers the rest."""
        return self.buckets[bucket_index(batch_size, [b.max_batch_size for b in self.buckets])]

    @property
    def kv_room(self) -> int:
        """KV positions past the context the largest tree of any bucket may use."""
        return max(b.shape.kv_room for b in self.buckets)

    def with_shape(self, shape: TreeShape, speculate: bool | None = None) -> PolicySettings:
        """The same settings with one tree shape for every bucket (and, if given, one
        ``speculate`` flag)."""
        flag = {} if speculate is None else {"speculate": speculate}
        return replace(self, buckets=tuple(replace(b, shape=shape, **flag) for b in self.buckets))

    def with_lookup(self, depth: int) -> PolicySettings:
        """The same settings with a ``depth``-token prompt-lookup branch (0: none) in
        every bucket."""
        return replace(self, buckets=tuple(replace(b, lookup_depth=depth) for b in self.buckets))

    @classmethod
    def single(cls, costs: CostModel, shape: TreeShape | None = None,
               thresholds: Thresholds | None = None, fifo_len: int = 8) -> PolicySettings:
        bucket = BucketSettings(
            max_batch_size=1 << 30,
            shape=shape or TreeShape(),
            thresholds=thresholds or Thresholds(),
            fifo_len=fifo_len,
        )
        return cls(buckets=(bucket,), costs=costs)
