"""The policy side of the SGLang worker, free of SGLang objects.

``CastWorker`` asks it five things per iteration: whether this batch size drafts
at all (a bucket with ``speculate: false`` runs SGLang's zero-step state), a
plan (the shared policy's ``begin``), its prompt-lookup branch (``lookup``), the
draft depth to run (before drafting, from the plan's prediction and the branch's
proposals) and the verify width for the nodes the plan's rerank chose.  The
answers are picked from the runtime states pre-built at startup
(``runtime_shapes``).  Keeping this apart from the worker lets tests check the
worker's decisions against the native engine's with plain tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cast import ContextLookup, IterationPlan, Policy, PolicySettings
from .plugin_config import StaticShape
from .runtime_shapes import (FLOOR_WIDTH, NO_DRAFT, choose_depth, choose_width, draft_depths, fills, layer_widths,
                             verify_widths, widths_at_depth)


class CastDecider:
    def __init__(self, policy: Policy, shape: StaticShape,
                 runtime_states: Sequence[tuple[int, int]] | None = None, *, lookup_enabled: bool = True) -> None:
        """``runtime_states``: the profile's (``provenance.sglang.runtime_states``),
        else the fallback grid; the startup state and every depth's width-2 floor are
        always built.  A reloaded profile reuses the catalogue (it must fit the
        static shape, and the nearest larger state serves any bucket).
        ``lookup_enabled``: whether buckets' prompt-lookup branches run (not under
        overlap scheduling, ``lookup_branch``)."""
        self.policy = policy
        self.shape = shape
        self.lookup_enabled = lookup_enabled
        self.has_no_draft_state = not self.drafts_in_every_bucket(policy.settings)
        if runtime_states is None:
            buckets = policy.settings.buckets
            widths = verify_widths(shape.num_draft_tokens, [w for b in buckets for w in layer_widths(b.shape)])
            drafting = [(d, w) for d in draft_depths(shape.num_steps, [b.shape.max_depth for b in buckets])
                        for w in widths_at_depth(widths, d, shape.topk)]
        else:
            drafting = [state for state in runtime_states if state != NO_DRAFT]
            self._check_fit(drafting)
        drafting += [shape.startup_state] + [(d, FLOOR_WIDTH) for d, _ in drafting]
        # depth -> the widths built at it, ascending
        self.catalogue = {d: tuple(sorted({w for dd, w in drafting if dd == d}))
                          for d in sorted({d for d, _ in drafting})}
        self.depths = tuple(self.catalogue)
        self.widths = tuple(sorted({w for ws in self.catalogue.values() for w in ws}))

    def _check_fit(self, states: Sequence[tuple[int, int]]) -> None:
        """Named runtime states must fit SGLang's startup shape and be fillable."""
        shape = self.shape
        bad = [(d, w) for d, w in states
               if not (1 <= d <= shape.num_steps and 2 <= w <= shape.num_draft_tokens and fills(w, d, shape.topk))]
        if bad:
            raise ValueError(f"runtime states {bad} do not fit SGLang's startup shape --speculative-num-steps "
                             f"{self.shape.num_steps} --speculative-eagle-topk {self.shape.topk} "
                             f"--speculative-num-draft-tokens {self.shape.num_draft_tokens} (depth in [1, steps], "
                             "width in [2, num_draft_tokens] and at most the nodes that depth drafts, plus the root)")

    def drafts_in_every_bucket(self, settings: PolicySettings) -> bool:
        """Whether every bucket of ``settings`` drafts under this policy (EAGLE-2
        drafts even where a bucket says ``speculate: false``)."""
        return all(self.policy.begin(b.max_batch_size, 0).max_depth > 0 for b in settings.buckets)

    @property
    def states(self) -> tuple[tuple[int, int], ...]:
        """Every (depth, width) pair the worker builds a runtime state for."""
        drafting = tuple((d, w) for d in self.depths for w in self.widths_at(d))
        return ((NO_DRAFT,) if self.has_no_draft_state else ()) + drafting

    def drafts(self, batch_size: int) -> bool:
        """Whether an iteration of ``batch_size`` sequences drafts: the policy's own
        answer (a plan of depth 0 does not), unless no zero-step state was built
        (a reload added ``speculate: false``), where it drafts anyway."""
        return not self.has_no_draft_state or self.policy.begin(batch_size, 0).max_depth > 0

    def widths_at(self, depth: int) -> tuple[int, ...]:
        return self.catalogue[depth]

    def begin(self, batch_size: int, context_len: int) -> IterationPlan:
        """docs/design/cast.md §2: a ragged batch is charged at its longest committed context."""
        return self.policy.begin(batch_size, context_len)

    def lookup(self, plan: IterationPlan) -> ContextLookup | None:
        """The prompt-lookup branch this iteration grafts (`IterationPlan.lookup`), if any."""
        return plan.lookup if self.lookup_enabled else None

    def depth(self, reachable: int) -> int:
        """The pre-built depth for an iteration whose plan may draft ``reachable`` layers
        (``IterationPlan.reachable_depth`` on the root's candidate values): the smallest
        that holds them.  The draft may still stop earlier (the exact depth rule runs
        layer by layer), never later."""
        return choose_depth(reachable, self.depths)

    def width(self, depth: int, wanted_nodes: int, available_nodes: int) -> int:
        return choose_width(wanted_nodes, available_nodes, self.widths_at(depth))

    def clamps(self, settings: PolicySettings) -> list[str]:
        """How ``settings`` (a reloaded profile that fits the static shape) map onto
        the catalogue built at startup: a bucket value with no state of its own runs
        in the next larger one.  Empty when every value has its own state."""
        notes = self.lookup_notes(settings)
        if not self.has_no_draft_state and not self.drafts_in_every_bucket(settings):
            notes.append("speculate: false buckets keep drafting (no zero-step state was built at startup)")
        for bucket in settings.buckets:
            shape, where = bucket.shape, f"bucket max_batch_size={bucket.max_batch_size}"
            if shape.max_depth not in self.depths:
                notes.append(f"{where}: max_depth {shape.max_depth} runs in depth-"
                             f"{choose_depth(shape.max_depth, self.depths)} states")
            if shape.num_verify_tokens not in self.widths:
                larger = next(w for w in self.widths if w >= shape.num_verify_tokens)
                notes.append(f"{where}: num_verify_tokens {shape.num_verify_tokens} is verified in width-{larger} "
                             "states (the extra slots take the next-ranked nodes)")
        return notes

    def lookup_notes(self, settings: PolicySettings) -> list[str]:
        """Where the prompt-lookup branches of ``settings``' drafting buckets do not run
        as chosen: all of them when the branch is off, else a branch deeper than the
        deepest runtime state (verified only that deep).  Empty when every branch runs
        whole."""
        branched = [b for b in settings.buckets if b.lookup_depth and b.speculate]
        if branched and not self.lookup_enabled:
            return ["the buckets' prompt-lookup branches are off: they match each request's committed context, "
                    "which overlap scheduling commits one iteration late (launch with --disable-overlap-schedule "
                    "to use them)"]
        deepest = self.depths[-1]
        return [f"bucket max_batch_size={b.max_batch_size}: its {b.lookup_depth}-token prompt-lookup branch is "
                f"verified at most {deepest} deep (the deepest runtime state)"
                for b in branched if b.lookup_depth > deepest]
