"""OpenAI-compatible endpoints: ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` (plain JSON or SSE streaming)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from .dispatch import SSE_DONE, EventStreamResponse, cancel_all, finish, progress, sse, start
from .engine_worker import RequestStream
from .errors import ApiError
from .jobs import Delta, Finished, GenerateJob, Outcome
from .openai_protocol import ChatCompletionRequest, CompletionRequest, SamplingRequest
from .state import ServerState, server_state

router = APIRouter()


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class CompletionFormat:
    """How ``/v1/completions`` spells its choices."""

    object = "text_completion"
    chunk_object = "text_completion"
    id_prefix = "cmpl-"

    def choice(self, outcome: Outcome) -> dict[str, Any]:
        return {"index": 0, "text": outcome.text, "logprobs": None, "finish_reason": outcome.finish_reason}

    def opening(self) -> dict[str, Any] | None:
        return None

    def delta(self, text: str) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": None}

    def closing(self, finish_reason: str) -> dict[str, Any]:
        return {"index": 0, "text": "", "logprobs": None, "finish_reason": finish_reason}


class ChatFormat:
    """How ``/v1/chat/completions`` spells its choices (streams open with the role)."""

    object = "chat.completion"
    chunk_object = "chat.completion.chunk"
    id_prefix = "chatcmpl-"

    def choice(self, outcome: Outcome) -> dict[str, Any]:
        return {"index": 0, "message": {"role": "assistant", "content": outcome.text}, "logprobs": None,
                "finish_reason": outcome.finish_reason}

    def opening(self) -> dict[str, Any] | None:
        return {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}

    def delta(self, text: str) -> dict[str, Any]:
        return {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}

    def closing(self, finish_reason: str) -> dict[str, Any]:
        return {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason}


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    state = server_state(request)
    return {"object": "list", "data": [{
        "id": state.config.served_model_name, "object": "model", "created": state.created,
        "owned_by": "sglang-cast", "root": state.config.model_path, "max_model_len": state.engine.context_length,
    }]}


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Any:
    state = server_state(request)
    state.check_model(body.model)
    body.check_supported()
    prompt_ids = await state.encoder.encode(body.single_prompt(), "prompt")
    params = body.sampling_params(body.max_tokens or state.room_after(prompt_ids, "prompt"))
    job = GenerateJob(prompt_ids, params)
    return await _respond(state, request, body, job, CompletionFormat())


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    state = server_state(request)
    state.check_model(body.model)
    body.check_supported()
    prompt_ids = await state.encoder.encode_chat(body.template_messages())
    params = body.sampling_params(body.token_limit or state.room_after(prompt_ids, "messages"))
    job = GenerateJob(prompt_ids, params, prompt_field="messages")
    return await _respond(state, request, body, job, ChatFormat())


async def _respond(state: ServerState, request: Request, body: SamplingRequest, job: GenerateJob,
                   fmt: CompletionFormat | ChatFormat) -> Any:
    streams, prompt_tokens = await start(state.worker, [job])
    response_id = f"{fmt.id_prefix}{uuid.uuid4().hex}"
    model = state.config.served_model_name
    if body.stream:
        chunks = _stream(streams[0], body, fmt, response_id, model, prompt_tokens[0])
        return EventStreamResponse(chunks, on_close=lambda: cancel_all(streams))
    (outcome,) = await finish(request, streams)
    return {"id": response_id, "object": fmt.object, "created": int(time.time()), "model": model,
            "choices": [fmt.choice(outcome)], "usage": usage(outcome.prompt_tokens, outcome.completion_tokens)}


async def _stream(stream: RequestStream, body: SamplingRequest, fmt: CompletionFormat | ChatFormat,
                  response_id: str, model: str, prompt_tokens: int) -> AsyncIterator[str]:
    created = int(time.time())

    def chunk(choices: list[dict[str, Any]], usage_value: dict[str, int] | None = None) -> str:
        data: dict[str, Any] = {"id": response_id, "object": fmt.chunk_object, "created": created, "model": model,
                                "choices": choices}
        if body.include_usage:  # OpenAI: null on every chunk but the last
            data["usage"] = usage_value
        return sse(data)

    try:
        opening = fmt.opening()
        if opening is not None:
            yield chunk([opening])
        async for event in progress(stream):
            if isinstance(event, Delta) and event.text:
                yield chunk([fmt.delta(event.text)])
            elif isinstance(event, Finished):
                outcome = event.outcome
                yield chunk([fmt.closing(outcome.finish_reason)])
                if body.include_usage:
                    yield chunk([], usage(prompt_tokens, outcome.completion_tokens))
    except ApiError as err:  # the status line is already sent: report in-band, as OpenAI does
        yield sse(err.body())
    yield SSE_DONE
