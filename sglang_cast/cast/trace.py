"""Trace records and offline replay (docs/design/cast.md §8).

A trace iteration stores the *full* EAGLE-2 expansion an engine drafted — every
drafted child, the whole rerank pool (docs/design/cast.md §4), with the top-``K``
children the draft proposed for each expanded node — and the target's greedy next
token after *every* recorded node (full verification).  In
EAGLE a node's draft value depends only on its ancestors, so any policy's tree
that stays inside the recording can be regrown from it with the very same
:func:`grow_tree` and verified with the very same :func:`verify_greedy` — no model
forward — and charged with the cost tables.  That makes tuning C1/C2/C3 cheap.

A policy may keep a node the recording never expanded (its breadth rule kept a
candidate EAGLE-2 ranked below ``K``).  Its children are then unknown: replay
gives them value 0 and a token that never matches, and counts the event in
``unrecorded`` so callers can see how far replay is from exact.

A recording may also hold the prompt-lookup branch (`context_lookup`): each
sequence's proposal, grafted onto the full expansion and verified with it.  A
policy whose bucket has a branch of up to that depth grafts the same proposal onto
its own tree in replay; every node it adds is then in the recording (under the same
parent, with the same token), so its verdict is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from .context_lookup import LEGACY_MATCH, Proposal, graft_proposals
from .expand import grow_tree
from .policies import IterationPlan, Policy
from .tree import DraftTree, node_slice, select_verified
from .verify import committed_tokens, verify_greedy

NO_TOKEN = -1  # token of a child the recording does not know
NO_MATCH = -2  # target "argmax" that no draft token equals
# What a stored trace means.  1: the tree held only the kept top-K nodes of each
# layer, and the recording run could commit only what those verified.  2: it holds
# every drafted child (the full rerank pool), all verified, so the run commits what
# the policy accepts from the pool.  3: the run commits what the whole tree accepts,
# its prompt-lookup branch included (``autotune.collect``: where the iterations start
# decides what replay predicts).  Each records different iterations of the same
# prompts, so they are never mixed: only the current format is read.
TRACE_FORMAT = 3


@dataclass
class TraceIteration:
    """One recorded iteration of a batch (all tensors on the CPU)."""

    context_lens: torch.Tensor  # [B] committed tokens in the target cache
    tree: DraftTree  # full expansion, node 0 = root (host arrays)
    child_tokens: torch.Tensor  # [B, T, K] draft top-K children of each node, NO_TOKEN if not expanded
    child_probs: torch.Tensor  # [B, T, K] their draft probabilities, 0 if not expanded
    target_argmax: torch.Tensor  # [B, T] target's greedy next token after each node
    # The prompt-lookup branch, when recorded: nodes [drafted_nodes, T) are its graft (the
    # first drafted_nodes, root included, are the draft's); proposals[b] holds sequence b's
    # up to lookup_depth proposed tokens and the match length that valued them.
    # lookup_depth 0: none recorded.
    drafted_nodes: int | None = None
    lookup_depth: int = 0
    proposals: list[Proposal] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return self.tree.batch_size

    @property
    def top_k(self) -> int:
        return int(self.child_tokens.shape[2])

    @property
    def draft_depth(self) -> int:
        """Layers the draft expanded (a grafted lookup path may reach deeper)."""
        drafted = self.tree.size if self.drafted_nodes is None else self.drafted_nodes
        return int(self.tree.depths[:, :drafted].max())

    def verdicts(self) -> torch.Tensor:
        """``[B, T]``: does the target, at the node's parent, pick the node's token?
        (The root is True.)"""
        parents, tokens = torch.from_numpy(self.tree.parents), torch.from_numpy(self.tree.tokens)
        return (tokens == self.target_argmax.gather(1, parents.clamp(min=0))) | (parents < 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT,
            "context_lens": self.context_lens.tolist(),
            "tokens": self.tree.tokens.tolist(),
            "parents": self.tree.parents.tolist(),
            "values": self.tree.values.tolist(),
            "child_tokens": self.child_tokens.tolist(),
            "child_probs": self.child_probs.tolist(),
            "target_argmax": self.target_argmax.tolist(),
            **({"drafted_nodes": self.drafted_nodes, "lookup_depth": self.lookup_depth,
                "proposals": [p.tokens for p in self.proposals],
                "proposal_matches": [p.matched for p in self.proposals]} if self.lookup_depth else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceIteration:
        found = data.get("format", 1) if isinstance(data, dict) else None
        if found != TRACE_FORMAT:
            raise ValueError(f"trace iteration: format must be {TRACE_FORMAT} (every drafted child recorded, "
                             f"the run committing through the lookup branch), got {found!r}; traces of an older "
                             "format start their iterations elsewhere and are not replayed: record them again "
                             "(`cast-autotune collect`)")
        missing = {"context_lens", "tokens", "parents", "values", "child_tokens", "child_probs",
                   "target_argmax"} - set(data)
        if missing:
            raise ValueError(f"trace iteration: missing field(s) {sorted(missing)}")
        return cls(
            context_lens=torch.tensor(data["context_lens"], dtype=torch.long),
            tree=DraftTree.from_nodes(data["tokens"], data["parents"], data["values"]),
            child_tokens=torch.tensor(data["child_tokens"], dtype=torch.long),
            child_probs=torch.tensor(data["child_probs"], dtype=torch.float64),
            target_argmax=torch.tensor(data["target_argmax"], dtype=torch.long),
            drafted_nodes=data.get("drafted_nodes"),
            lookup_depth=data.get("lookup_depth", 0),
            proposals=recorded_proposals(data),
        )


def recorded_proposals(data: dict[str, Any]) -> list[Proposal]:
    """A stored iteration's lookup proposals; one stored before proposals carried their
    match length matched `LEGACY_MATCH` tokens (the lookup's only rule then)."""
    tokens = data.get("proposals", [])
    matches = data.get("proposal_matches") or [LEGACY_MATCH if p else 0 for p in tokens]
    if len(matches) != len(tokens):
        raise ValueError(f"trace iteration: proposal_matches holds {len(matches)} entries for {len(tokens)} "
                         "proposals")
    return [Proposal(list(p), int(m)) for p, m in zip(tokens, matches)]


class ReplayExpander:
    """Serves children from a recording; tracks which recorded node each regrown
    node is (``record_ids``), or -1 when the recording does not have it."""

    def __init__(self, trace: TraceIteration) -> None:
        self.trace = trace
        self.child_tokens, self.child_probs = trace.child_tokens.numpy(), trace.child_probs.numpy()  # [B, T, K]
        self.record = np.zeros((trace.batch_size, 1), dtype=np.int64)
        self.unrecorded = 0

    def record_ids(self, tree: DraftTree) -> np.ndarray:
        """Recorded node id of every node of ``tree`` (``[B, T]``, -1 if unknown).
        New nodes are matched in runs whose parents are already matched: a drafted
        layer is one run, a grafted lookup path one run per node."""
        rec, rows = self.trace.tree, tree.storage.rows
        while (known := self.record.shape[1]) < tree.size:
            ready = (tree.parents[:, known:] < known).all(axis=0)  # [new]; the first is always ready
            end = known + (len(ready) if ready.all() else int(np.argmin(ready)))
            parent_rec = self.record[rows, tree.parents[:, known:end]]  # [B, run]
            tokens = tree.tokens[:, known:end]
            match = ((rec.parents[:, None, :] == parent_rec[:, :, None])
                     & (rec.tokens[:, None, :] == tokens[:, :, None])
                     & (parent_rec >= 0)[:, :, None])  # [B, run, recorded]
            found = np.where(match.any(axis=2), match.argmax(axis=2), -1)
            self.record = np.concatenate([self.record, found], axis=1)
        return self.record

    def expand(self, tree: DraftTree, frontier: range, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        if top_k > self.trace.top_k:
            raise ValueError(f"top_k {top_k} exceeds the recording's top_k {self.trace.top_k}")
        rec = self.record_ids(tree)[:, node_slice(frontier)]  # [B, n]
        rows = tree.storage.rows
        tokens = self.child_tokens[rows, np.maximum(rec, 0), :top_k]  # [B, n, k]
        probs = self.child_probs[rows, np.maximum(rec, 0), :top_k]
        missing = (rec < 0)[:, :, None] | (tokens == NO_TOKEN)
        self.unrecorded += int(missing.any(axis=2).sum())
        return np.where(missing, 0.0, probs), np.where(missing, NO_TOKEN, tokens)


class RecordingExpander:
    """Wraps a live expander and remembers every node's proposed children, so the
    full expansion it served can be stored as a :class:`TraceIteration`."""

    def __init__(self, inner, top_k: int) -> None:
        self.inner = inner
        self.top_k = top_k
        self.children: list[tuple[range, np.ndarray, np.ndarray]] = []

    def expand(self, tree: DraftTree, frontier: range, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        probs, tokens = self.inner.expand(tree, frontier, top_k)
        self.children.append((frontier, probs, tokens))
        return probs, tokens

    def finish(self, tree: DraftTree, context_lens: torch.Tensor, target_argmax: torch.Tensor,
               drafted_nodes: int | None = None, lookup_depth: int = 0,
               proposals: list[Proposal] | None = None) -> TraceIteration:
        """The trace of ``tree`` as verified (``target_argmax`` ``[B, T]``); with a lookup
        branch, its first ``drafted_nodes`` are the draft's and the rest the graft of
        ``proposals`` (at most ``lookup_depth`` tokens each)."""
        batch, size = tree.batch_size, tree.size
        child_tokens = torch.full((batch, size, self.top_k), NO_TOKEN, dtype=torch.long)
        child_probs = torch.zeros((batch, size, self.top_k), dtype=torch.float64)
        for frontier, probs, tokens in self.children:
            child_tokens[:, node_slice(frontier)] = torch.from_numpy(tokens)
            child_probs[:, node_slice(frontier)] = torch.from_numpy(probs)
        return TraceIteration(context_lens.cpu(), tree.copy(), child_tokens, child_probs, target_argmax.cpu(),
                              drafted_nodes, lookup_depth, proposals or [])


@dataclass
class IterationOutcome:
    """What one (live or replayed) iteration did and what the cost model charges."""

    num_accepted: list[int]  # draft tokens accepted per sequence
    verified: int  # draft nodes verified per sequence
    depth: int  # layers drafted
    draft_ms: float
    verify_ms: float
    unrecorded: int = 0

    @property
    def tokens(self) -> int:
        """Tokens committed (accepted + one bonus per sequence)."""
        return committed_tokens(self.num_accepted)


def charge(plan: IterationPlan, verified: int, depth: int, max_accepted: int,
           host: bool = True) -> tuple[float, float]:
    """``(draft_ms, verify_ms)`` the cost model charges an iteration (``CostModel``): the
    draft layers the plan asked for, the draft catching up on the accepted tokens, and
    the verify over ``verified + 1`` tokens with the iteration's fixed host work and
    its commit; a plain step (``depth == 0``) is ``plain_ms``.  ``host=False`` charges
    the forwards alone: what a whole timed step minus its host work should take."""
    costs, batch, context = plan.settings.costs, plan.batch_size, plan.context_len
    if not host:
        costs = replace(costs, overhead=None)
    if depth == 0:
        return 0.0, costs.plain_ms(batch, context)
    catch_up = costs.draft(batch, context, max_accepted + 1)
    layers = plan.draft_ms if host else plan.draft_forward_ms
    return layers + catch_up, float(costs.verify_row(batch, context, verified + 1)[verified])


def charged_ms(plan: IterationPlan, verified: int, max_accepted: int) -> tuple[float, float]:
    """``(charged ms, forwards ms)`` of a finished iteration that ran under ``plan``
    (``IterationRecord.plan``): `charge` with the plan's costs, and with its forward tables
    alone.  What live checks (the server's calibration, ``autotune``'s timed steps, the
    bench) set against the measured step."""
    depth = len(plan.kept)
    return (sum(charge(plan, verified, depth, max_accepted)),
            sum(charge(plan, verified, depth, max_accepted, host=False)))


def graft_recorded(tree: DraftTree, trace: TraceIteration, plan: IterationPlan) -> None:
    """Graft the recorded lookup proposals onto a replayed ``tree``, as far as the
    plan's bucket branch reaches (live: ``engine.runner.graft_lookup``)."""
    lookup = plan.lookup
    if lookup is None:
        return
    if lookup.depth > trace.lookup_depth:
        raise ValueError(f"lookup_depth {lookup.depth} exceeds the recording's lookup depth {trace.lookup_depth}; "
                         "record traces with a deeper branch (`cast-autotune collect --lookup-depth`)")
    graft_proposals(tree, trace.proposals, lookup)


def replay_iteration(trace: TraceIteration, policy: Policy) -> IterationOutcome:
    context = int(trace.context_lens.max())
    plan = policy.begin(trace.batch_size, context)
    expander = ReplayExpander(trace)
    tree = grow_tree(plan, expander, trace.tree.tokens[:, 0])
    depth = tree.layers
    graft_recorded(tree, trace, plan)
    verified = plan.verify_count(tree)
    vtree = select_verified(tree, verified)
    record = torch.from_numpy(expander.record_ids(tree)).gather(1, vtree.node_ids)
    argmax = trace.target_argmax.gather(1, record.clamp(min=0)).masked_fill(record < 0, NO_MATCH)
    result = verify_greedy(vtree, argmax)
    accepted = result.num_accepted
    draft_ms, verify_ms = charge(plan, verified, depth, max(accepted))
    return IterationOutcome(accepted, verified, depth, draft_ms, verify_ms, expander.unrecorded)


@dataclass
class ReplayResult:
    outcomes: list[IterationOutcome] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(o.tokens for o in self.outcomes)

    @property
    def time_ms(self) -> float:
        return sum(o.draft_ms + o.verify_ms for o in self.outcomes)

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.tokens / self.time_ms if self.time_ms > 0 else 0.0

    @property
    def tau(self) -> float:
        """Mean tokens committed per sequence per iteration."""
        sequences = sum(len(o.num_accepted) for o in self.outcomes)
        return self.tokens / sequences if sequences else 0.0

    @property
    def unrecorded(self) -> int:
        return sum(o.unrecorded for o in self.outcomes)


def replay(traces: list[TraceIteration], policy: Policy) -> ReplayResult:
    """Run ``policy`` over recorded iterations; greedy decoding only."""
    return ReplayResult([replay_iteration(t, policy) for t in traces])
