"""The native engine: batched, lossless speculative decoding driven by a CAST policy.

One ``step()`` is one speculative iteration for every running request:

1. the policy's plan grows a draft tree per sequence (``cast.grow_tree`` with the
   EAGLE head as expander) and picks how many nodes to verify;
2. one target forward verifies root + chosen nodes with tree attention;
3. each sequence accepts its own path (greedy or speculative sampling) plus a
   bonus token; the target cache compacts the accepted path into place;
4. the draft catches up on the accepted tokens with the target's features, which
   also yields the next root's children.

The engine executes; every decision about the tree comes from the policy.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import torch

from ..cast import (DraftTree, TreeShape, Policy, RecordingExpander, RequestSampler, SamplingParams, TraceIteration, grow_tree,
                    make_policy, replay_iteration, select_verified, target_probs, verify_greedy, verify_sampling)
from ..models.attention import causal_tree_mask
from ..models.kv_cache import KVCache
from .draft_expander import DraftExpander
from .requests import GenerationResult, Request


def pad_right(row: list, width: int) -> list:
    """``row`` padded to ``width`` by repeating its last item (the draft's catch-up feeds
    ragged rows; padded positions are never committed)."""
    return row + [row[-1]] * (width - len(row))


@dataclass
class IterationRecord:
    """What one step did, for metrics and benchmarks."""

    batch_size: int
    context_len: int
    depth: int
    verified: int
    accepted: list[int]
    draft_ms: float
    verify_ms: float


class Engine:
    """Continuous-batching speculative decoder over one target and one draft head.

    ``draft`` may be ``None`` only for the vanilla policy.  ``tokenizer`` must have
    ``encode``/``decode``; ``eos_token_ids`` stop generation unless ``ignore_eos``.
    """

    def __init__(self, target, tokenizer, draft, policy: Policy, *, max_batch_size: int = 8,
                 context_length: int = 2048, eos_token_ids: tuple[int, ...] = (),
                 eagle3_layers: tuple[int, ...] = ()) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if policy.name != "vanilla" and draft is None:
            raise ValueError(f"policy {policy.name!r} needs a draft head; pass one or use policy 'vanilla'")
        self.target = target
        self.tokenizer = tokenizer
        self.draft = draft if policy.name != "vanilla" else None
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.context_length = context_length
        self.eos_token_ids = frozenset(eos_token_ids)
        self.eagle3_layers = eagle3_layers
        weight = next(target.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        # Room for the longest tree a policy may verify or draft after the context.
        self.tree_room = 1 + max(b.shape.top_k * b.shape.max_depth + b.shape.num_verify_tokens
                                 for b in policy.settings.buckets)
        capacity = context_length + self.tree_room
        self.target_cache = KVCache.for_model(target.config, max_batch_size, capacity, self.device, self.dtype)
        if self.draft is not None:
            self.draft_cache = KVCache.for_model(target.config, max_batch_size, capacity, self.device, self.dtype,
                                                 num_layers=1)
            hidden, vocab = target.config.hidden_size, self.draft.output_vocab_size
            self.root_hidden = torch.zeros(max_batch_size, hidden, device=self.device, dtype=self.dtype)
            self.root_logits = torch.zeros(max_batch_size, vocab, device=self.device, dtype=self.dtype)
        self.free_slots = list(range(max_batch_size))
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.history: list[IterationRecord] = []
        # Draft input (next token ids, target features) committed while the policy did
        # not speculate, per slot: fed to the draft only when a tree is next needed, so
        # a bucket with speculation off costs exactly a plain decode step.
        self.draft_backlog: dict[int, tuple[list[int], list[torch.Tensor]]] = {}
        self.traces: list[TraceIteration] = []
        self.trace_policy: Policy | None = None
        self._ids = itertools.count()

    def record_traces(self, shape: TreeShape | None = None) -> None:
        """From now on, record every iteration as a full-expansion trace with
        ``shape`` (default: the policy's shape for each batch size) into
        ``self.traces``.  Greedy requests only: replay is defined for greedy."""
        if self.draft is None:
            raise ValueError("trace recording needs a draft head (the policy is vanilla)")
        settings = self.policy.settings if shape is None else self.policy.settings.with_shape(shape)
        if shape is not None and 1 + shape.top_k * shape.max_depth > self.tree_room:
            raise ValueError(f"recording shape needs {1 + shape.top_k * shape.max_depth} tree tokens but the engine "
                             f"reserved {self.tree_room}; build the engine with a policy whose shape is at least "
                             "as large")
        self.trace_policy = make_policy("eagle2", settings)

    # ----------------------------------------------------------------- requests
    def add_request(self, prompt: str | list[int], params: SamplingParams) -> Request:
        """Queue a request; raises ``ValueError`` if it cannot fit the context."""
        prompt_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not prompt_ids:
            raise ValueError("prompt must contain at least one token")
        needed = len(prompt_ids) + params.max_new_tokens
        if needed > self.context_length:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) = {needed} "
                f"exceeds the context length {self.context_length}"
            )
        if self.trace_policy is not None and not params.greedy:
            raise ValueError("temperature must be 0 while traces are recorded (replay is defined for greedy)")
        stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
        request = Request(next(self._ids), prompt_ids, params, RequestSampler.create(params), stop_ids)
        self.waiting.append(request)
        return request

    def generate(self, prompts: list[str] | list[list[int]],
                 params: SamplingParams | list[SamplingParams] | None = None) -> list[GenerationResult]:
        """Decode every prompt to completion (continuous batching) and return results
        in prompt order."""
        params_list = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params_list)} sampling params")
        requests = [self.add_request(p, sp) for p, sp in zip(prompts, params_list)]
        while not all(r.finished for r in requests):
            self.step()
        return [r.result() for r in requests]

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # --------------------------------------------------------------- scheduling
    def step(self) -> list[Request]:
        """Admit waiting requests (prefill), run one speculative iteration over the
        running batch, and return the requests that finished."""
        finished = self._admit()
        if self.running:
            finished += self._iterate()
        return finished

    def _admit(self) -> list[Request]:
        finished = []
        while self.waiting and self.free_slots:
            request = self.waiting.pop(0)
            request.slot = self.free_slots.pop(0)
            self._prefill(request)
            if request.finished:
                self._release(request)
                finished.append(request)
            else:
                self.running.append(request)
        return finished

    def _release(self, request: Request) -> None:
        self.target_cache.reset(request.slot)
        self.draft_backlog.pop(request.slot, None)
        if self.draft is not None:
            self.draft_cache.reset(request.slot)
        self.free_slots.append(request.slot)

    def cancel(self, request: Request) -> None:
        """Drop a request now (client went away); its slot is free at once."""
        if request in self.waiting:
            self.waiting.remove(request)
        elif request in self.running:
            self.running.remove(request)
            self._release(request)
        request.finish_reason = request.finish_reason or "abort"

    # ------------------------------------------------------------------ forwards
    def _target_forward(self, tokens, positions, slots, mask):
        out = self.target(tokens, positions, self.target_cache, slots, mask, self.eagle3_layers)
        features = torch.cat(out.captured, dim=-1) if self.eagle3_layers else out.hidden
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
        keep = torch.arange(n, device=self.device).expand(slots.numel(), n)
        self.draft_cache.commit(slots, keep, counts)
        last = (counts - 1).view(-1, 1, 1)
        self.root_hidden[slots] = hidden.gather(1, last.expand(-1, 1, hidden.shape[-1])).squeeze(1)
        self.root_logits[slots] = logits.gather(1, last.expand(-1, 1, logits.shape[-1])).squeeze(1)

    @torch.inference_mode()
    def _prefill(self, request: Request) -> None:
        slots = torch.tensor([request.slot], device=self.device)
        prompt = torch.tensor([request.prompt_ids], device=self.device)
        n = prompt.shape[1]
        positions = torch.arange(n, device=self.device).view(1, n)
        logits, features = self._target_forward(prompt, positions, slots, causal_tree_mask(1, n, self.device))
        self.target_cache.commit(slots, torch.arange(n, device=self.device).view(1, n),
                                 torch.tensor([n], device=self.device))
        first = self._sample_one(request, logits[0, -1])
        request.append([first], self.tokenizer.decode)
        if self.draft is not None and not request.finished:
            next_tokens = torch.cat([prompt[:, 1:], torch.tensor([[first]], device=self.device)], dim=1)
            self._draft_catch_up(slots, next_tokens, features, torch.zeros(1, dtype=torch.long, device=self.device),
                                 torch.tensor([n], device=self.device))

    def _sample_one(self, request: Request, logits: torch.Tensor) -> int:
        if request.params.greedy:
            return int(torch.argmax(logits))
        return request.sampler.sample(target_probs(logits, request.params))

    @torch.inference_mode()
    def _iterate(self) -> list[Request]:
        batch = self.running
        slots = torch.tensor([r.slot for r in batch], device=self.device)
        context = self.target_cache.lens[slots].clone()
        roots = torch.tensor([r.root for r in batch], device=self.device)

        started = time.perf_counter()
        if self.trace_policy is not None:
            return self._iterate_recording(batch, slots, context, roots, started)
        plan = self.policy.begin(len(batch), int(context.max()))
        speculate = self.draft is not None and plan.max_depth > 0
        if speculate:
            self._feed_backlog(batch)
            tree = grow_tree(plan, self._expander(slots, context), roots)
        else:
            tree = DraftTree.from_roots(roots)
        vtree = select_verified(tree, plan.verify_count(tree))
        drafted = time.perf_counter()
        logits, features = self._target_forward(vtree.tokens, vtree.positions(context), slots,
                                                vtree.ancestor_mask())
        paths, bonus = self._verify(batch, vtree, logits)
        return self._commit(batch, slots, context, vtree, features, paths, bonus, started, drafted, speculate)

    def _feed_backlog(self, batch: list[Request]) -> None:
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

    def _expander(self, slots: torch.Tensor, context: torch.Tensor) -> DraftExpander:
        return DraftExpander(self.draft, self.draft_cache, slots, context, self.root_hidden[slots],
                             self.root_logits[slots])

    def _iterate_recording(self, batch, slots, context, roots, started) -> list[Request]:
        """Trace mode (CAST.md §8): draft the full EAGLE-2 expansion, verify every
        node, store the iteration, and commit what the engine's own policy would
        have accepted on it (its decisions replayed on the fresh record)."""
        plan = self.trace_policy.begin(len(batch), int(context.max()))
        self._feed_backlog(batch)
        recorder = RecordingExpander(self._expander(slots, context), plan.top_k)
        tree = grow_tree(plan, recorder, roots)
        vtree = select_verified(tree, tree.size - 1)
        drafted = time.perf_counter()
        logits, features = self._target_forward(vtree.tokens, vtree.positions(context), slots,
                                                vtree.ancestor_mask())
        argmax = torch.argmax(logits, dim=-1)
        by_node = torch.empty_like(argmax).scatter_(1, vtree.node_ids, argmax)
        trace = recorder.finish(tree, context, by_node)
        self.traces.append(trace)
        outcome = replay_iteration(trace, self.policy)
        full = verify_greedy(vtree, argmax)
        paths, bonus = [], []
        for b, accepted in enumerate(outcome.num_accepted):
            # A policy may accept a candidate the full tree never kept (verified through its
            # parent's argmax, but with no K/V of its own); commit only what was fed.
            path = full.accepted[b, : min(accepted, int(full.num_accepted[b]))].tolist()
            paths.append(path)
            bonus.append(int(argmax[b, path[-1] if path else 0]))
        return self._commit(batch, slots, context, vtree, features, paths, bonus, started, drafted, True)

    def _commit(self, batch, slots, context, vtree, features, paths, bonus, started, drafted,
                speculated: bool) -> list[Request]:
        """Compact accepted paths into the target cache, let the draft catch up,
        record the iteration and hand the new tokens to their requests."""
        counts = torch.tensor([len(p) + 1 for p in paths], device=self.device)
        width = int(counts.max())
        keep = torch.zeros((len(batch), width), dtype=torch.long, device=self.device)
        for b, path in enumerate(paths):
            keep[b, 1 : len(path) + 1] = torch.tensor(path, dtype=torch.long)
        self.target_cache.commit(slots, keep, counts)
        verified = time.perf_counter()

        committed = [vtree.tokens[b, keep[b, 1 : len(p) + 1]].tolist() + [bonus[b]] for b, p in enumerate(paths)]
        if self.draft is not None and speculated:
            next_tokens = torch.tensor([pad_right(c, width) for c in committed], device=self.device)
            kept_features = features.gather(1, keep.unsqueeze(-1).expand(-1, -1, features.shape[-1]))
            self._draft_catch_up(slots, next_tokens, kept_features, context, counts)
        elif self.draft is not None:  # one token each, fed at the next speculative iteration
            for b, request in enumerate(batch):
                tokens, feats = self.draft_backlog.setdefault(request.slot, ([], []))
                tokens.append(committed[b][0])
                feats.append(features[b, 0])
        caught_up = time.perf_counter()

        self.history.append(IterationRecord(
            batch_size=len(batch), context_len=int(context.max()), depth=int(vtree.depths.max()),
            verified=vtree.num_tokens - 1, accepted=[len(p) for p in paths],
            draft_ms=1000 * ((drafted - started) + (caught_up - verified)), verify_ms=1000 * (verified - drafted),
        ))
        finished = []
        for request, path, tokens in zip(batch, paths, committed):
            request.stats.iterations += 1
            request.stats.accepted_draft_tokens += len(path)
            request.append(tokens, self.tokenizer.decode)
            if request.finished:
                finished.append(request)
        for request in finished:
            self.running.remove(request)
            self._release(request)
        return finished

    def _verify(self, batch: list[Request], vtree, logits: torch.Tensor) -> tuple[list[list[int]], list[int]]:
        """Accepted local node indices and bonus token per sequence: greedy rows
        are verified together on the argmax, sampling rows with their own samplers."""
        paths: list[list[int]] = [[] for _ in batch]
        bonus: list[int] = [0] * len(batch)
        greedy = [b for b, r in enumerate(batch) if r.params.greedy]
        sampled = [b for b, r in enumerate(batch) if not r.params.greedy]
        results = []
        if greedy:
            index = torch.tensor(greedy, device=self.device)
            results.append((greedy, verify_greedy(vtree.rows(index), torch.argmax(logits[index], dim=-1))))
        if sampled:
            index = torch.tensor(sampled, device=self.device)
            results.append((sampled, verify_sampling(vtree.rows(index), logits[index],
                                                     [batch[b].sampler for b in sampled])))
        for rows, result in results:
            for i, b in enumerate(rows):
                paths[b] = result.accepted[i, : int(result.num_accepted[i])].tolist()
                bonus[b] = int(result.bonus[i])
        return paths, bonus
