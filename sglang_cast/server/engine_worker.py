"""The engine thread: the only thread that touches the Engine (or its tokenizer;
prompts arrive already tokenized, see `prompt_encoder`).

HTTP handlers run on the asyncio loop.  They never call the engine; they queue
closures on a thread-safe inbox (`submit`, `cancel`, `reconfigure`), and this
thread runs them *between* iterations:

    loop:  run queued commands (admit jobs, cancel requests, swap settings)
           engine.step()                      # one speculative iteration
           calibrate                          # predicted vs live; the live gate may
                                              # switch a bucket's speculation (calibration.py)
           publish each request's progress    # onto its asyncio queue

So requests join and leave the running batch between iterations (continuous
batching, the policy sees the new batch size at its next ``begin``), a cancelled
request's slot is freed before the next iteration, and a profile swap never lands
mid-iteration.  Progress goes back with ``loop.call_soon_threadsafe``.

On a CPU this thread serves at the engine's speed only if no other live thread has
run torch's parallel work: `launch_server` builds the engine on a thread that has
exited by then (`build_thread.py` says why).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

from ..cast import PolicySettings
from ..engine import Engine, IterationRecord, Request
from ..engine.prompts import check_prompt
from .calibration import LiveCalibration, iteration_cost
from .config import LiveGateConfig
from .jobs import Accepted, Delta, Event, Failed, Finished, GenerateJob, Job, Outcome, Rejected, ScoreJob
from .logprobs import report_logprobs
from .metrics import ServerMetrics
from .text_stream import TextStream

log = logging.getLogger(__name__)
TERMINAL = (Rejected, Finished, Failed)
SHUTDOWN_MESSAGE = "the server is shutting down"


class QueueFull(Exception):
    """Every batch slot and every queue place is taken (a 503)."""


class ShuttingDown(Exception):
    """The server stopped accepting work (a 503)."""


class RequestStream:
    """The asyncio side of one job: its events, in order, on an asyncio queue."""

    def __init__(self, worker: EngineWorker, job: Job) -> None:
        self.worker = worker
        self.job = job
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self.done = False

    async def next(self) -> Event:
        event = await self._events.get()
        if isinstance(event, TERMINAL):
            self.done = True
        return event

    def cancel(self) -> None:
        """The client went away: drop the request (idempotent, no-op once finished)."""
        if not self.done:
            self.done = True
            self.worker.cancel(self)


@dataclass
class _Tracked:
    """Engine-thread bookkeeping for one admitted request."""

    stream: RequestStream
    job: GenerateJob
    request: Request
    text: TextStream
    started: float
    sent_tokens: int = 0


class EngineWorker:
    def __init__(self, engine: Engine, metrics: ServerMetrics, max_outstanding: int,
                 live_gate: LiveGateConfig) -> None:
        """``max_outstanding`` bounds jobs submitted but not finished (running + queued).
        ``live_gate``: how the live calibration windows and gates; it switches buckets
        only under a cost-aware policy, the only kind that honours ``speculate: false``."""
        self.engine = engine
        self.metrics = metrics
        self.max_outstanding = max_outstanding
        if live_gate.switching and not engine.policy.cost_aware:
            log.info("live gate: policy %s ignores speculate: false; calibration measures only",
                     engine.policy.name)
            live_gate = replace(live_gate, switching=False)
        self.calibration = LiveCalibration(live_gate, engine.policy.settings)
        metrics.watch_calibration(self.calibration)
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._tracked: dict[RequestStream, _Tracked] = {}
        self._outstanding = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------- called from asyncio
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="cast-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Abort what is still in flight and end the thread (after uvicorn's graceful
        shutdown has let the open connections finish)."""
        with self._lock:  # after this, no submit or reconfigure can slip past the final drain
            self._stopping.set()
        self._inbox.put(lambda: None)  # wake an idle loop
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping.is_set()

    @property
    def outstanding(self) -> int:
        return self._outstanding

    def submit(self, jobs: list[Job]) -> list[RequestStream]:
        """Queue jobs for the engine, all or none: raises `QueueFull` or `ShuttingDown`."""
        with self._lock:
            if self._stopping.is_set():
                raise ShuttingDown(SHUTDOWN_MESSAGE)
            if self._thread is None or not self._thread.is_alive():
                raise ShuttingDown("the engine thread is not running")
            if self._outstanding + len(jobs) > self.max_outstanding:
                raise QueueFull(f"the server is at capacity ({self.max_outstanding} requests running or queued); "
                                "retry later")
            self._outstanding += len(jobs)
            streams = [RequestStream(self, job) for job in jobs]
            for stream in streams:
                self._inbox.put(lambda stream=stream: self._admit(stream))
        return streams

    def cancel(self, stream: RequestStream) -> None:
        self._inbox.put(lambda: self._cancel(stream))

    def reconfigure(self, settings: PolicySettings) -> Future:
        """Swap the policy settings between two iterations; the future resolves once done."""
        done: Future = Future()

        def apply() -> None:
            self.engine.policy.reconfigure(self.calibration.serve(settings))
            done.set_result(None)

        with self._lock:
            if self._stopping.is_set():
                done.set_exception(ShuttingDown("the engine thread has stopped"))
            else:
                self._inbox.put(apply)
        return done

    # ------------------------------------------------------------ engine thread
    def _run(self) -> None:
        while not self._stopping.is_set():
            self._run_commands(block=not self.engine.has_work)
            if self.engine.has_work and not self._stopping.is_set():
                self._step()
            self.metrics.batch_size.set(len(self.engine.running))
            self.metrics.queue_length.set(len(self.engine.waiting))
        self._run_commands(block=False)
        self._abort_all(SHUTDOWN_MESSAGE, 503)
        self.metrics.batch_size.set(0)
        self.metrics.queue_length.set(0)

    def _run_commands(self, block: bool) -> None:
        commands = [self._inbox.get()] if block else []
        while True:
            try:
                commands.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for command in commands:
            try:
                command()
            except Exception:
                log.exception("engine-thread command failed")

    def _publish(self, stream: RequestStream, event: Event) -> None:
        if isinstance(event, TERMINAL):
            with self._lock:
                self._outstanding -= 1
        try:
            self._loop.call_soon_threadsafe(stream._events.put_nowait, event)
        except RuntimeError:  # the event loop is already closed: nobody is listening
            pass

    def _admit(self, stream: RequestStream) -> None:
        job = stream.job
        if self._stopping.is_set():
            self._publish(stream, Failed(SHUTDOWN_MESSAGE, 503))
            return
        started = time.perf_counter()
        try:
            prompt_ids = job.prompt_ids
            if isinstance(job, ScoreJob):
                self._score(stream, job, prompt_ids, started)
                return
            params = job.params
            request = self.engine.add_request(prompt_ids, params)
        except ValueError as err:
            self._publish(stream, Rejected(str(err), job.prompt_field))  # the prompt does not fit the context
            return
        except Exception as err:
            log.exception("admitting a request failed")
            self._publish(stream, Failed(f"internal error: {err}"))
            return
        self._tracked[stream] = _Tracked(stream, job, request, TextStream(params.stop), started)
        self._publish(stream, Accepted(len(prompt_ids)))

    def _score(self, stream: RequestStream, job: ScoreJob, prompt_ids: list[int], started: float) -> None:
        check_prompt(prompt_ids, vocab_size=self.engine.target.config.vocab_size,
                     context_length=self.engine.context_length)
        report = None
        if job.logprobs is not None:
            report = report_logprobs(self.engine.target, self.engine.tokenizer, prompt_ids, [], job.logprobs)
        self._publish(stream, Accepted(len(prompt_ids)))
        self._publish(stream, Finished(Outcome("", [], len(prompt_ids), "length", None, 0, 0,
                                               time.perf_counter() - started, report)))

    def _cancel(self, stream: RequestStream) -> None:
        tracked = self._tracked.pop(stream, None)
        if tracked is None:  # already finished (or rejected) before the cancel arrived
            return
        self.engine.cancel(tracked.request)
        self.metrics.cancelled.inc()
        self._publish(stream, Failed("cancelled by the client", 499))

    def _step(self) -> None:
        try:
            record = self.engine.step().record
            if record is not None:
                self.metrics.observe_iteration(record)
                self._calibrate(record)
            for tracked in list(self._tracked.values()):
                self._publish_progress(tracked)
        except Exception as err:
            log.exception("engine step failed; aborting the requests in flight")
            self._abort_all(f"engine error: {err}", 500)

    def _calibrate(self, record: IterationRecord) -> None:
        """Charge the iteration against the plan it ran under and let the live gate
        decide; a changed decision is applied before the next iteration begins.  A
        failure here is logged and skipped: it must never cost a request."""
        plan = record.plan
        try:
            cost = iteration_cost(plan, record.batch_size, record.context_len, record.verified, record.accepted,
                                  record.step_ms)
            settings = self.calibration.observe(plan, cost, saturated=bool(self.engine.waiting))
            if settings is not None:
                self.engine.policy.reconfigure(settings)
        except Exception:
            log.exception("live calibration failed on an iteration; serving goes on")

    def _publish_progress(self, tracked: _Tracked) -> None:
        request = tracked.request
        new_ids = request.output_ids[tracked.sent_tokens:]
        if not new_ids and not request.finished:
            return
        tracked.sent_tokens = len(request.output_ids)
        self.metrics.add_generated(len(new_ids))
        text = tracked.text.advance(request.text, request.finished)
        if text or new_ids:
            self._publish(tracked.stream, Delta(text, new_ids))
        if request.finished:
            outcome = self._outcome(tracked)
            del self._tracked[tracked.stream]
            self._publish(tracked.stream, Finished(outcome))

    def _outcome(self, tracked: _Tracked) -> Outcome:
        request = tracked.request
        report = None
        if tracked.job.logprobs is not None:
            report = report_logprobs(self.engine.target, self.engine.tokenizer, request.prompt_ids,
                                     request.output_ids, tracked.job.logprobs)
        return Outcome(request.text, list(request.output_ids), len(request.prompt_ids),
                       request.finish_reason or "length", request.matched_stop, request.stats.iterations,
                       request.stats.accepted_draft_tokens, time.perf_counter() - tracked.started, report)

    def _abort_all(self, message: str, status: int) -> None:
        """Answer every request in flight first, then free their slots (best effort:
        this also runs after the engine raised, when its state may be broken)."""
        tracked, self._tracked = list(self._tracked.values()), {}
        for entry in tracked:
            self._publish(entry.stream, Failed(message, status))
            self.metrics.cancelled.inc()
        for entry in tracked:
            try:
                self.engine.cancel(entry.request)
            except Exception:
                log.exception("could not release request %d", entry.request.request_id)

