"""Handler-side plumbing: submit jobs, wait for their events, and make sure a
request whose client went away is cancelled at once (its batch slot freed before
the next iteration), whether the response was streamed or not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
from fastapi import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from .engine_worker import EngineWorker, QueueFull, RequestStream, ShuttingDown
from .errors import ApiError, bad_request, service_unavailable
from .jobs import Accepted, Delta, Failed, Finished, Job, Outcome, Rejected

T = TypeVar("T")


def submit(worker: EngineWorker, jobs: list[Job]) -> list[RequestStream]:
    """Hand jobs to the engine thread: 503 (retry later) when the server is full now."""
    try:
        return worker.submit(jobs)
    except (QueueFull, ShuttingDown) as err:
        raise service_unavailable(str(err)) from None


def check_batch_fits(worker: EngineWorker, count: int, param: str) -> None:
    """A batch larger than every slot and queue place together could never be
    taken, so it is a 400, not a 503 to retry."""
    if count > worker.max_outstanding:
        raise bad_request(f"{param}: a batch of {count} prompts can never fit this server, which holds at most "
                          f"{worker.max_outstanding} requests running or queued", param=param)


async def admitted(stream: RequestStream) -> int:
    """Wait until the engine thread took the job; its prompt token count.  Raises
    the 400 of a rejected job (so a stream can still answer with a status code)."""
    event = await stream.next()
    if isinstance(event, Accepted):
        return event.prompt_tokens
    if isinstance(event, Rejected):
        raise bad_request(event.message, event.param)
    raise _failure(event)


async def start(worker: EngineWorker, jobs: list[Job]) -> tuple[list[RequestStream], list[int]]:
    """Submit ``jobs`` and wait until the engine thread took each: the streams and
    their prompt token counts.  Any failure on the way (a rejected job, the handler
    cancelled) cancels every stream before it propagates."""
    streams = submit(worker, jobs)
    try:
        return streams, [await admitted(stream) for stream in streams]
    except BaseException:
        cancel_all(streams)
        raise


async def finish(request: Request, streams: list[RequestStream]) -> list[Outcome]:
    """Each stream's outcome, unless the client goes away first (a 499); the streams
    are cancelled either way, so no slot outlives the response."""
    try:
        return await unless_disconnected(request, asyncio.gather(*(outcome_of(s) for s in streams)))
    finally:
        cancel_all(streams)


async def outcome_of(stream: RequestStream) -> Outcome:
    """The job's outcome: the last event of its `progress`."""
    async for event in progress(stream):
        if isinstance(event, Finished):
            return event.outcome
    raise ApiError(500, "the engine closed a stream without finishing it")


async def progress(stream: RequestStream) -> AsyncIterator[Delta | Finished]:
    """Deltas, then the final ``Finished``; raises `ApiError` if the job was
    rejected or failed."""
    while True:
        event = await stream.next()
        if isinstance(event, Rejected):
            raise bad_request(event.message, event.param)
        if isinstance(event, Failed):
            raise _failure(event)
        if isinstance(event, (Delta, Finished)):
            yield event
        if isinstance(event, Finished):
            return


def _failure(event: Any) -> ApiError:
    if isinstance(event, Failed):
        return ApiError(event.status, event.message, headers={"Retry-After": "1"} if event.status == 503 else None)
    return ApiError(500, f"unexpected engine event {event!r}")


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` but cancel it as soon as the client disconnects (the caller's
    ``finally`` then cancels its engine requests)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    if task not in done:
        raise ApiError(499, "client closed the request")
    return task.result()


def cancel_all(streams: list[RequestStream]) -> None:
    for stream in streams:
        stream.cancel()


def sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


class EventStreamResponse(StreamingResponse):
    """Server-sent events that stop the moment the client disconnects.

    Under ASGI spec 2.4 Starlette notices a disconnect only when its next write
    fails, which for a request still waiting in the queue may be a long time; this
    response always listens for ``http.disconnect`` while streaming, and always
    runs ``on_close`` (which cancels the engine requests) however it ends.
    """

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client went away mid-write
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await _disconnected(receive)
                group.cancel_scope.cancel()
        finally:
            self.on_close()
