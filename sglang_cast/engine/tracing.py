"""Trace recording (docs/design/cast.md §8) as a speculation strategy of the runner: the same
iteration, drafted and accepted differently.

It drafts the full EAGLE-2 expansion, grafts the prompt-lookup branch's proposal onto
it (when recording one), verifies every node, stores the iteration as a trace, and
accepts what the engine's own policy would have accepted on it (its decisions replayed
on the fresh record), so recording does not change the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cast import (ContextLookup, Policy, Proposal, RecordingExpander, VerifyResult, grow_tree,
                    replay_iteration, select_verified, verify_greedy)
from .runner import Accepted, Batch, Drafted, SpeculativeRunner, accepted_from, graft_lookup


@dataclass(frozen=True)
class RecordedDraft(Drafted):
    """A recording iteration's draft: ``recorder`` holds what the expansion saw, for
    `TraceRecording.accept` to finish into the trace; the tree's first ``drafted_nodes``
    are the draft's, the rest the graft of the lookup's ``proposals``."""

    recorder: RecordingExpander
    drafted_nodes: int
    proposals: list[Proposal]


class TraceRecording:
    """Speculation that records each iteration; greedy requests only (replay is
    defined for greedy).  ``trace_policy`` is EAGLE-2 with the recording shape;
    ``lookup`` the prompt-lookup branch recorded with it (replay can graft any
    shorter one)."""

    def __init__(self, trace_policy: Policy, lookup: ContextLookup | None = None) -> None:
        self.trace_policy = trace_policy
        self.lookup = lookup

    def draft(self, runner: SpeculativeRunner, batch: Batch) -> RecordedDraft:
        plan = self.trace_policy.begin(len(batch.requests), batch.context_max)
        runner.feed_backlog(batch.requests)
        recorder = RecordingExpander(runner.expander(batch), plan.top_k)
        tree = grow_tree(plan, recorder, batch.roots)
        layers, drafted_nodes = tree.layers, tree.size
        proposals = graft_lookup(tree, self.lookup, batch.requests)
        return RecordedDraft(plan, select_verified(tree, tree.size - 1), tree, layers, recorder, drafted_nodes,
                             proposals)

    def accept(self, runner: SpeculativeRunner, batch: Batch, drafted: RecordedDraft, logits: torch.Tensor) -> Accepted:
        vtree = drafted.vtree
        argmax = runner.greedy_tokens(logits).cpu()  # [B, n], the iteration's one host copy
        by_node = torch.empty((argmax.shape[0], drafted.tree.size), dtype=argmax.dtype)
        by_node.scatter_(1, vtree.node_ids, argmax)  # [B, T]
        depth = self.lookup.depth if self.lookup is not None else 0
        trace = drafted.recorder.finish(drafted.tree, batch.host_context, by_node, drafted.drafted_nodes, depth,
                                        drafted.proposals)
        outcome = replay_iteration(trace, runner.policy)
        full = verify_greedy(vtree, argmax)
        # A policy may accept a candidate the full tree never kept (verified through its
        # parent's argmax, but with no K/V of its own); commit only what was fed.
        paths = [path[:wanted] for path, wanted in zip(full.paths, outcome.num_accepted)]
        rows = argmax.tolist()
        bonus = [row[path[-1] if path else 0] for row, path in zip(rows, paths)]
        return accepted_from(vtree, VerifyResult(paths, bonus), trace)
