"""Shared pieces of the server tests: a tiny engine behind the real app factory, a
real uvicorn on a free loopback port, SSE parsing, profile files, and the bad
requests every endpoint must refuse (`BAD_INPUTS`, `SURROGATES`, `LOOSE_TYPES`)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
from jinja2 import TemplateError
import uvicorn

from sglang_cast.cast import (BucketSettings, CostModel, PolicySettings, SamplingParams, Thresholds, TreeShape,
                              make_policy)
from sglang_cast.engine import Engine, StepOutput
from sglang_cast.profile import Profile, save_profile
from sglang_cast.server.app import create_app
from sglang_cast.server.config import LiveGateConfig, ServerConfig
from support.tiny import SETTINGS, VOCAB, CharTokenizer, MirrorDraft, tiny_target

MODEL = "tiny"
SHAPE = TreeShape(top_k=4, max_depth=4, num_verify_tokens=12)


class ChatCharTokenizer(CharTokenizer):
    """CharTokenizer plus a toy chat template, so the chat endpoint can be tested,
    and a vocabulary whose entries are single characters of up to 4 UTF-8 bytes
    (what `PromptEncoder`'s byte bound reads)."""

    def get_vocab(self) -> dict[str, int]:
        return {chr(0x10000 + i): i for i in range(VOCAB)}

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        if any(m["role"] == "tool" for m in messages):  # as a template's raise_exception refuses
            raise TemplateError("this template has no tool role")
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")


def wait_until_healthy(process, url: str, output, timeout_s: float = 180) -> None:
    """Poll a launched server's ``/health`` until it answers 200; fail with its
    ``output()`` if the process exits first, or when ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, output()
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "server did not come up"
        time.sleep(0.5)


def tiny_engine(policy: str = "cast", settings: PolicySettings = SETTINGS, max_batch: int = 4,
                context: int = 256, target=None) -> Engine:
    target = target if target is not None else tiny_target()
    draft = MirrorDraft(target) if policy != "vanilla" else None
    return Engine(target, ChatCharTokenizer(), draft, make_policy(policy, settings), max_batch_size=max_batch,
                  context_length=context)


def reference(target, prompt: str | list[str], max_new_tokens: int):
    """Plain greedy decoding: what every speculative output must equal.  A list of
    prompts is decoded as one batch (the engine is lossless under batching)."""
    engine = tiny_engine("vanilla", target=target, max_batch=8)
    prompts = [prompt] if isinstance(prompt, str) else prompt
    results = engine.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens))
    return results[0] if isinstance(prompt, str) else results


class StepGate:
    """Wraps ``engine.step``: every iteration takes at least ``delay`` seconds, and
    a held gate skips iterations, so requests stay exactly where they are for as
    long as a test needs while the engine thread keeps running its commands
    (admissions, cancels, profile swaps)."""

    def __init__(self, engine: Engine, delay: float = 0.0) -> None:
        self._budget: int | None = None  # iterations still allowed; None: no limit
        self._lock = threading.Lock()
        step = engine.step

        def gated_step():
            with self._lock:
                held = self._budget == 0
                if self._budget:
                    self._budget -= 1
            if held:
                time.sleep(0.005)
                return StepOutput()
            time.sleep(delay)
            return step()

        engine.step = gated_step

    def hold(self) -> None:
        with self._lock:
            self._budget = 0

    def release(self, steps: int | None = None) -> None:
        """Allow ``steps`` more iterations (then hold again), or all of them."""
        with self._lock:
            self._budget = steps

    @property
    def held(self) -> bool:
        return self._budget == 0


def config(**overrides) -> ServerConfig:
    """The tiny model's timings against its made-up cost tables would make the live gate
    switch buckets at random, and a switch changes which draws a seeded sampled request
    makes: the test servers measure but do not switch unless a test passes ``live_gate``
    (tests/server/test_server_live_gate.py does)."""
    return ServerConfig(**{"served_model_name": MODEL, "model_path": "tiny-random-llama",
                           "live_gate": LiveGateConfig(switching=False), **overrides})


def profile_settings(c1: float = 1.0, shape: TreeShape = SHAPE) -> PolicySettings:
    return PolicySettings(buckets=(BucketSettings(max_batch_size=2, shape=shape, thresholds=Thresholds(c1=c1)),
                                   BucketSettings(max_batch_size=64, shape=shape)),
                          costs=CostModel.linear(1.0, 4.0, draft_ratio=0.2))


def write_profile(path: Path, c1: float = 1.0, shape: TreeShape = SHAPE, weight_format: str | None = None) -> Path:
    model = {} if weight_format is None else {"weight_format": weight_format}
    return save_profile(Profile(label="test", device="test cpu", source="measured",
                                settings=profile_settings(c1, shape), model=model), path)


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 in a background thread."""

    def __init__(self, app, graceful_seconds: float = 10.0) -> None:
        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                                    timeout_graceful_shutdown=graceful_seconds))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive(), "server did not stop"

    def __exit__(self, *exc) -> None:
        if self.thread.is_alive():
            self.stop()

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(**{"base_url": self.url, "timeout": 60, **kwargs})


def serve(engine: Engine, **overrides) -> LiveServer:
    return LiveServer(create_app(engine, config(**overrides)))


def sse_events(lines) -> list:
    """Parsed ``data:`` payloads of an SSE stream up to ``[DONE]`` (which must come)."""
    events = []
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            return events
        events.append(json.loads(payload))
    raise AssertionError(f"stream ended without [DONE] after {events}")


def metric(text: str, name: str) -> float:
    """Sum of the samples in Prometheus text whose line starts with ``name``."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def wait_for(condition, timeout: float = 10.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(interval)


def complete_all(server, prompts, max_tokens: int = 120) -> dict:
    """One greedy completion of ``max_tokens`` per prompt, all at once (a thread each)."""
    results = {}

    def run(prompt):
        with server.client() as c:
            results[prompt] = c.post("/v1/completions", json={"model": MODEL, "prompt": prompt,
                                                             "max_tokens": max_tokens, "temperature": 0})

    threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


# Requests the tiny server (context length 256) refuses: path, body, status, a fragment of the message.
BAD_INPUTS = [
    ("/v1/completions", {"model": MODEL, "prompt": "x" * 300, "max_tokens": 8}, 400,
     "prompt (300 tokens) + max_new_tokens (8) = 308 exceeds the context length 256"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1000}, 400,
     "max_new_tokens (1000) = 1002 exceeds the context length 256"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x" * 260}]}, 400,
     "leaves no room to generate within the context length 256"),
    ("/generate", {"text": "x" * 300, "sampling_params": {"max_new_tokens": 0}}, 400,
     "prompt (300 tokens) exceeds the context length 256"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "temperature": "hot"}, 400, "temperature"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "temperature": 5}, 400, "temperature"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "seed": "abc"}, 400, "seed"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "n": 2}, 400, "only n=1"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "stop": [""]}, 400, "stop"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "stop": ["ok", "x" * 1025]}, 400,
     "stop.1: a stop string must be 1 to 1024 characters, got 1025"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "stop": "x" * 1025}, 400, "1 to 1024 characters, got 1025"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}, 400,
     "the chat template could not be applied: this template has no tool role"),
    ("/v1/completions", {"model": MODEL, "prompt": ["a", "b"]}, 400, "one prompt per request"),
    ("/v1/completions", {"model": MODEL, "prompt": ""}, 400, "at least one token"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "presence_penalty": 0.5}, 400, "presence_penalty"),
    ("/v1/chat/completions", {"model": MODEL}, 400, "messages: field required"),
    ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    ("/v1/completions", {"model": "gpt-4", "prompt": "hi"}, 404, "The model `gpt-4` does not exist"),
    ("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}, 404, "gpt-4"),
    ("/generate", {"sampling_params": {"max_new_tokens": 4}}, 400, "exactly one of text or input_ids"),
    ("/generate", {"text": "hello", "return_logprob": True, "logprob_start_len": 9,
                   "sampling_params": {"max_new_tokens": 0}}, 400, "logprob_start_len (9)"),
    ("/generate", {"text": "hi", "sampling_params": {"regex": "a+"}}, 400, "regex: not supported"),
    ("/generate", {"text": "hi", "sampling_params": {"stop_token_ids": ["a"]}}, 400, "stop_token_ids"),
    ("/generate", {"text": "hi", "sampling_params": {"top_p": 0}}, 400, "sampling_params.top_p"),
    ("/generate", {"text": "hi", "sampling_params": {"temperature": 500}}, 400,
     "sampling_params.temperature: Input should be less than or equal to 100"),
    ("/generate", {"input_ids": [1, 999]}, 400, "token id 999 is outside the vocabulary"),
    ("/generate", {"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 1}]}, 400, "1 values for 2 prompts"),
    ("/generate", {"text": ["a", "b"], "stream": True}, 400, "single prompt"),
    ("/generate", {"text": "hi", "sampling_params": {"n": 3}}, 400, "only n=1"),
]


# Every place a string enters; the lone surrogate must be refused naming that field.
SURROGATES = [
    ("/v1/completions", {"prompt": "a\ud800b"}, "prompt"),
    ("/v1/completions", {"prompt": "a\ud800b", "stream": True}, "prompt"),
    ("/v1/completions", {"prompt": ["a\udfff"]}, "prompt.0"),
    ("/v1/completions", {"prompt": "hi", "stop": "\ud800"}, "stop"),
    ("/v1/completions", {"prompt": "hi", "stop": ["ok", "x\ud800"]}, "stop.1"),
    ("/v1/completions", {"model": "m\ud800", "prompt": "hi"}, "model"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a\ud800"}]}, "messages.0.content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a\ud800"}], "stream": True},
     "messages.0.content"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]},
     "messages.0.content.0.text"),
    ("/generate", {"text": "a\ud800b"}, "text"),
    ("/generate", {"text": "a\ud800b", "stream": True}, "text"),
    ("/generate", {"text": ["ok", "\ud800"]}, "text.1"),
    ("/generate", {"text": "hi", "sampling_params": {"stop": ["\ud800"]}}, "sampling_params.stop.0"),
    ("/generate", {"text": "hi", "rid": "r\ud800"}, "rid"),
]


# A value of the wrong JSON type is refused naming its field, never coerced.
LOOSE_TYPES = [
    ("/v1/completions", {"prompt": "hi", "stream": "yes"}, "stream"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": True}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "temperature": True}, "temperature"),
    ("/v1/completions", {"prompt": "hi", "top_k": "3"}, "top_k"),
    ("/v1/completions", {"prompt": 7}, "prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ("/v1/completions", {"prompt": "hi", "stream": True, "stream_options": {"include_usage": "true"}},
     "stream_options.include_usage"),
    ("/generate", {"text": "hi", "return_logprob": "yes"}, "return_logprob"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": True}}, "sampling_params.max_new_tokens"),
    ("/generate", {"text": "hi", "sampling_params": {"ignore_eos": 1}}, "sampling_params.ignore_eos"),
    ("/generate", {"input_ids": [1, True]}, "input_ids.1"),
]
