"""The model work of the native engine: prefill admitted requests, or run one
speculative iteration over a batch and say what it did.

One iteration (``SpeculativeRunner.iterate``):

1. the speculation strategy drafts a tree per sequence and picks the nodes to verify
   (`PolicySpeculation`: the policy's plan, ``cast.grow_tree`` with the EAGLE head as
   expander; trace recording swaps in its own strategy, engine/tracing.py);
2. one target forward verifies root + chosen nodes with tree attention;
3. the strategy decides each sequence's accepted path plus a bonus token;
4. the target cache compacts the accepted paths into place and the draft catches up
   on the accepted tokens with the target's features, which also yields the next
   root's children.

The runner executes; every decision about the tree comes from the policy.

Host and device: the runner keeps what the host must know on the host (slots, the
caches' lengths, the draft tree, the accepted paths) and reads the device back only
where a decision needs device data: one copy of each drafted layer's children
(engine/draft_expander.py) and one of the target's greedy tokens per iteration
(`verify`).  Everything else it sends to the device asynchronously
(`models.kv_cache.to_device`): the draft forwards' and the verify forward's inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from ..cast import (ContextLookup, DraftTree, IterationPlan, Policy, Proposal, TraceIteration, VerifyResult,
                    VerifyTree, decide_verified, graft_proposals, grow_tree, select_verified,
                    target_probs, verify_greedy, verify_sampling)
from ..cast.tree import TreeStorage
from ..models.attention import causal_tree_mask
from ..models.cpu_layer import greedy_tokens_for
from ..models.eagle import rows_at
from ..models.kv_cache import KVCache, to_device
from .cuda_graphs import DecodeShapes, EngineGraphs, cache_slots
from .draft_expander import DraftExpander, child_reader_for
from .requests import Request
from .timing import StageClock


def pad_right(row: list, width: int) -> list:
    """``row`` padded to ``width`` by repeating its last item (the draft's catch-up feeds
    ragged rows; padded positions are never committed)."""
    return row + [row[-1]] * (width - len(row))


# A prefill group's padded tokens (rows x longest prompt) stay within this, so its
# activations and attention mask ([rows, tokens, cache positions]) are no larger than
# one prompt of this length needs; a longer prompt is prefilled alone, as before.
PREFILL_GROUP_TOKENS = 8192


def prefill_groups(requests: list[Request], forward_ms: Callable[[int, int], float]) -> list[list[Request]]:
    """The admitted requests in groups, each prefilled by one forward padded to its
    longest prompt.  Whether batching pays is a cost question with no single answer:
    one forward instead of one per prompt saves launches on a GPU and feeds a dense CPU
    GEMM more rows, while padding costs compute, and a weight-only int4 GEMM's time
    grows with its rows (docs/native_engine.md).  So it is decided on the target's
    measured cost table, ``forward_ms(rows, tokens)``: by prompt length, a prompt joins
    the group when the group's padded forward costs no more than the group's forward
    plus the prompt's own, and stays within ``PREFILL_GROUP_TOKENS``."""
    groups: list[list[Request]] = []
    for request in sorted(requests, key=lambda r: len(r.prompt_ids)):
        length = len(request.prompt_ids)
        if groups and (len(groups[-1]) + 1) * length <= PREFILL_GROUP_TOKENS:
            group = groups[-1]
            longest = len(group[-1].prompt_ids)
            if forward_ms(len(group) + 1, length) <= forward_ms(len(group), longest) + forward_ms(1, length):
                group.append(request)
                continue
        groups.append([request])
    return groups


def decode_shapes(policy: Policy, max_batch_size: int) -> DecodeShapes:
    """The largest decode-time forwards ``policy`` can ask for (the graphs' keys):
    plain decoding only for a policy that drafts nothing."""
    if not policy.needs_draft:
        return DecodeShapes(max_batch=max_batch_size, verify_tokens=1, top_k=1, max_depth=0)
    shapes = [b.shape for b in policy.settings.buckets]
    return DecodeShapes(max_batch=max_batch_size, verify_tokens=1 + max(s.num_verify_tokens for s in shapes),
                        top_k=max(s.top_k for s in shapes), max_depth=max(s.max_depth for s in shapes))


def feature_layers(target, draft) -> tuple[int, ...]:
    """Target layers whose hidden states the draft reads, as the draft says
    (``draft.feature_layers``: three for an EAGLE-3 head); ``()`` without a draft."""
    return () if draft is None else draft.feature_layers(target.config.num_layers)


def feature_width(target, draft) -> int:
    """Width of the target features the draft reads: one hidden state per feature layer
    (the last hidden state when there are none)."""
    return target.config.hidden_size * max(1, len(feature_layers(target, draft)))


@dataclass
class IterationRecord:
    """What one step did, for metrics and benchmarks.

    The stages are marked on one `timing.StageClock` (CUDA events on a GPU, with one
    device synchronisation at the end of the iteration): ``draft_ms`` is the drafting
    plus the draft's catch-up, ``verify_ms`` the target forward, acceptance and
    target-cache commit, and ``step_ms`` the whole iteration, host work included
    (batch set-up, the policy's decisions, appending and detokenising the new tokens),
    so ``step_ms`` minus the forwards' time is the iteration's host overhead.
    ``plan`` is the policy's plan the iteration ran under (what the cost model charges
    it against: `cast.charged_ms`)."""

    plan: IterationPlan
    batch_size: int
    context_len: int
    depth: int
    verified: int
    accepted: list[int]
    # Per sequence: the summed path values of its verified draft nodes (root excluded),
    # the draft's predicted expected accepted tokens (the paper's Fig. 3 x-axis).
    verified_value: list[float]
    draft_ms: float
    verify_ms: float
    step_ms: float

    @property
    def host_ms(self) -> float:
        """The step outside the draft and verify stages: set-up and appending tokens."""
        return self.step_ms - self.draft_ms - self.verify_ms


@dataclass(frozen=True)
class Batch:
    """The running requests of one iteration, as the tensors the forwards take."""

    requests: list[Request]
    slot_ids: list[int]  # cache slot of each sequence
    slots: torch.Tensor  # [B] the same, a host tensor
    device_slots: torch.Tensor  # [B] the same, on the device
    context: torch.Tensor  # [B] tokens committed in the target cache, on the device
    host_context: torch.Tensor  # [B] the same, on the host
    context_max: int  # the longest of them
    roots: list[int]  # [B] last committed token, not yet seen by the target


@dataclass(frozen=True)
class Drafted:
    """A strategy's draft: the plan it drafted under, the nodes the target verifies
    (host tensors) and the full tree the draft head grew, ``None`` when it grew none
    (valid for this iteration: the next tree is written into its storage, so copy
    what must outlive it, ``DraftTree.copy``)."""

    plan: IterationPlan
    vtree: VerifyTree
    tree: DraftTree | None
    draft_layers: int  # layers the draft head expanded (a lookup branch may reach deeper)

    @property
    def speculated(self) -> bool:
        """Did the draft head draft (then its cache must catch up on the accepted tokens)?"""
        return self.tree is not None


@dataclass(frozen=True)
class Accepted:
    """What verification decided, on the host: per sequence the accepted local node
    indices of ``vtree``, the bonus token and the tokens to commit (the accepted draft
    tokens, then the bonus); for the record the verified tree's depth and per-row
    value; ``trace`` when the iteration was recorded."""

    paths: list[list[int]]
    bonus: list[int]
    committed: list[list[int]]
    depth: int
    verified_value: list[float]
    trace: TraceIteration | None = None


def accepted_from(vtree: VerifyTree, result: VerifyResult, trace: TraceIteration | None = None) -> Accepted:
    """Verification's outcome with what it commits: per row the accepted draft tokens
    and the bonus, the verified tree's depth and value sum (all on the host)."""
    depths, values = vtree.depths.numpy(), vtree.values.numpy()  # host tensors: numpy's views skip torch's dispatch
    return Accepted(result.paths, result.bonus, result.committed(vtree), int(depths.max()),
                    values[:, 1:].sum(axis=1).tolist(), trace)


@dataclass(frozen=True)
class Commit:
    """Everything ``SpeculativeRunner._commit_draft`` writes back after verification."""

    batch: Batch
    drafted: Drafted
    features: torch.Tensor  # [B, n, F] target features of the verified tokens
    accepted: Accepted


@dataclass(frozen=True)
class IterationOutput:
    """What ``iterate`` hands back (the new tokens are already on the requests)."""

    record: IterationRecord
    trace: TraceIteration | None


class Speculation(Protocol):
    """How an iteration drafts and accepts: the live policy, or trace recording."""

    def draft(self, runner: SpeculativeRunner, batch: Batch) -> Drafted: ...

    def accept(self, runner: SpeculativeRunner, batch: Batch, drafted: Drafted, logits: torch.Tensor) -> Accepted: ...


def graft_lookup(tree: DraftTree, lookup: ContextLookup | None, requests: list[Request]) -> list[Proposal]:
    """Graft ``lookup``'s proposal for each request onto its row of ``tree``
    (`cast.context_lookup`); returns the proposals (none without a lookup)."""
    if lookup is None:
        return [Proposal.none() for _ in requests]
    proposals = [lookup.propose(r.prompt_ids + r.output_ids) for r in requests]
    graft_proposals(tree, proposals, lookup)
    return proposals


class PolicySpeculation:
    """The live path: the policy's plan grows the tree and picks how many nodes to
    verify; the target's verification decides what is accepted.  Where the plan's
    bucket has a prompt-lookup branch, the grown tree also holds the tokens that
    followed the sequence's last tokens earlier in its context, ranked with the
    drafted nodes."""

    def draft(self, runner: SpeculativeRunner, batch: Batch) -> Drafted:
        plan = runner.policy.begin(len(batch.requests), batch.context_max)
        speculate = runner.draft is not None and plan.max_depth > 0
        if not speculate:
            return Drafted(plan, VerifyTree.of_roots(batch.roots), None, 0)
        runner.feed_backlog(batch.requests)
        tree = grow_tree(plan, runner.expander(batch), batch.roots, room=runner.tree_storage)
        draft_layers = tree.layers
        graft_lookup(tree, plan.lookup, batch.requests)
        return Drafted(plan, select_verified(tree, decide_verified(plan, tree)), tree, draft_layers)

    def accept(self, runner: SpeculativeRunner, batch: Batch, drafted: Drafted, logits: torch.Tensor) -> Accepted:
        return accepted_from(drafted.vtree, runner.verify(batch.requests, drafted.vtree, logits))


class SpeculativeRunner:
    """Owns the caches and forwards of one target and its draft head.

    ``draft`` may be ``None`` only for the vanilla policy (it is dropped for vanilla).
    ``tree_room`` KV positions past ``context_length`` are reserved per slot for the
    largest tree the policy's settings may draft and verify.

    ``graph_backend`` records the decode-time forwards as CUDA graphs (``"cuda"``) or
    runs the same fixed-shape path eagerly (``"eager-replay"``, for tests on CPU);
    ``None`` runs every forward eagerly (engine/cuda_graphs.py).  With graphs the caches
    hold one spare slot for padded rows.
    """

    def __init__(self, target, draft, policy: Policy, decode, *, max_batch_size: int, context_length: int,
                 graph_backend: str | None = None) -> None:
        self.target = target
        self.draft = draft if policy.needs_draft else None
        self.policy = policy
        self.decode = decode
        self.speculation: Speculation = PolicySpeculation()
        self.feature_layers = feature_layers(target, self.draft)
        weight = next(target.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        self.max_batch_size, self.context_length = max_batch_size, context_length
        self.tree_room = policy.settings.kv_room
        self.graph_backend = graph_backend
        self.greedy_tokens = greedy_tokens_for(self.device, self.dtype)  # logits [..., V] -> token ids [...]
        self._allocate_caches()
        if self.draft is not None:
            self.read_children = child_reader_for(self.draft, self.device, self.dtype)
            hidden, vocab = target.config.hidden_size, self.draft.output_vocab_size
            self.root_hidden = torch.zeros(max_batch_size, hidden, device=self.device, dtype=self.dtype)
            self.root_logits = torch.zeros(max_batch_size, vocab, device=self.device, dtype=self.dtype)
        # Draft input (next token ids, target features) committed while the policy did
        # not speculate, per slot: fed to the draft only when a tree is next needed, so
        # a bucket with speculation off costs exactly a plain decode step.
        self.draft_backlog: dict[int, tuple[list[int], list[torch.Tensor]]] = {}
        # The last drafted tree's storage, written over by the next tree of its batch
        # size (`cast.DraftTree.from_roots`): a tree's room is allocated once, not per iteration.
        self.tree_storage: TreeStorage | None = None  # kept from each `Drafted.tree` in `iterate`

    def _allocate_caches(self) -> None:
        """Empty target and draft caches of ``context_length + tree_room`` positions per
        slot (plus the graphs' pad slot), and the graphs recorded over them."""
        capacity, config = self.context_length + self.tree_room, self.target.config
        slots = cache_slots(self.max_batch_size, self.graph_backend)
        self.target_cache = KVCache.for_model(config, slots, capacity, self.device, self.dtype)
        self.draft_cache = None
        if self.draft is not None:
            self.draft_cache = KVCache.for_model(config, slots, capacity, self.device, self.dtype, num_layers=1)
        self.graphs = None
        if self.graph_backend is not None:
            self.graphs = EngineGraphs.record(self.target, self.draft, self.target_cache, self.draft_cache,
                                              decode_shapes(self.policy, self.max_batch_size),
                                              self.feature_layers, feature_width(self.target, self.draft),
                                              self.graph_backend)

    def reserve_tree_room(self, room: int) -> None:
        """Reserve at least ``room`` tree positions per slot: trace recording verifies
        the whole candidate pool, more than any policy tree.  The caches are allocated
        anew, so no request may hold a slot."""
        if room > self.tree_room:
            self.tree_room = room
            self._allocate_caches()

    def release(self, slot: int) -> None:
        """Forget a finished or cancelled request's cache contents."""
        self.target_cache.reset(slot)
        self.draft_backlog.pop(slot, None)
        if self.draft is not None:
            self.draft_cache.reset(slot)

    def _on_device(self, values: list) -> torch.Tensor:
        """A host list as a device tensor, sent without waiting for the device."""
        return to_device(torch.tensor(values), self.device)

    def verify_inputs(self, batch: Batch, vtree: VerifyTree) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The verify forward's tokens and positions ``[B, n]`` and tree mask ``[B, n, n]``
        on the device, from the host tree (plain decoding's root-only tree: the roots,
        at the first free positions, each seeing itself)."""
        if vtree.num_tokens == 1:
            mask = torch.ones((len(batch.roots), 1, 1), dtype=torch.bool, device=self.device)
            return self._on_device(batch.roots).view(-1, 1), batch.context.view(-1, 1), mask
        return tuple(to_device(t, self.device) for t in (vtree.tokens, vtree.positions(batch.host_context),
                                                         vtree.mask))

    # ------------------------------------------------------------------ forwards
    def target_forward(self, tokens, positions, slots, mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[B, n, V]`` and the features the draft reads ``[B, n, F]`` (from a
        graph: views valid until that graph replays again)."""
        replayed = self.graphs.target(tokens, positions, slots, mask) if self.graphs is not None else None
        if replayed is not None:
            return replayed
        out = self.target(tokens, positions, self.target_cache, slots, mask, self.feature_layers)
        return self.target.logits(out.hidden), out.draft_features()

    def draft_forward(self, tokens, features, positions, slots, mask, last=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The draft's hidden states and logits for ``[B, n]`` tokens on its cache (a
        `draft_expander.DraftStep`); with ``last`` ``[B]`` the logits ``[B, 1, V]`` at that
        position of each row only (`eagle.run_draft`)."""
        graphs = self.graphs.draft if self.graphs is not None else None
        replayed = graphs(tokens, positions, slots, mask, features) if graphs is not None else None
        if replayed is not None:
            hidden, logits = replayed
            return hidden, logits if last is None else rows_at(logits, last)
        return tuple(self.draft(tokens, features, positions, self.draft_cache, slots, mask, last))

    def _draft_catch_up(self, slots: list[int], tokens: torch.Tensor, features: torch.Tensor,
                        start: torch.Tensor, counts: list[int]) -> None:
        """Feed (target feature of position t, token t+1) pairs for the newly committed
        tokens, commit them to the draft cache, and keep each sequence's last output
        as its next root (hidden state and children logits).  ``slots``, ``counts`` and
        ``start`` (the draft cache's lengths) are per sequence, on the host; ``tokens``
        and ``features`` on the device."""
        batch, n = tokens.shape
        positions = to_device(torch.from_numpy(start.numpy()[:, None] + np.arange(n)), self.device)  # [B, n]
        mask = causal_tree_mask(batch, n, self.device)
        host_slots = torch.tensor(slots)
        last = self._on_device([c - 1 for c in counts])  # [B]: each sequence's newest token
        hidden, logits = self.draft_forward(tokens, features, positions, host_slots, mask, last)  # logits [B, 1, V]
        self.draft_cache.advance(slots, counts)  # written in place
        rows = to_device(host_slots, self.device)
        self.root_hidden.index_copy_(0, rows, rows_at(hidden, last).squeeze(1))
        self.root_logits.index_copy_(0, rows, logits.squeeze(1))

    def prefill_groups(self, requests: list[Request]) -> list[list[Request]]:
        """`prefill_groups` charged on the policy's target cost table (prompt context 0)."""
        return prefill_groups(requests, lambda rows, tokens: self.policy.settings.costs.target(rows, 0, tokens))

    @torch.inference_mode()
    def prefill(self, requests: list[Request]) -> None:
        """Run the prompts through the target in one forward (``[B, n]``, each prompt
        right-padded to the longest), commit them, append each request's first token and,
        unless that finished it, queue its prompt for the draft (its backlog).  Reading
        the first tokens back is the one host read of a prefill; `prefill_groups` says
        which requests share a forward."""
        slots = torch.tensor([r.slot for r in requests])
        lengths = torch.tensor([len(r.prompt_ids) for r in requests])
        batch, n = len(requests), int(lengths.max())
        prompts = self._on_device([pad_right(list(r.prompt_ids), n) for r in requests])
        positions = torch.arange(n, device=self.device).expand(batch, n)
        logits, features = self._prefill_forward(prompts, positions, slots, causal_tree_mask(batch, n, self.device),
                                                 to_device(lengths - 1, self.device))
        self.target_cache.commit(slots, torch.arange(n).expand(batch, n), lengths)
        for request, first, row_features, length in zip(requests, self._sample_first(requests, logits), features,
                                                        lengths.tolist()):
            request.append([first], self.decode)
            if self.draft is not None and not request.finished:
                # The draft catches up on the prompt at the request's first speculative
                # iteration (`feed_backlog`), not here: where the policy decodes plainly
                # (a `speculate: false` bucket) the draft's prefill would be pure cost.
                self.draft_backlog[request.slot] = (list(request.prompt_ids[1:]) + [first],
                                                    list(row_features[:length].unbind(0)))

    def _prefill_forward(self, tokens, positions, slots, mask, last) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits at each row's last prompt position ``[B, V]`` (``last`` ``[B]``) and the
        draft features of every position ``[B, n, F]``.  Eagerly only the last positions
        go through the LM head: the others' logits would be computed for nothing."""
        rows = torch.arange(tokens.shape[0], device=self.device)
        replayed = self.graphs.target(tokens, positions, slots, mask) if self.graphs is not None else None
        if replayed is not None:  # the features outlive the next replay of this key: copied out
            logits, features = replayed
            return logits[rows, last], features.clone()
        out = self.target(tokens, positions, self.target_cache, slots, mask, self.feature_layers)
        return self.target.logits(out.hidden[rows, last]), out.draft_features()

    def _sample_first(self, requests: list[Request], logits: torch.Tensor) -> list[int]:
        """Each request's first token from its row of ``logits`` ``[B, V]``: the greedy
        rows' argmaxes in one host read, sampled rows drawn by their own sampler at
        their output position."""
        greedy = self.greedy_tokens(logits).tolist() if any(r.params.greedy for r in requests) else None
        return [greedy[i] if r.params.greedy
                else r.sampler.draw(target_probs(logits[i], r.params), len(r.output_ids))
                for i, r in enumerate(requests)]

    # ----------------------------------------------------------------- iteration
    @torch.inference_mode()
    def iterate(self, requests: list[Request]) -> IterationOutput:
        """One speculative iteration over ``requests``: their new tokens are appended
        to them; the record says what the iteration did and how long it took."""
        clock = StageClock(self.device)  # stages: set-up, draft, verify, catch-up, the rest
        slot_ids = [r.slot for r in requests]
        slots = torch.tensor(slot_ids)
        context = self.target_cache.lens.numpy()[slot_ids]  # host: numpy's view skips torch's dispatch
        host_context = torch.from_numpy(context)
        batch = Batch(requests, slot_ids, slots, to_device(slots, self.device), to_device(host_context, self.device),
                      host_context, int(context.max()), [r.root for r in requests])
        clock.mark()
        drafted = self.speculation.draft(self, batch)
        if drafted.tree is not None:
            self.tree_storage = drafted.tree.storage
        clock.mark()
        tokens, positions, mask = self.verify_inputs(batch, drafted.vtree)
        logits, features = self.target_forward(tokens, positions, slots, mask)
        accepted = self.speculation.accept(self, batch, drafted, logits)
        commit = Commit(batch, drafted, features, accepted)
        offsets, counts = self._commit_target(commit)
        clock.mark()
        self._commit_draft(commit, offsets, counts)
        clock.mark()
        for request, path, tokens in zip(requests, accepted.paths, accepted.committed):
            request.stats.iterations += 1
            request.stats.accepted_draft_tokens += len(path)
            request.append(tokens, self.decode)
        clock.mark()
        stages = clock.read()
        record = IterationRecord(
            # charged by the draft layers that ran: a verified lookup path may go deeper than they did
            plan=drafted.plan, batch_size=len(requests), context_len=batch.context_max,
            depth=min(accepted.depth, drafted.draft_layers),
            verified=drafted.vtree.num_tokens - 1, accepted=[len(p) for p in accepted.paths],
            verified_value=accepted.verified_value, draft_ms=stages[1] + stages[3], verify_ms=stages[2],
            step_ms=sum(stages),
        )
        return IterationOutput(record, accepted.trace)

    def feed_backlog(self, batch: list[Request]) -> None:
        """Catch the draft up on tokens committed while speculation was off, so its
        cache and root outputs are current before it drafts again."""
        behind = [r for r in batch if r.slot in self.draft_backlog]
        if not behind:
            return
        pending = [self.draft_backlog.pop(r.slot) for r in behind]
        slots = [r.slot for r in behind]
        counts = [len(tokens) for tokens, _ in pending]
        width = max(counts)
        tokens = self._on_device([pad_right(t, width) for t, _ in pending])
        features = torch.stack([torch.stack(pad_right(f, width)) for _, f in pending])
        self._draft_catch_up(slots, tokens, features, self.draft_cache.lens[slots], counts)

    def expander(self, batch: Batch) -> DraftExpander:
        return DraftExpander(self.draft_forward, self.read_children, batch.slots, batch.context,
                             self.root_hidden.index_select(0, batch.device_slots),
                             self.root_logits.index_select(0, batch.device_slots))

    def _commit_target(self, commit: Commit) -> tuple[list[list[int]], list[int]]:
        """Compact the accepted paths into the target cache.  Returns the kept local
        offsets per sequence (root first, padded to one width) and how many each kept."""
        paths = commit.accepted.paths
        width = 1 + max(len(p) for p in paths)
        offsets = [pad_right([0] + p, width) for p in paths]
        counts = [len(p) + 1 for p in paths]
        self.target_cache.commit_lists(commit.batch.slot_ids, offsets, counts)
        return offsets, counts

    def _commit_draft(self, commit: Commit, offsets: list[list[int]], counts: list[int]) -> None:
        """Let the draft catch up on the committed tokens now if it drafted this
        iteration, else queue them (one token each) for its next speculative one."""
        if self.draft is None:
            return
        features, committed = commit.features, commit.accepted.committed
        if commit.drafted.speculated:
            width = len(offsets[0])
            next_tokens = self._on_device([pad_right(c, width) for c in committed])
            kept = self._on_device(offsets).unsqueeze(-1).expand(-1, -1, features.shape[-1])
            self._draft_catch_up(commit.batch.slot_ids, next_tokens, features.gather(1, kept),
                                 commit.batch.host_context, counts)
            return
        # Kept past this iteration: a copy, not a view of a graph's output; one view per
        # row from one `unbind` (a select per row cost B dispatches a step: 64 at B = 64).
        first = features[:, 0].clone().unbind(0)
        for request, tokens_b, feature in zip(commit.batch.requests, committed, first):
            tokens, feats = self.draft_backlog.setdefault(request.slot, ([], []))
            tokens.append(tokens_b[0])
            feats.append(feature)

    def verify(self, requests: list[Request], vtree: VerifyTree, logits: torch.Tensor) -> VerifyResult:
        """Accepted local node indices and bonus token per sequence: greedy rows on the
        target's greedy tokens (one host copy of them), sampling rows with their own
        samplers at their output positions (on the host)."""
        greedy = [b for b, r in enumerate(requests) if r.params.greedy]
        sampled = [b for b, r in enumerate(requests) if not r.params.greedy]
        if not sampled:
            return verify_greedy(vtree, self.greedy_tokens(logits).cpu())
        samplers = [requests[b].sampler for b in sampled]
        positions = [len(requests[b].output_ids) for b in sampled]
        if not greedy:
            return verify_sampling(vtree, logits, samplers, positions)
        paths, bonus = [[] for _ in requests], [0 for _ in requests]
        for rows, verify in ((greedy, lambda t, lg: verify_greedy(t, self.greedy_tokens(lg).cpu())),
                             (sampled, lambda t, lg: verify_sampling(t, lg, samplers, positions))):
            part = verify(vtree.rows(rows), logits.index_select(0, self._on_device(rows)))
            for b, path, token in zip(rows, part.paths, part.bonus):
                paths[b], bonus[b] = path, token
        return VerifyResult(paths, bonus)
