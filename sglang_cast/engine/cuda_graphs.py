"""CUDA graphs for the engine's decode-time forwards: plain decoding, verification,
the draft's tree steps and its catch-up.

Why: on a GPU a batch-1 decode step of a small model is ~660 kernel launches whose
launch cost (host) exceeds their run time (device); one recorded graph replays them
all in one launch.  The design follows SGLang's ``CudaGraphRunner`` and
``EAGLEDraftCudaGraphRunner`` (read, not copied):

* **Keys.** A graph is recorded per `GraphKey`: rows ``B``, new tokens per row ``n``,
  tree-mask columns ``s`` (the scratch entries the new tokens may see, ``s == n`` for
  the target) and the width of the draft's feature input.  A call runs the smallest
  recorded key that covers it (`GraphKey.covers`); a call no key covers (a long
  prompt, trace recording's whole candidate pool) runs eagerly.
* **Static buffers.** Each key owns its input tensors (`StaticInputs`); a call
  copies its inputs into them, replays, and gets views of the graph's static outputs,
  valid until that graph replays again (the runner consumes them within the
  iteration and copies what it keeps).
* **Fixed shapes.** The recorded forward attends over the whole cache
  (`AttentionBatch.fixed`: ``length = capacity``, K/V read and written by index), so
  no shape depends on a sequence length and nothing is read back to the host.
* **Padding.** Rows past ``B`` run on the cache's spare slot (``pad_slot``, never
  given to a request).  Tokens past ``n`` in a real row write past its real scratch
  (at scratch entries ``s_key - n_key + j``), which no real token sees and a later
  forward overwrites; every padded token sees its own entry, so no softmax row is
  empty (an all-masked row would be NaN, and NaN keys poison every row that masks
  them, since ``NaN + -inf`` is NaN).
* **Eager stays the reference and the fallback**: ``--disable-cuda-graph``, shapes
  no key covers, and any key whose capture failed (logged once).

On the CPU nothing is captured: `EagerReplay` re-runs the recorded function over the
same static buffers on every call, which is how the tests check the keys, the
padding and the buffer reuse on a machine without a GPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..models.attention import AttentionBatch
from ..models.kv_cache import KVCache

log = logging.getLogger(__name__)

GRAPH_BACKENDS = ("cuda", "eager-replay")


@dataclass(frozen=True, order=True)
class GraphKey:
    """The shape one graph is recorded at: ``[rows, tokens]`` new tokens seeing
    ``columns`` scratch entries, with ``feature_width``-wide features (0: none)."""

    rows: int
    tokens: int
    columns: int
    feature_width: int = 0

    def covers(self, rows: int, tokens: int, columns: int, feature_width: int) -> bool:
        """Whether a call of this shape can run padded to this key: the padded tokens
        need ``tokens - n`` scratch entries past the call's ``columns``."""
        return (self.feature_width == feature_width and rows <= self.rows and tokens <= self.tokens
                and columns + (self.tokens - tokens) <= self.columns)


def buckets_upto(limit: int) -> tuple[int, ...]:
    """Powers of two below ``limit``, then ``limit`` itself: ``8 -> (1, 2, 4, 8)``,
    ``6 -> (1, 2, 4, 6)``."""
    if limit < 1:
        raise ValueError(f"a graph bucket limit must be >= 1, got {limit}")
    sizes, size = [], 1
    while size < limit:
        sizes.append(size)
        size *= 2
    return (*sizes, limit)


@dataclass(frozen=True)
class DecodeShapes:
    """The largest decode-time shapes one engine's policy can ask for."""

    max_batch: int
    verify_tokens: int  # root + verified nodes per row
    top_k: int  # draft frontier per row and step
    max_depth: int  # draft steps per iteration

    def target_keys(self) -> list[GraphKey]:
        """Plain decoding (``n = 1``) and verification at every token bucket."""
        return [GraphKey(b, n, n) for b in buckets_upto(self.max_batch) for n in buckets_upto(self.verify_tokens)]

    def draft_keys(self, hidden: int, target_features: int) -> list[GraphKey]:
        """The draft's tree steps (frontier padded to ``top_k``, scratch of whole levels)
        and its catch-up on an iteration's accepted tokens plus the bonus (``<= depth + 1``)."""
        if self.max_depth == 0:
            return []
        steps = [GraphKey(b, self.top_k, d * self.top_k, hidden)
                 for b in buckets_upto(self.max_batch) for d in range(1, self.max_depth + 1)]
        catch_up = [GraphKey(b, n, n, target_features)
                    for b in buckets_upto(self.max_batch) for n in buckets_upto(self.max_depth + 1)]
        return sorted(set(steps + catch_up))


class StaticInputs:
    """One key's input buffers, on the device.

    ``index`` ``[rows, 2 + tokens]`` packs each row's cache slot, committed length and
    the cache positions its tokens write, so one host-to-device copy carries all the
    host-side bookkeeping of a call; ``slots``, ``starts`` and ``write_positions`` are
    views of it."""

    def __init__(self, key: GraphKey, pad_slot: int, device: torch.device, dtype: torch.dtype) -> None:
        rows, tokens, columns = key.rows, key.tokens, key.columns
        self.key, self.pad_slot = key, pad_slot
        self.ids = torch.zeros(rows, tokens, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, tokens, dtype=torch.long, device=device)
        self.features = (torch.zeros(rows, tokens, key.feature_width, dtype=dtype, device=device)
                         if key.feature_width else None)
        self.index = torch.zeros(rows, 2 + tokens, dtype=torch.long, device=device)
        self.slots, self.starts, self.write_positions = self.index[:, 0], self.index[:, 1], self.index[:, 2:]
        # Padded tokens see their own entry, at column `columns - tokens + j` (see the module doc).
        pad_mask = torch.zeros(rows, tokens, columns, dtype=torch.bool)
        pad_mask[:, torch.arange(tokens), columns - tokens + torch.arange(tokens)] = True
        self.pad_mask = pad_mask.to(device)
        self.mask = self.pad_mask.clone()
        self.index.copy_(self.host_index(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0, 0))

    def host_index(self, slots: Tensor, starts: Tensor, tokens: int, columns: int) -> Tensor:
        """``index`` on the host for a call of ``len(slots)`` rows, ``tokens`` new tokens
        per row and ``columns`` scratch entries (rows past the call: the pad slot).
        Built in NumPy: made on every replay, and a dozen torch ops on tiny host tensors
        took ~21 µs where these take a few (AMX Xeon)."""
        key, b = self.key, len(slots)
        steps = np.arange(key.tokens)
        entries = np.tile(key.columns - key.tokens + steps, (key.rows, 1))  # padding's (see `pad_mask`)
        entries[:b, :tokens] = columns - tokens + steps[:tokens]  # the call's own: s - n + j
        index = np.zeros((key.rows, 2 + key.tokens), dtype=np.int64)
        index[:, 0] = self.pad_slot
        index[:b, 0] = slots.numpy()
        index[:b, 1] = starts.numpy()
        index[:, 2:] = index[:, 1:2] + entries
        return torch.from_numpy(index)

    def fill(self, ids: Tensor, positions: Tensor, slots: Tensor, starts: Tensor, tree_mask: Tensor,
             features: Tensor | None) -> None:
        """Copy one call's inputs in (``[B, n]`` ids/positions, ``[B, n, s]`` mask and
        ``[B, n, F]`` features on the device; ``slots``/``starts`` ``[B]`` on the host).
        Padded ids, positions and features keep earlier (finite) values: no row reads
        another's, so only the mask and the index need their padding rewritten."""
        b, n = ids.shape
        columns = tree_mask.shape[2]
        host = self.host_index(slots, starts, n, columns)
        self.index.copy_(host.pin_memory() if self.index.is_cuda else host, non_blocking=True)
        self.ids[:b, :n].copy_(ids)
        self.positions[:b, :n].copy_(positions)
        if features is not None:
            self.features[:b, :n].copy_(features)
        self.mask.copy_(self.pad_mask)
        self.mask[:b, :n].copy_(F.pad(tree_mask, (0, self.key.columns - columns)))


StepFunction = Callable[[StaticInputs], tuple[Tensor, ...]]


class CudaGraphCapture:
    """Records a step as a CUDA graph; all graphs share one memory pool, so recording
    the largest keys first lets the smaller ones reuse its blocks (as SGLang does)."""

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()

    def record(self, step: StepFunction, inputs: StaticInputs) -> tuple[Callable[[], None], tuple[Tensor, ...]]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: cuBLAS handles, allocator blocks, lazy inits
            for _ in range(2):
                step(inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = step(inputs)
        return graph.replay, outputs


class EagerReplay:
    """The CPU stand-in for a graph: replay re-runs the step over the same buffers and
    writes into the same output tensors, with the static buffers' reuse rules."""

    def record(self, step: StepFunction, inputs: StaticInputs) -> tuple[Callable[[], None], tuple[Tensor, ...]]:
        outputs = step(inputs)

        def replay() -> None:
            for static, fresh in zip(outputs, step(inputs)):
                static.copy_(fresh)

        return replay, outputs


def cache_slots(max_batch: int, graph_backend: str | None) -> int:
    """Cache slots for ``max_batch`` sequences: with graphs one more, the last, which
    padded graph rows write into (`pad_slot`)."""
    return max_batch + (graph_backend is not None)


def pad_slot(cache: KVCache) -> int:
    """The slot padded graph rows write into: the last of a `cache_slots` cache."""
    return cache.max_batch - 1


def held_memory(device: torch.device) -> int:
    """Device memory the caching allocator holds for live tensors and graph pools (0 off
    CUDA).  Its free cached blocks are released first: capturing a graph empties the
    cache itself, so a plain ``memory_reserved`` difference around the captures came out
    negative on an H200 (-400 MiB for one graph)."""
    if device.type != "cuda":
        return 0
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device)


@dataclass
class GraphStats:
    """Start-up cost and use of one `GraphedForward`, for /server_info and bench records."""

    captured: int = 0
    failed: int = 0
    capture_s: float = 0.0
    memory_bytes: int = 0
    replays: int = 0
    eager_calls: int = 0
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"captured": self.captured, "failed": self.failed, "capture_s": round(self.capture_s, 3),
                "memory_mib": round(self.memory_bytes / 2**20, 1), "replays": self.replays,
                "eager_calls": self.eager_calls, "failures": self.failures[:3]}


@dataclass
class _Recorded:
    inputs: StaticInputs
    replay: Callable[[], None]
    outputs: tuple[Tensor, ...]


class GraphedForward:
    """One model's forward recorded at a set of keys over one cache.

    ``step`` runs the model on a `StaticInputs` (through `AttentionBatch.fixed`) and
    returns its outputs ``[rows, tokens, ...]``; `__call__` returns them cut to the
    call's ``[B, n]``, or ``None`` when no recorded key covers the call."""

    def __init__(self, name: str, step: StepFunction, cache: KVCache, pad_slot: int, keys: Iterable[GraphKey],
                 backend: str, dtype: torch.dtype) -> None:
        if backend not in GRAPH_BACKENDS:
            raise ValueError(f"graph backend must be one of {', '.join(GRAPH_BACKENDS)}, got {backend!r}")
        if pad_slot >= cache.max_batch:
            raise ValueError(f"pad_slot {pad_slot} is not a slot of a {cache.max_batch}-slot cache")
        self.name, self.cache, self.stats = name, cache, GraphStats()
        recorder = CudaGraphCapture() if backend == "cuda" else EagerReplay()
        self.recorded: dict[GraphKey, _Recorded] = {}
        device = cache.k.device
        before = held_memory(device)
        for key in sorted(keys, reverse=True):
            self._record(recorder, step, key, pad_slot, dtype)
        self.stats.memory_bytes = held_memory(device) - before
        self.keys = sorted(self.recorded)

    def _record(self, recorder, step: StepFunction, key: GraphKey, pad_slot: int, dtype: torch.dtype) -> None:
        if key.columns > self.cache.capacity:
            return
        device = self.cache.k.device
        started = time.perf_counter()
        inputs = StaticInputs(key, pad_slot, device, dtype)
        try:
            replay, outputs = recorder.record(step, inputs)
        except RuntimeError as error:  # one key that cannot be recorded runs eagerly, the rest still replay
            self.stats.failed += 1
            self.stats.failures.append(f"{key}: {error}".splitlines()[0])
            if self.stats.failed == 1:
                log.warning("%s: CUDA graph capture failed at %s, that shape runs eagerly: %s", self.name, key, error)
            return
        self.stats.capture_s += time.perf_counter() - started
        self.stats.captured += 1
        self.recorded[key] = _Recorded(inputs, replay, outputs)

    def find(self, rows: int, tokens: int, columns: int, feature_width: int) -> GraphKey | None:
        """The smallest recorded key covering the call (keys sort by rows, then tokens)."""
        return next((k for k in self.keys if k.covers(rows, tokens, columns, feature_width)), None)

    def __call__(self, ids: Tensor, positions: Tensor, slots: Tensor, tree_mask: Tensor,
                 features: Tensor | None = None) -> tuple[Tensor, ...] | None:
        """Replay the covering graph for ``[B, n]`` new tokens on ``slots`` (host) with a
        ``[B, n, s]`` tree mask; ``None`` (run eagerly) if none covers it or it does not
        fit the cache."""
        b, n = ids.shape
        columns = tree_mask.shape[2]
        key = self.find(b, n, columns, 0 if features is None else features.shape[-1])
        starts = self.cache.lens[slots]
        if key is None or int(starts.max()) + key.columns > self.cache.capacity:
            self.stats.eager_calls += 1
            return None
        recorded = self.recorded[key]
        recorded.inputs.fill(ids, positions, slots, starts, tree_mask, features)
        recorded.replay()
        self.stats.replays += 1
        return tuple(out[:b, :n] for out in recorded.outputs)


def target_step(target, cache: KVCache, feature_layers: tuple[int, ...]) -> StepFunction:
    """The target's recorded forward over ``cache``: logits ``[rows, tokens, V]`` and
    the features the draft reads ``[rows, tokens, F]``."""

    def step(inputs: StaticInputs) -> tuple[Tensor, Tensor]:
        batch = AttentionBatch.fixed(cache, inputs.slots, inputs.starts, inputs.write_positions, inputs.mask)
        out = target.run(inputs.ids, inputs.positions, batch, feature_layers)
        return target.logits(out.hidden), out.draft_features()

    return step


def draft_step(draft, cache: KVCache) -> StepFunction:
    """The draft head's recorded forward over ``cache``: hidden states and logits."""

    def step(inputs: StaticInputs) -> tuple[Tensor, Tensor]:
        batch = AttentionBatch.fixed(cache, inputs.slots, inputs.starts, inputs.write_positions, inputs.mask)
        return tuple(draft.run(inputs.ids, inputs.features, inputs.positions, batch))

    return step


@dataclass
class EngineGraphs:
    """The runner's recorded forwards: the target's (decoding and verification) and
    the draft's (tree steps and catch-up); ``draft`` is ``None`` without a draft head."""

    target: GraphedForward
    draft: GraphedForward | None

    @classmethod
    def record(cls, target, draft, target_cache: KVCache, draft_cache: KVCache | None, shapes: DecodeShapes,
               feature_layers: tuple[int, ...], target_features: int, backend: str) -> EngineGraphs:
        """Record every key ``shapes`` implies; the caches' last slot is the pad slot.
        ``target_features`` is the width of the features the draft's catch-up reads."""
        dtype = target_cache.k.dtype
        graphs = cls(GraphedForward("target", target_step(target, target_cache, feature_layers), target_cache,
                                    pad_slot(target_cache), shapes.target_keys(), backend, dtype), None)
        if draft is not None and draft_cache is not None:
            graphs.draft = GraphedForward("draft", draft_step(draft, draft_cache), draft_cache,
                                          pad_slot(draft_cache),
                                          shapes.draft_keys(target.config.hidden_size, target_features), backend,
                                          dtype)
        for name, stats in graphs.report().items():
            log.info("%s: %d graphs recorded in %.1f s, %.1f MiB of graph memory (%d failed)", name,
                     stats["captured"], stats["capture_s"], stats["memory_mib"], stats["failed"])
        return graphs

    def report(self) -> dict:
        """Start-up time, graph memory and use, per model (/server_info, bench records)."""
        parts = {"target": self.target} | ({"draft": self.draft} if self.draft is not None else {})
        return {name: graphed.stats.as_dict() for name, graphed in parts.items()}
