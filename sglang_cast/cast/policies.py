"""Tree policies: the one place that decides how wide, how deep and how much of
the draft tree to verify (docs/design/cast.md §4, §5, §7).

An engine calls ``policy.begin(batch_size, context_len)`` once per iteration and
gets an ``IterationPlan`` bound to a snapshot of the settings, so a
``reconfigure`` from another thread (profile hot-reload) takes effect at the next
iteration and never mid-iteration.  The plan answers three questions while the
engine (or the trace replay) grows the tree:

* ``keep(layer, candidate_values)`` – breadth: how many of this layer's candidates
  (sorted best first, ``[B, N]``) every sequence keeps;
* ``grow(layer)`` – depth: whether to draft another layer;
* ``verify_count(tree)`` – rerank: how many ranked nodes each sequence verifies.

Policies keep their own cross-iteration state: per batch-size bucket, the
depth-pruning FIFO buffers ``A_i`` of observed layer-to-layer utility ratios
(``DepthRatios``).
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from .algorithm1 import largest_valid_index
from .context_lookup import ContextLookup
from .settings import BucketSettings, PolicySettings
from .tree import DraftTree


class DepthRatios:
    """The depth rule's memory for one batch-size bucket (docs/design/cast.md §4,
    docs/cast_decisions.md D9): ``A_i`` per layer, and how many iterations in a row
    the rule stopped after layer ``i``.

    ``φ_i`` is only observed when layer ``i + 1`` is drafted, so a stretch of low
    ratios could switch layer ``i + 1`` off for good.  Every ``probe_every``-th stop
    in a row is therefore overruled once (a *probe*): the layer is drafted, a fresh
    ``φ_i`` enters ``A_i``, and the layer comes back once acceptance has.
    """

    def __init__(self, fifo_len: int, probe_every: int) -> None:
        self.fifo_len = fifo_len
        self.probe_every = probe_every
        self._fifos: dict[int, deque[float]] = {}
        self._stops: dict[int, int] = {}

    def resize(self, fifo_len: int) -> None:
        """Apply a new ``fifo_len`` from a reconfigure (newest entries kept)."""
        if fifo_len != self.fifo_len:
            self.fifo_len = fifo_len
            self._fifos = {i: deque(q, maxlen=fifo_len) for i, q in self._fifos.items()}

    def history(self, layer: int) -> tuple[float, ...]:
        """``A_layer``, oldest first; an unseen layer starts from the prior ``[1.0]``."""
        return tuple(self._fifo(layer))

    def push(self, layer: int, ratio: float) -> None:
        """Push an observed ``φ_layer`` into ``A_layer``; the stop streak ends."""
        self._fifo(layer).append(ratio)
        self._stops[layer] = 0

    def mean(self, layer: int) -> float:
        """``mean(A_layer)``."""
        fifo = self._fifo(layer)
        return sum(fifo) / len(fifo)

    def largest(self, layer: int) -> float:
        """``max(A_layer)``: the best ratio seen lately, for an optimistic depth forecast."""
        return max(self._fifo(layer))

    def probe_due(self, layer: int) -> bool:
        """Would the next stop after ``layer`` be overruled by a probe?"""
        return self._stops.get(layer, 0) + 1 >= self.probe_every

    def count_stop(self, layer: int) -> bool:
        """The rule says stop after ``layer``: count it, and say whether to probe instead."""
        probe = self.probe_due(layer)
        self._stops[layer] = 0 if probe else self._stops.get(layer, 0) + 1
        return probe

    def _fifo(self, layer: int) -> deque[float]:
        if layer not in self._fifos:
            self._fifos[layer] = deque([1.0], maxlen=self.fifo_len)
        return self._fifos[layer]


def batch_utility(sorted_values) -> list[float]:
    """``u_k = (1/B) Σ_j Σ_{s<=k} v^(j)(s)`` for host values sorted best first,
    ``[B, N]`` (an array or a host tensor), as host floats: one read of the values,
    then a few dozen float operations (the policies decide on floats;
    docs/design/cast.md §4)."""
    rows = np.asarray(sorted_values, dtype=np.float64).tolist()
    return list(itertools.accumulate(sum(column) / len(rows) for column in zip(*rows)))


def ranked_values(tree: DraftTree, limit: int) -> np.ndarray:
    """Each sequence's non-root node values in rank order, at most ``limit`` of them."""
    return tree.values[tree.storage.rows, tree.ranked_nodes()[:, :limit]]


@dataclass
class IterationPlan:
    """Decisions for one iteration; subclasses implement one policy each."""

    policy: Policy
    bucket: BucketSettings
    settings: PolicySettings
    batch_size: int
    context_len: int
    kept: list[int] = field(default_factory=list)  # n_i per layer
    utility: list[float] = field(default_factory=list)  # u^(i)_{n_i}
    draft_cost: list[float] = field(default_factory=list)  # normalised c_{n_i}
    draft_ms: float = 0.0  # predicted ms of the draft layers this plan asked for, host work included
    draft_forward_ms: float = 0.0  # the same layers' forwards alone (``charge(..., host=False)``)
    verified: int = 0
    learns: bool = True  # False for `predict_depth`'s probe: it must not feed the FIFOs

    @property
    def top_k(self) -> int:
        return self.bucket.shape.top_k

    @property
    def max_depth(self) -> int:
        return self.bucket.shape.max_depth

    @property
    def max_nodes(self) -> int:
        """Draft nodes that may be verified: ``m - 1`` (the root is the m-th)."""
        return self.bucket.shape.num_verify_tokens - 1

    @property
    def lookup(self) -> ContextLookup | None:
        """The prompt-lookup branch this iteration grafts: its bucket's, and none where
        the plan drafts nothing (``speculate: false``, the vanilla policy), which
        decodes plainly with no tree to graft onto."""
        return self.bucket.lookup if self.max_depth > 0 else None

    def layer_context(self, layer: int) -> int:
        """``ctx_i = max n0 + Σ_{l<i} n_l``: what a draft forward of layer ``i`` attends to."""
        return self.context_len + sum(self.kept[: layer - 1])

    def _draft_row(self, layer: int, n: int) -> list[float]:
        """Normalised draft cost of layer ``i`` keeping ``k = 1..n``: the layer's ms (its
        forward plus its host work) over one plain step's ms at ``ctx_i``
        (``f_D(B, ctx_i, k) / f_T(B, ctx_i, 1)`` when no host overhead is measured)."""
        ctx = self.layer_context(layer)
        costs = self.settings.costs
        plain = costs.plain_ms(self.batch_size, ctx)
        return [ms / plain for ms in costs.draft_layer_row(self.batch_size, ctx, n)]

    @property
    def depth_ratios(self) -> DepthRatios:
        """The depth rule's FIFOs of this plan's bucket."""
        return self.policy.bucket_ratios(self.bucket)

    def _record_layer(self, layer: int, utility: list[float], cost: list[float], n: int) -> int:
        if self.learns and layer >= 2 and self.utility[-1] > 0:
            self.depth_ratios.push(layer - 1, utility[n - 1] / self.utility[-1])
        self.kept.append(n)
        self.utility.append(utility[n - 1])
        self.draft_cost.append(cost[n - 1])
        return n

    def _stops_after(self, layer: int) -> bool:
        """The depth rule said stop after ``layer``: True to stop, False when this stop
        is overruled by a probe (``DepthRatios``).  ``predict_depth``'s probe copy
        only asks, so it predicts the probe without counting the stop."""
        if not self.learns:
            return not self.depth_ratios.probe_due(layer)
        return not self.depth_ratios.count_stop(layer)

    def _charge_expansion(self, layer: int) -> None:
        costs, context, rows = self.settings.costs, self.layer_context(layer), self.kept[layer - 1]
        forward = costs.draft(self.batch_size, context, rows)
        self.draft_forward_ms += forward
        self.draft_ms += forward + costs.host(self.batch_size, context).per_layer

    def _verify_ms(self, tokens: int) -> list[float]:
        """ms of verifying ``1..tokens`` tokens (root included) with their host work
        (``CostModel.verify_row``; ``f_T(B, c0, 1..tokens)`` when no overhead is measured)."""
        return self.settings.costs.verify_row(self.batch_size, self.context_len, tokens)

    @property
    def plain_ms(self) -> float:
        """One plain step's ms at this batch and context: the unit of normalised costs."""
        return self.settings.costs.plain_ms(self.batch_size, self.context_len)

    def _full_budget(self, tree: DraftTree) -> int:
        """EAGLE-2's verify rule: the best ``m - 1`` nodes, or all when fewer."""
        self.verified = min(tree.size - 1, self.max_nodes)
        return self.verified

    def _grow_to_max_depth(self, layer: int) -> bool:
        """EAGLE-2's depth rule: draft every layer up to ``max_depth``."""
        if layer >= self.max_depth:
            return False
        self._charge_expansion(layer)
        return True

    def predict_depth(self, root_values) -> int:
        """How many layers this plan is expected to draft, known before any draft forward.

        An engine that must fix the draft's shape up front (the SGLang worker picks a
        pre-built runtime state per depth) asks this.  Layer 1's candidates are known
        before drafting: the root's best children, ``root_values`` ``[B, N]`` sorted
        best first (host values).  Deeper layers are predicted with the numbers depth pruning itself
        trusts: layer ``i + 1``'s candidate values are layer ``i``'s scaled by
        ``mean(A_i)``.  A probe copy of this plan runs ``keep``/``grow`` on them, so the
        prediction is this policy's own rule, and neither this plan nor the policy's
        FIFOs change.
        """
        return self._probe_depth(root_values, self.depth_ratios.mean)

    def reachable_depth(self, root_values, predicted: int) -> int:
        """The deepest this plan's rule is likely to draft: ``predict_depth`` with each
        layer scaled by ``max(A_i)``, the best ratio of the FIFO, instead of its mean;
        never shallower than ``predicted``, the caller's ``predict_depth(root_values)``
        (passed in: a probe costs ~50 µs at depth 6, and the worker needs both).

        The SGLang worker sizes its runtime state by this and launches forwards early
        only below ``predict_depth``: a state deeper than the draft costs draft KV slots,
        no forwards, while one too shallow cuts the tree.  Sized by the mean, the
        worker's batch-1 trees were cut in 5 % of the iterations, the deepest ones,
        and replay's τ fell 2.4 % (docs/results/2026-11-30_reachable_depth.md)."""
        return max(predicted, self._probe_depth(root_values, self.depth_ratios.largest))

    def _probe_depth(self, root_values, ratio: Callable[[int], float]) -> int:
        """Layers a probe copy of this plan drafts when layer ``i + 1``'s values are
        layer ``i``'s times ``ratio(i)``."""
        if self.max_depth == 0:
            return 0
        probe = replace(self, kept=[], utility=[], draft_cost=[], draft_ms=0.0, draft_forward_ms=0.0, verified=0,
                        learns=False)
        values, layer = np.asarray(root_values, dtype=np.float64)[:, : self.top_k], 1
        while True:
            probe.keep(layer, values)
            if not probe.grow(layer):  # every policy's grow stops at max_depth
                return layer
            values = values * ratio(layer)
            layer += 1

    def keep(self, layer: int, candidate_values) -> int:
        """How many of this layer's candidates (``[B, N]`` host values sorted best first)
        every sequence keeps."""
        raise NotImplementedError

    def grow(self, layer: int) -> bool:
        raise NotImplementedError

    def grow_within(self, layer: int, limit: int) -> bool:
        """``grow`` in an engine that can draft at most ``limit`` layers this iteration
        (the SGLang worker's runtime state, picked from ``reachable_depth``).

        At the limit the rule is still asked, on a copy that takes the charge: its
        answer cannot be drafted, but a stop there must count towards the depth probe
        (D9) as it does where the rule decides freely.  Not asking left a state of
        depth 1 with its stops uncounted, so ``predict_depth`` never saw a probe due
        and the second layer was never drafted again (found inside SGLang on the CPU).
        A probe due at the limit is spent there undrafted; ``predict_depth`` foresees a
        due probe and picks a deeper state, so that happens only where none was built."""
        if layer < limit:
            return self.grow(layer)
        copy(self).grow(layer)  # the FIFOs' stop count is the policy's, shared by the copy
        return False

    def verify_count(self, tree: DraftTree) -> int:
        """Rerank (docs/design/cast.md §5): batch-average the ranked node values, ``u_k`` their
        prefix sums, and let the policy pick ``k`` against ``f_T(B, c, 1..k+1)``."""
        n = min(tree.size - 1, self.max_nodes)
        if n == 0:
            return 0
        utility = batch_utility(ranked_values(tree, n))
        self.verified = self._choose_verified(utility, self._verify_ms(n + 1))
        return self.verified

    def _choose_verified(self, utility: list[float], verify_ms: list[float]) -> int:
        raise NotImplementedError


class Policy:
    """Base class: settings snapshotting, reconfiguration and the depth rule's FIFOs.

    Each subclass is one named policy (``POLICIES``) and says what it needs, so
    callers ask the policy instead of comparing names: ``needs_draft`` (it drafts
    trees, so it needs a draft head) and ``cost_aware`` (it decides on the device's
    cost tables, so it needs a profile measured there, and it honours a bucket's
    ``speculate: false``; EAGLE-2's static tree, the baseline, always drafts)."""

    name: ClassVar[str] = "base"
    plan_class: ClassVar[type[IterationPlan]] = IterationPlan
    needs_draft: ClassVar[bool] = True
    cost_aware: ClassVar[bool] = False
    # A layer switched off by the depth rule is re-tested after this many stops in a
    # row (docs/cast_decisions.md D9).
    depth_probe_every: ClassVar[int] = 16

    def __init__(self, settings: PolicySettings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._ratios: dict[int, DepthRatios] = {}  # per bucket, keyed by its max_batch_size

    @property
    def settings(self) -> PolicySettings:
        return self._settings

    def reconfigure(self, settings: PolicySettings) -> None:
        """Swap in new settings; the running iteration keeps its snapshot."""
        if not isinstance(settings, PolicySettings):
            raise TypeError(f"settings must be PolicySettings, got {type(settings).__name__}")
        with self._lock:
            self._settings = settings

    def begin(self, batch_size: int, context_len: int) -> IterationPlan:
        """The plan of one iteration, on a snapshot of the settings; it travels with
        the iteration (the engine's record carries it to whoever charges the step)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if context_len < 0:
            raise ValueError(f"context_len must be >= 0, got {context_len}")
        with self._lock:
            settings = self._settings
        bucket = settings.for_batch(batch_size)
        if not bucket.speculate and self.cost_aware:
            return VanillaPlan(self, bucket, settings, batch_size, context_len)
        self.bucket_ratios(bucket).resize(bucket.fifo_len)
        return self.plan_class(self, bucket, settings, batch_size, context_len)

    def bucket_ratios(self, bucket: BucketSettings) -> DepthRatios:
        """The FIFOs ``A_i`` of ``bucket``: each bucket learns its own, so a batch size
        of another bucket neither reads nor truncates them."""
        if bucket.max_batch_size not in self._ratios:
            self._ratios[bucket.max_batch_size] = DepthRatios(bucket.fifo_len, self.depth_probe_every)
        return self._ratios[bucket.max_batch_size]

    def depth_ratios(self, batch_size: int = 1) -> DepthRatios:
        """The FIFOs the current settings use at ``batch_size``."""
        return self.bucket_ratios(self.settings.for_batch(batch_size))


class VanillaPlan(IterationPlan):
    """No draft at all: the engine decodes one token per iteration."""

    @property
    def max_depth(self) -> int:
        return 0

    def verify_count(self, tree: DraftTree) -> int:
        return 0


class Eagle2Plan(IterationPlan):
    """EAGLE-2: ``K`` nodes per layer, fixed depth ``H``, the best ``m - 1`` verified."""

    def keep(self, layer: int, candidate_values) -> int:
        n = min(self.top_k, candidate_values.shape[1])
        self.kept.append(n)
        return n

    def grow(self, layer: int) -> bool:
        return self._grow_to_max_depth(layer)

    def verify_count(self, tree: DraftTree) -> int:
        return self._full_budget(tree)


class CastPlan(IterationPlan):
    """CAST: breadth pruning (C1), depth pruning (C2), cost-aware rerank (C3).

    The three flags exist for the ablation (the paper's Table 3): a component that is
    switched off behaves as EAGLE-2's (keep top-k, draft to ``max_depth``, verify the
    best ``m - 1``).  Utilities are still recorded, so depth pruning sees the same
    numbers with or without breadth pruning.
    """

    prune_breadth = True
    prune_depth = True
    rerank = True

    def keep(self, layer: int, candidate_values) -> int:
        utility = batch_utility(candidate_values)
        cost = self._draft_row(layer, len(utility))
        if self.prune_breadth:
            n = largest_valid_index(utility, cost, self.bucket.thresholds.c1)
        else:
            n = min(self.top_k, len(utility))
        return self._record_layer(layer, utility, cost, n)

    def grow(self, layer: int) -> bool:
        if self.prune_depth and layer < self.max_depth:
            score = self.depth_ratios.mean(layer) * self.utility[layer - 1] / self.draft_cost[layer - 1]
            if score < self.bucket.thresholds.c2 and self._stops_after(layer):
                return False
        return self._grow_to_max_depth(layer)

    def verify_count(self, tree: DraftTree) -> int:
        return super().verify_count(tree) if self.rerank else self._full_budget(tree)

    def _choose_verified(self, utility: list[float], verify_ms: list[float]) -> int:
        # c_k = verify(k + 1) / plain step (docs/design/cast.md §5): f_T(k+1) / f_T(1) without overhead.
        plain = self.plain_ms
        return largest_valid_index(utility, [ms / plain for ms in verify_ms[1:]], self.bucket.thresholds.c3)


class RerankOnlyPlan(CastPlan):
    """Ablation: EAGLE-2's tree, CAST's cost-aware rerank (C3) only."""

    prune_breadth = False
    prune_depth = False


class RerankDepthPlan(CastPlan):
    """Ablation: rerank (C3) and depth pruning (C2), no breadth pruning."""

    prune_breadth = False


class DepthBreadthPlan(CastPlan):
    """Ablation (the paper's EAGLE-3+DR+BP row): depth (C2) and breadth (C1) pruning,
    EAGLE-2's verify rule instead of the cost-aware rerank."""

    rerank = False


class GoodputPlan(IterationPlan):
    """Ours, threshold-free: every decision maximises predicted tokens per ms.

    The expected number of accepted tokens of a tree is ``1 + Σ values`` (a node's
    value estimates the chance its whole path is accepted), and its time is the
    predicted draft ms plus ``f_T`` of the verified tokens.  A candidate or a layer
    is worth adding only while it pays at least the rate the tree already has.
    """

    def _tree_size(self) -> tuple[int, float]:
        return sum(self.kept), sum(self.utility)

    def keep(self, layer: int, candidate_values) -> int:
        utility = batch_utility(candidate_values)
        count = len(utility)
        nodes, expected = self._tree_size()
        verify_ms = self._verify_ms(nodes + count + 1)
        expand_ms = self.settings.costs.draft_layer_row(self.batch_size, self.layer_context(layer), count)
        rate = (1.0 + expected) / (self.draft_ms + verify_ms[nodes])
        total_ms = [self.draft_ms + expand + verify for expand, verify in zip(expand_ms, verify_ms[nodes + 1:])]
        n = largest_valid_index(utility, total_ms, rate)
        return self._record_layer(layer, utility, self._draft_row(layer, count), n)

    def grow(self, layer: int) -> bool:
        if layer >= self.max_depth:
            return False
        nodes, expected = self._tree_size()
        width = self.kept[-1]
        verify_ms = self._verify_ms(nodes + width + 1)
        gain = self.depth_ratios.mean(layer) * self.utility[-1]
        expand_ms = self.settings.costs.draft_layer_ms(self.batch_size, self.layer_context(layer), width)
        now = (1.0 + expected) / (self.draft_ms + verify_ms[nodes])
        deeper = (1.0 + expected + gain) / (self.draft_ms + expand_ms + verify_ms[nodes + width])
        if deeper <= now and self._stops_after(layer):
            return False
        self._charge_expansion(layer)
        return True

    def _choose_verified(self, utility: list[float], verify_ms: list[float]) -> int:
        rate = [(1.0 + u) / (self.draft_ms + ms) for u, ms in zip(utility, verify_ms[1:])]
        return max(range(len(rate)), key=rate.__getitem__) + 1  # the first best, as argmax


class VanillaPolicy(Policy):
    """Plain decoding: no draft head, one token per iteration."""

    name = "vanilla"
    plan_class = VanillaPlan
    needs_draft = False


class Eagle2Policy(Policy):
    """EAGLE-2's static tree: top-k per layer to a fixed depth, the best m - 1 verified."""

    name = "eagle2"
    plan_class = Eagle2Plan


class CastPolicy(Policy):
    """CAST: breadth and depth pruning and a cost-aware rerank on measured costs."""

    name = "cast"
    plan_class = CastPlan
    cost_aware = True


class GoodputPolicy(Policy):
    """Ours, threshold-free: each decision maximises predicted tokens per ms."""

    name = "goodput"
    plan_class = GoodputPlan
    cost_aware = True


class RerankOnlyPolicy(CastPolicy):
    """Ablation: EAGLE-2's tree, CAST's cost-aware rerank only."""

    name = "cast-rerank"
    plan_class = RerankOnlyPlan


class RerankDepthPolicy(CastPolicy):
    """Ablation: rerank and depth pruning, no breadth pruning."""

    name = "cast-rerank-depth"
    plan_class = RerankDepthPlan


class DepthBreadthPolicy(CastPolicy):
    """Ablation: depth and breadth pruning, EAGLE-2's verify rule."""

    name = "cast-depth-breadth"
    plan_class = DepthBreadthPlan


# The one registry of named policies: every name a flag, a profile or a benchmark
# accepts resolves here, and nothing outside compares policy names.
POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (
    VanillaPolicy, Eagle2Policy, CastPolicy, GoodputPolicy, RerankOnlyPolicy, RerankDepthPolicy,
    DepthBreadthPolicy)}


def policy_class(name: str) -> type[Policy]:
    """The policy class called ``name`` (case-insensitive); ``ValueError`` naming the
    accepted names otherwise."""
    try:
        return POLICIES[name.lower()]
    except KeyError:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}") from None


def make_policy(name: str, settings: PolicySettings) -> Policy:
    """Build a policy by name (``vanilla``, ``eagle2``, ``cast``, ``goodput``, or an ablation variant)."""
    return policy_class(name)(settings)
