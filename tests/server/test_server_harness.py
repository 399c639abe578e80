"""Shared pieces of the server tests (no tests here): a tiny engine behind the
real app factory, a real uvicorn on a free loopback port, SSE parsing and
profile files."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from test_engine import SETTINGS, VOCAB, CharTokenizer, MirrorDraft, tiny_target

from sglang_cast.cast import (BucketSettings, CostModel, PolicySettings, SamplingParams, Thresholds, TreeShape,
                              make_policy)
from sglang_cast.engine import Engine, StepOutput
from sglang_cast.profile import Profile, save_profile
from sglang_cast.server.app import create_app
from sglang_cast.server.config import LiveGateConfig, ServerConfig

MODEL = "tiny"
SHAPE = TreeShape(top_k=4, max_depth=4, num_verify_tokens=12)


class ChatCharTokenizer(CharTokenizer):
    """CharTokenizer plus a toy chat template, so the chat endpoint can be tested,
    and a vocabulary whose entries are single characters of up to 4 UTF-8 bytes
    (what `PromptEncoder`'s byte bound reads)."""

    def get_vocab(self) -> dict[str, int]:
        return {chr(0x10000 + i): i for i in range(VOCAB)}

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
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
