"""The native engine: batched, lossless speculative decoding driven by a CAST policy.

``Engine`` ties three parts, each with one job:

* `Scheduler` (engine/scheduler.py) admits waiting requests into free cache slots
  and retires finished ones;
* `SpeculativeRunner` (engine/runner.py) prefills admitted requests (one forward per
  `prefill_groups` group) and runs one speculative iteration over the running batch;
* `TraceRecording` (engine/tracing.py), when switched on, is the runner's
  speculation strategy instead of the live policy's.

One ``step()`` admits, iterates once, retires, and returns a `StepOutput` saying
what it did.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from ..cast import ContextLookup, Policy, RequestSampler, SamplingParams, TraceIteration, TreeShape, make_policy
from .prompts import check_prompt
from .requests import GenerationResult, Request
from .runner import IterationRecord, SpeculativeRunner
from .scheduler import Scheduler
from .tracing import TraceRecording


@dataclass
class StepOutput:
    """What one ``step()`` did: the requests it finished (at prefill or in the
    iteration), the iteration's record (``None`` when nothing was running) and its
    trace (``None`` unless traces are recorded)."""

    finished: list[Request] = field(default_factory=list)
    record: IterationRecord | None = None
    trace: TraceIteration | None = None


class StepLog:
    """The records and traces of every step it is handed, in order: pass one as
    ``Engine.generate(..., on_step=log)`` to keep what a generation did."""

    def __init__(self) -> None:
        self.records: list[IterationRecord] = []
        self.traces: list[TraceIteration] = []

    def __call__(self, step: StepOutput) -> None:
        if step.record is not None:
            self.records.append(step.record)
        if step.trace is not None:
            self.traces.append(step.trace)


class Engine:
    """Continuous-batching speculative decoder over one target and one draft head.

    ``draft`` may be ``None`` only for the vanilla policy; the target features it reads
    follow from the draft itself (EAGLE-3 heads read three target layers).
    ``tokenizer`` must have ``encode``/``decode``; ``eos_token_ids`` stop generation
    unless ``ignore_eos``.
    """

    def __init__(self, target, tokenizer, draft, policy: Policy, *, max_batch_size: int = 8,
                 context_length: int = 2048, eos_token_ids: tuple[int, ...] = (),
                 graph_backend: str | None = None) -> None:
        self.scheduler = Scheduler(max_batch_size)
        if policy.needs_draft and draft is None:
            raise ValueError(f"policy {policy.name!r} needs a draft head: pass a draft path or use policy 'vanilla'")
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.context_length = context_length
        self.eos_token_ids = frozenset(eos_token_ids)
        self.runner = SpeculativeRunner(target, draft, policy, tokenizer.decode, max_batch_size=max_batch_size,
                                        context_length=context_length, graph_backend=graph_backend)
        self._ids = itertools.count()

    # Read-only views of what the runner and the scheduler hold, for the server and tools.
    target = property(lambda self: self.runner.target)
    draft = property(lambda self: self.runner.draft)
    policy = property(lambda self: self.runner.policy)
    tree_room = property(lambda self: self.runner.tree_room)
    running = property(lambda self: self.scheduler.running)
    waiting = property(lambda self: self.scheduler.waiting)

    def graph_report(self) -> dict | None:
        """The CUDA graphs' start-up time, memory and use (`cuda_graphs.EngineGraphs.report`);
        ``None`` when every forward runs eagerly."""
        graphs = self.runner.graphs
        return graphs.report() if graphs is not None else None

    @property
    def recording(self) -> bool:
        return isinstance(self.runner.speculation, TraceRecording)

    def record_traces(self, shape: TreeShape | None = None, lookup: ContextLookup | None = ContextLookup()) -> None:
        """From now on, record every iteration as a full-expansion trace with
        ``shape`` (default: the policy's shape for each batch size) and ``lookup``'s
        proposals grafted on (``None``: no lookup branch); each step's trace comes back
        in its `StepOutput`.  Greedy requests only: replay is defined for greedy.  Every
        node of the candidate pool is verified, so the KV reservation grows to the pool
        when the policy's trees need less; that reallocates the caches, hence recording
        must start before requests run."""
        if self.draft is None:
            raise ValueError("trace recording needs a draft head (the policy is vanilla)")
        settings = self.policy.settings if shape is None else self.policy.settings.with_shape(shape)
        graft = lookup.depth if lookup is not None else 0
        deepest = max(bucket.lookup_depth for bucket in settings.buckets)
        if deepest > graft:
            raise ValueError(f"the policy's buckets graft up to {deepest} lookup tokens but the recording's branch "
                             f"has {graft}; record with a lookup of depth >= {deepest}")
        needed = max(1 + bucket.shape.pool_size + graft for bucket in settings.buckets)  # root + pool + branch
        if needed > self.tree_room:
            if self.running:
                raise ValueError(f"recording needs {needed} tree tokens per slot but the engine reserved "
                                 f"{self.tree_room}; start recording before any request runs")
            self.runner.reserve_tree_room(needed)
        self.runner.speculation = TraceRecording(make_policy("eagle2", settings), lookup)

    # ----------------------------------------------------------------- requests
    def add_request(self, prompt: str | list[int], params: SamplingParams) -> Request:
        """Queue a request; raises ``ValueError`` if it cannot fit the context."""
        prompt_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        check_prompt(prompt_ids, vocab_size=self.target.config.vocab_size, context_length=self.context_length,
                     max_new_tokens=params.max_new_tokens)
        if self.recording and not params.greedy:
            raise ValueError("temperature must be 0 while traces are recorded (replay is defined for greedy)")
        stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
        request = Request(next(self._ids), prompt_ids, params, RequestSampler.create(params), stop_ids)
        self.scheduler.queue(request)
        return request

    def generate(self, prompts: list[str] | list[list[int]],
                 params: SamplingParams | list[SamplingParams] | None = None,
                 on_step: Callable[[StepOutput], None] | None = None) -> list[GenerationResult]:
        """Decode every prompt to completion (continuous batching) and return results
        in prompt order; ``on_step`` sees every step's output (records, traces)."""
        params_list = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params_list)} sampling params")
        requests = [self.add_request(p, sp) for p, sp in zip(prompts, params_list)]
        while not all(r.finished for r in requests):
            output = self.step()
            if on_step is not None:
                on_step(output)
        return [r.result() for r in requests]

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def cancel(self, request: Request) -> None:
        """Drop a request now (client went away); its slot is free at once."""
        if not self.scheduler.drop_waiting(request) and request in self.running:
            self._retire(request)
        request.finish_reason = request.finish_reason or "abort"

    # --------------------------------------------------------------- scheduling
    def step(self) -> StepOutput:
        """Admit waiting requests (prefill), run one speculative iteration over the
        running batch, retire the requests that finished, and say what happened."""
        output = StepOutput(finished=self._admit())
        if not self.running:
            return output
        batch = list(self.running)
        iteration = self.runner.iterate(batch)
        output.record, output.trace = iteration.record, iteration.trace
        done = [r for r in batch if r.finished]
        for request in done:
            self._retire(request)
        output.finished += done
        return output

    def _admit(self) -> list[Request]:
        """Prefill waiting requests while slots are free, in `prefill_groups` (one
        forward per group); those that finished at prefill (one token asked, or a stop
        token first) are retired at once."""
        admitted = []
        while (request := self.scheduler.admit_next()) is not None:
            admitted.append(request)
        for group in self.runner.prefill_groups(admitted):
            self.runner.prefill(group)
        finished = []
        for request in admitted:
            if request.finished:
                self._retire(request)
                finished.append(request)
            else:
                self.scheduler.run(request)
        return finished

    def _retire(self, request: Request) -> None:
        self.runner.release(request.slot)
        self.scheduler.retire(request)
