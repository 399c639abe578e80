"""The model work of the native engine: prefill one request, or run one speculative
iteration over a batch and say what it did.

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
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from ..cast import (DraftTree, Policy, TraceIteration, VerifyTree, decide_verified, grow_tree, select_verified,
                    target_probs, verify_greedy, verify_sampling)
from ..models.attention import causal_tree_mask
from ..models.kv_cache import KVCache
from ..models.llama import eagle3_feature_layers
from .draft_expander import DraftExpander
from .requests import Request


def pad_right(row: list, width: int) -> list:
    """``row`` padded to ``width`` by repeating its last item (the draft's catch-up feeds
    ragged rows; padded positions are never committed)."""
    return row + [row[-1]] * (width - len(row))


def feature_layers(target, draft) -> tuple[int, ...]:
    """Target layers whose hidden states the draft reads, known from the draft: an
    EAGLE-3 head (``draft.config.layout == "eagle3"``) reads three layers fixed by the
    target's depth; any other draft reads the target's last hidden state (``()``)."""
    layout = getattr(getattr(draft, "config", None), "layout", None)
    return eagle3_feature_layers(target.config.num_layers) if layout == "eagle3" else ()


@dataclass
class IterationRecord:
    """What one step did, for metrics and benchmarks."""

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


@dataclass(frozen=True)
class Batch:
    """The running requests of one iteration, as the tensors the forwards take."""

    requests: list[Request]
    slots: torch.Tensor  # [B] cache slot of each sequence
    context: torch.Tensor  # [B] tokens committed in the target cache
    roots: torch.Tensor  # [B] last committed token, not yet seen by the target


@dataclass(frozen=True)
class Drafted:
    """A strategy's draft: the nodes the target verifies, whether the draft head grew
    a tree (then its cache must catch up on the accepted tokens), and the full tree."""

    vtree: VerifyTree
    speculated: bool
    tree: DraftTree


@dataclass(frozen=True)
class Accepted:
    """Per sequence: accepted local node indices of ``vtree`` and the bonus token;
    ``trace`` when the iteration was recorded."""

    paths: list[list[int]]
    bonus: list[int]
    trace: TraceIteration | None = None


@dataclass(frozen=True)
class Commit:
    """Everything ``SpeculativeRunner._commit`` writes back after verification."""

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


class PolicySpeculation:
    """The live path: the policy's plan grows the tree and picks how many nodes to
    verify; the target's verification decides what is accepted."""

    def draft(self, runner: SpeculativeRunner, batch: Batch) -> Drafted:
        plan = runner.policy.begin(len(batch.requests), int(batch.context.max()))
        speculate = runner.draft is not None and plan.max_depth > 0
        if speculate:
            runner.feed_backlog(batch.requests)
            tree = grow_tree(plan, runner.expander(batch), batch.roots)
        else:
            tree = DraftTree.from_roots(batch.roots)
        return Drafted(select_verified(tree, decide_verified(plan, tree)), speculate, tree)

    def accept(self, runner: SpeculativeRunner, batch: Batch, drafted: Drafted, logits: torch.Tensor) -> Accepted:
        return runner.verify(batch.requests, drafted.vtree, logits)


class SpeculativeRunner:
    """Owns the caches and forwards of one target and its draft head.

    ``draft`` may be ``None`` only for the vanilla policy (it is dropped for vanilla).
    ``tree_room`` KV positions past ``context_length`` are reserved per slot for the
    largest tree the policy's settings may draft and verify.
    """

    def __init__(self, target, draft, policy: Policy, decode, *, max_batch_size: int, context_length: int) -> None:
        self.target = target
        self.draft = draft if policy.name != "vanilla" else None
        self.policy = policy
        self.decode = decode
        self.speculation: Speculation = PolicySpeculation()
        self.feature_layers = feature_layers(target, self.draft)
        weight = next(target.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        self.max_batch_size, self.context_length = max_batch_size, context_length
        self.tree_room = policy.settings.kv_room
        self._allocate_caches()
        if self.draft is not None:
            hidden, vocab = target.config.hidden_size, self.draft.output_vocab_size
            self.root_hidden = torch.zeros(max_batch_size, hidden, device=self.device, dtype=self.dtype)
            self.root_logits = torch.zeros(max_batch_size, vocab, device=self.device, dtype=self.dtype)
        # Draft input (next token ids, target features) committed while the policy did
        # not speculate, per slot: fed to the draft only when a tree is next needed, so
        # a bucket with speculation off costs exactly a plain decode step.
        self.draft_backlog: dict[int, tuple[list[int], list[torch.Tensor]]] = {}

    def _allocate_caches(self) -> None:
        """Empty target and draft caches of ``context_length + tree_room`` positions per slot."""
        capacity, config = self.context_length + self.tree_room, self.target.config
        self.target_cache = KVCache.for_model(config, self.max_batch_size, capacity, self.device, self.dtype)
        if self.draft is not None:
            self.draft_cache = KVCache.for_model(config, self.max_batch_size, capacity, self.device, self.dtype,
                                                 num_layers=1)

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

    # ------------------------------------------------------------------ forwards
    def target_forward(self, tokens, positions, slots, mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[B, n, V]`` and the features the draft reads ``[B, n, F]``."""
        out = self.target(tokens, positions, self.target_cache, slots, mask, self.feature_layers)
        features = torch.cat(out.captured, dim=-1) if self.feature_layers else out.hidden
        return self.target.logits(out.hidden), features

    def _draft_catch_up(self, slots: torch.Tensor, tokens: torch.Tensor, features: torch.Tensor,
                        start: torch.Tensor, counts: torch.Tensor) -> None:
        """Feed (target feature of position t, token t+1) pairs for the newly committed
        tokens, commit them to the draft cache, and keep each sequence's last output
        as its next root (hidden state and children logits)."""
        n = tokens.shape[1]
        positions = start.view(-1, 1) + torch.arange(n, device=self.device)
        mask = causal_tree_mask(slots.numel(), n, self.device)
        hidden, logits = self.draft(tokens, features, positions, self.draft_cache, slots, mask)
        offsets = torch.arange(n, device=self.device).expand(slots.numel(), n)
        self.draft_cache.commit(slots, offsets, counts)
        last = (counts - 1).view(-1, 1, 1)
        self.root_hidden[slots] = hidden.gather(1, last.expand(-1, 1, hidden.shape[-1])).squeeze(1)
        self.root_logits[slots] = logits.gather(1, last.expand(-1, 1, logits.shape[-1])).squeeze(1)

    @torch.inference_mode()
    def prefill(self, request: Request) -> None:
        """Run the prompt through the target, commit it, append the first token and,
        unless that finished the request, catch the draft up on the prompt."""
        slots = torch.tensor([request.slot], device=self.device)
        prompt = torch.tensor([request.prompt_ids], device=self.device)
        n = prompt.shape[1]
        positions = torch.arange(n, device=self.device).view(1, n)
        logits, features = self.target_forward(prompt, positions, slots, causal_tree_mask(1, n, self.device))
        self.target_cache.commit(slots, torch.arange(n, device=self.device).view(1, n),
                                 torch.tensor([n], device=self.device))
        first = self._sample_one(request, logits[0, -1])
        request.append([first], self.decode)
        if self.draft is not None and not request.finished:
            next_tokens = torch.cat([prompt[:, 1:], torch.tensor([[first]], device=self.device)], dim=1)
            self._draft_catch_up(slots, next_tokens, features, torch.zeros(1, dtype=torch.long, device=self.device),
                                 torch.tensor([n], device=self.device))

    def _sample_one(self, request: Request, logits: torch.Tensor) -> int:
        if request.params.greedy:
            return int(torch.argmax(logits))
        return request.sampler.sample(target_probs(logits, request.params))

    # ----------------------------------------------------------------- iteration
    @torch.inference_mode()
    def iterate(self, requests: list[Request]) -> IterationOutput:
        """One speculative iteration over ``requests``: their new tokens are appended
        to them; the record says what the iteration did and how long it took."""
        slots = torch.tensor([r.slot for r in requests], device=self.device)
        batch = Batch(requests, slots, self.target_cache.lens[slots].clone(),
                      torch.tensor([r.root for r in requests], device=self.device))
        started = time.perf_counter()
        drafted = self.speculation.draft(self, batch)
        drafted_at = time.perf_counter()
        vtree = drafted.vtree
        logits, features = self.target_forward(vtree.tokens, vtree.positions(batch.context), slots,
                                               vtree.ancestor_mask())
        accepted = self.speculation.accept(self, batch, drafted, logits)
        commit = Commit(batch, drafted, features, accepted)
        offsets, counts = self._commit_target(commit)
        verified_at = time.perf_counter()
        committed = [vtree.tokens[b, offsets[b, 1 : len(p) + 1]].tolist() + [accepted.bonus[b]]
                     for b, p in enumerate(accepted.paths)]
        self._commit_draft(commit, committed, offsets, counts)
        caught_up_at = time.perf_counter()
        record = IterationRecord(
            batch_size=len(requests), context_len=int(batch.context.max()), depth=int(vtree.depths.max()),
            verified=vtree.num_tokens - 1, accepted=[len(p) for p in accepted.paths],
            verified_value=vtree.values[:, 1:].sum(dim=1).tolist(),
            draft_ms=1000 * ((drafted_at - started) + (caught_up_at - verified_at)),
            verify_ms=1000 * (verified_at - drafted_at),
        )
        for request, path, tokens in zip(requests, accepted.paths, committed):
            request.stats.iterations += 1
            request.stats.accepted_draft_tokens += len(path)
            request.append(tokens, self.decode)
        return IterationOutput(record, accepted.trace)

    def feed_backlog(self, batch: list[Request]) -> None:
        """Catch the draft up on tokens committed while speculation was off, so its
        cache and root outputs are current before it drafts again."""
        behind = [r for r in batch if r.slot in self.draft_backlog]
        if not behind:
            return
        pending = [self.draft_backlog.pop(r.slot) for r in behind]
        slots = torch.tensor([r.slot for r in behind], device=self.device)
        counts = torch.tensor([len(tokens) for tokens, _ in pending], device=self.device)
        width = int(counts.max())
        tokens = torch.tensor([pad_right(t, width) for t, _ in pending], device=self.device)
        features = torch.stack([torch.stack(pad_right(f, width)) for _, f in pending])
        self._draft_catch_up(slots, tokens, features, self.draft_cache.lens[slots].clone(), counts)

    def expander(self, batch: Batch) -> DraftExpander:
        return DraftExpander(self.draft, self.draft_cache, batch.slots, batch.context, self.root_hidden[batch.slots],
                             self.root_logits[batch.slots])

    def _commit_target(self, commit: Commit) -> tuple[torch.Tensor, torch.Tensor]:
        """Compact the accepted paths into the target cache.  Returns the kept local
        offsets ``[B, width]`` (root first) and how many each sequence kept ``[B]``."""
        paths = commit.accepted.paths
        counts = torch.tensor([len(p) + 1 for p in paths], device=self.device)
        offsets = torch.zeros((len(paths), int(counts.max())), dtype=torch.long, device=self.device)
        for b, path in enumerate(paths):
            offsets[b, 1 : len(path) + 1] = torch.tensor(path, dtype=torch.long)
        self.target_cache.commit(commit.batch.slots, offsets, counts)
        return offsets, counts

    def _commit_draft(self, commit: Commit, committed: list[list[int]], offsets: torch.Tensor,
                      counts: torch.Tensor) -> None:
        """Let the draft catch up on the committed tokens now if it drafted this
        iteration, else queue them (one token each) for its next speculative one."""
        if self.draft is None:
            return
        features = commit.features
        if commit.drafted.speculated:
            width = offsets.shape[1]
            next_tokens = torch.tensor([pad_right(c, width) for c in committed], device=self.device)
            kept_features = features.gather(1, offsets.unsqueeze(-1).expand(-1, -1, features.shape[-1]))
            self._draft_catch_up(commit.batch.slots, next_tokens, kept_features, commit.batch.context, counts)
            return
        for b, request in enumerate(commit.batch.requests):
            tokens, feats = self.draft_backlog.setdefault(request.slot, ([], []))
            tokens.append(committed[b][0])
            feats.append(features[b, 0])

    def verify(self, requests: list[Request], vtree: VerifyTree, logits: torch.Tensor) -> Accepted:
        """Accepted local node indices and bonus token per sequence: greedy rows
        are verified together on the argmax, sampling rows with their own samplers."""
        paths: list[list[int]] = [[] for _ in requests]
        bonus: list[int] = [0] * len(requests)
        greedy = [b for b, r in enumerate(requests) if r.params.greedy]
        sampled = [b for b, r in enumerate(requests) if not r.params.greedy]
        results = []
        if greedy:
            index = torch.tensor(greedy, device=self.device)
            results.append((greedy, verify_greedy(vtree.rows(index), torch.argmax(logits[index], dim=-1))))
        if sampled:
            index = torch.tensor(sampled, device=self.device)
            results.append((sampled, verify_sampling(vtree.rows(index), logits[index],
                                                     [requests[b].sampler for b in sampled])))
        for rows, result in results:
            for i, b in enumerate(rows):
                paths[b] = result.accepted[i, : int(result.num_accepted[i])].tolist()
                bonus[b] = int(result.bonus[i])
        return Accepted(paths, bonus)
