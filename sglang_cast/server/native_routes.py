"""SGLang-native endpoints, enough for frontend programs run through
``sgl.RuntimeEndpoint``: ``/generate``, ``/get_model_info``, ``/server_info``,
``/health``, ``/health_generate``, ``/flush_cache``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from ..cast import SamplingParams
from .dispatch import (SSE_DONE, EventStreamResponse, cancel_all, check_batch_fits, finish, outcome_of, progress, sse,
                       start, submit)
from .engine_worker import RequestStream
from .errors import ApiError, service_unavailable
from .jobs import Delta, Finished, GenerateJob, Outcome
from .native_protocol import GenerateRequest
from .state import server_state

router = APIRouter()
HEALTH_GENERATE_TIMEOUT_SECONDS = 60.0


def package_version() -> str:
    try:
        return version("sglang-cast")
    except PackageNotFoundError:
        return "unknown"


def finish_reason(outcome: Outcome) -> dict[str, Any]:
    """SGLang's finish-reason objects."""
    if outcome.finish_reason == "stop":
        return {"type": "stop", "matched": outcome.matched_stop}
    if outcome.finish_reason == "length":
        return {"type": "length", "length": outcome.completion_tokens}
    return {"type": "abort", "message": "request aborted"}


def meta_info(request_id: str, outcome: Outcome) -> dict[str, Any]:
    iterations = outcome.iterations
    meta: dict[str, Any] = {
        "id": request_id,
        "finish_reason": finish_reason(outcome),
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "cached_tokens": 0,
        "e2e_latency": outcome.latency_seconds,
        "spec_verify_ct": iterations,
        "spec_accept_length": (outcome.accepted_draft_tokens + iterations) / iterations if iterations else 0.0,
    }
    if outcome.logprobs is not None:
        meta.update(outcome.logprobs.to_meta_info())
    return meta


def item(request_id: str, outcome: Outcome) -> dict[str, Any]:
    return {"text": outcome.text, "output_ids": outcome.output_ids, "meta_info": meta_info(request_id, outcome)}


@router.post("/generate")
async def generate(body: GenerateRequest, request: Request) -> Any:
    state = server_state(request)
    prompts, batch = body.prompts()
    body.check_supported(batch)
    field = body.prompt_field
    check_batch_fits(state.worker, len(prompts), field)
    specs = body.job_specs(len(prompts), state.config.max_top_logprobs)
    ids = [rid or uuid.uuid4().hex for rid in body.request_ids(len(prompts))]
    jobs = [spec.job(await state.encoder.encode(prompt, field), field) for spec, prompt in zip(specs, prompts)]
    streams, prompt_tokens = await start(state.worker, jobs)
    if body.stream:
        return EventStreamResponse(_stream(streams[0], ids[0], prompt_tokens[0]),
                                   on_close=lambda: cancel_all(streams))
    outcomes = await finish(request, streams)
    items = [item(rid, outcome) for rid, outcome in zip(ids, outcomes)]
    return items if batch else items[0]


async def _stream(stream: RequestStream, request_id: str, prompt_tokens: int) -> AsyncIterator[str]:
    """SGLang's stream: each chunk carries the text and token ids so far."""
    text, output_ids = "", []
    try:
        async for event in progress(stream):
            if isinstance(event, Delta):
                text += event.text
                output_ids += event.token_ids
                yield sse({"text": text, "output_ids": output_ids, "meta_info": {
                    "id": request_id, "finish_reason": None, "prompt_tokens": prompt_tokens,
                    "completion_tokens": len(output_ids)}})
            elif isinstance(event, Finished):
                yield sse(item(request_id, event.outcome))
    except ApiError as err:
        yield sse(err.body())
    yield SSE_DONE


@router.get("/get_model_info")
async def get_model_info(request: Request) -> dict[str, Any]:
    state = server_state(request)
    config = state.engine.target.config
    return {"model_path": state.config.model_path, "tokenizer_path": state.config.model_path,
            "served_model_name": state.config.served_model_name, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default", "has_image_understanding": False,
            "has_audio_understanding": False, "architectures": [config.architecture]}


@router.get("/server_info")
@router.get("/get_server_info")
async def server_info(request: Request) -> dict[str, Any]:
    state = server_state(request)
    engine = state.engine
    return {**state.config.server_args, "version": package_version(), "backend": "native",
            "served_model_name": state.config.served_model_name, "model_path": state.config.model_path,
            "policy": engine.policy.name, "max_running_requests": engine.max_batch_size,
            "max_queued_requests": state.config.max_queued_requests, "context_length": engine.context_length,
            "cast_profile": state.profiles.status(), "cuda_graphs": engine.graph_report(),
            # Off the event loop: the report charges new iterations and may fit the live host terms.
            "cast_live_calibration": await run_in_threadpool(state.worker.calibration.report),
            "internal_states": [{"outstanding_requests": state.worker.outstanding}]}


@router.get("/health")
async def health(request: Request) -> PlainTextResponse:
    if not server_state(request).worker.alive:
        raise service_unavailable("the engine thread is not running")
    return PlainTextResponse("")


@router.get("/health_generate")
async def health_generate(request: Request) -> PlainTextResponse:
    """Healthy only if the engine really generates a token within the timeout."""
    state = server_state(request)
    ping = await state.encoder.encode_text("ping", "text")
    streams = submit(state.worker, [GenerateJob(ping, SamplingParams(max_new_tokens=1))])
    try:
        await asyncio.wait_for(outcome_of(streams[0]), HEALTH_GENERATE_TIMEOUT_SECONDS)
    except TimeoutError:
        raise service_unavailable(f"no token generated within {HEALTH_GENERATE_TIMEOUT_SECONDS:g} s") from None
    finally:
        cancel_all(streams)
    return PlainTextResponse("")


@router.post("/flush_cache")
@router.get("/flush_cache")
async def flush_cache() -> PlainTextResponse:
    """SGLang frontends call this; the native engine frees a request's KV slot when it
    leaves and keeps no prefix cache, so there is nothing to flush."""
    return PlainTextResponse("Cache flushed (the native engine keeps no prefix cache between requests).")
