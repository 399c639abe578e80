"""The server under pressure, on a tiny random model through real uvicorn:
concurrent clients get exactly what each would get alone, dropped clients free
their slots, profile reloads (good and bad files) under steady load lose no
request, and a table of crafted bad inputs gets 4xx answers only, leaving the
server healthy.  The resource cases on the real model are in
test_server_resources.py."""

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_cast.profile import load_profile
from support.server import (BAD_INPUTS, LOOSE_TYPES, MODEL, SURROGATES, StepGate, reference, serve, sse_events,
                            tiny_engine, wait_for, write_profile)

PROMPTS = [f"prompt number {i}: {'abcdefgh'[i % 8] * (i % 5 + 1)}" for i in range(16)]


def complete(server, prompt: str, max_tokens: int, stream: bool) -> str:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    with server.client() as c:
        if not stream:
            response = c.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["text"]
        with c.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            events = sse_events(response.iter_lines())
        return "".join(e["choices"][0]["text"] for e in events)


def test_concurrent_clients_get_what_each_gets_alone(target):
    expected = {p: r.text for p, r in zip(PROMPTS, reference(target, PROMPTS, 20))}
    with serve(tiny_engine("cast", target=target, max_batch=4)) as server:
        alone = {p: complete(server, p, 20, stream=False) for p in PROMPTS[:4]}
        with ThreadPoolExecutor(16) as pool:  # 16 clients on 4 slots: batching and queueing both happen
            futures = {(p, s): pool.submit(complete, server, p, 20, s) for p in PROMPTS for s in (False, True)}
            together = {key: future.result(timeout=120) for key, future in futures.items()}
    assert alone == {p: expected[p] for p in PROMPTS[:4]}
    assert together == {(p, s): expected[p] for p, s in together}


def test_dropped_streams_free_their_slots(target):
    engine = tiny_engine("cast", target=target, max_batch=4)
    StepGate(engine, delay=0.02)
    with serve(engine, max_queued_requests=8) as server, server.client() as c:
        responses = []
        for i in range(8):  # 4 running, 4 queued
            request = c.build_request("POST", "/v1/completions", json={
                "model": MODEL, "prompt": f"drop {i}", "max_tokens": 200, "stream": True})
            responses.append(c.send(request, stream=True))
        wait_for(lambda: len(engine.running) == 4 and len(engine.waiting) == 4)
        for response in responses:
            response.close()
        wait_for(lambda: not engine.running and not engine.waiting, timeout=3.0)
        assert sorted(engine.scheduler.free_slots) == [0, 1, 2, 3]
        assert server.app.state.server.worker.outstanding == 0
        assert c.post("/v1/completions", json={"model": MODEL, "prompt": "after", "max_tokens": 4}).status_code == 200


def bad_profile_versions(valid: str) -> list[tuple[str, bytes | None]]:
    """Files a careless or broken writer could leave behind (``None``: deleted)."""
    return [
        ("truncated", valid[: len(valid) // 2].encode()),
        ("negative cost", valid.replace("- - - 5.0", "- - - -5.0").encode()),
        ("NaN threshold", valid.replace("c1: 1.0", "c1: .nan", 1).encode()),
        ("binary", bytes(range(256)) * 4),
        ("deleted", None),
    ]


def test_reloads_under_load_lose_no_request(tmp_path, target):
    path = write_profile(tmp_path / "profile.yaml", c1=1.0)
    valid = path.read_text()
    loaded = load_profile(path)
    engine = tiny_engine("cast", settings=loaded.profile.settings, target=target)
    expected = {p: r.text for p, r in zip(PROMPTS[:6], reference(target, PROMPTS[:6], 16))}
    stop = threading.Event()
    outcomes: list[tuple[str, str]] = []

    def client_loop(prompt: str) -> None:
        while not stop.is_set():
            outcomes.append((prompt, complete(server, prompt, 16, stream=len(outcomes) % 2 == 0)))

    # A long poll interval: the test drives every reload through POST /cast/reload.
    with serve(engine, profile=loaded, profile_poll_seconds=600) as server, server.client() as c:
        loops = [threading.Thread(target=client_loop, args=(p,)) for p in expected]
        for loop in loops:
            loop.start()
        try:
            for step, (name, content) in enumerate(bad_profile_versions(valid)):
                c1 = 2.0 + step
                write_profile(path, c1=c1)
                assert c.post("/cast/reload").json()["reloaded"] is True
                version = c.get("/cast/profile").json()["version"]
                if content is None:
                    path.unlink()
                else:
                    path.write_bytes(content)
                response = c.post("/cast/reload")
                assert response.status_code == 400, (name, response.text)
                status = c.get("/cast/profile").json()
                assert status["version"] == version and status["last_reload_error"], name
                assert engine.policy.settings.buckets[0].thresholds.c1 == c1, name
        finally:
            stop.set()
            for loop in loops:
                loop.join(120)
    assert len(outcomes) >= len(expected)
    assert all(text == expected[prompt] for prompt, text in outcomes)


def crafted_bad_requests() -> list[tuple[str, dict[str, str], bytes]]:
    """(path, headers, raw body): the API tables plus malformed bodies."""
    as_json = {"content-type": "application/json"}
    cases = [(path, as_json, json.dumps(body).encode()) for path, body, *_ in BAD_INPUTS + SURROGATES + LOOSE_TYPES]
    cases += [
        ("/v1/completions", as_json, b'{"model": "tiny", "prompt": "\xff\xfe"}'),  # not UTF-8
        ("/v1/completions", as_json, b'{"prompt": "x"' + b" " * 10),  # cut short
        ("/v1/completions", as_json, b"[" * 5000 + b"]" * 5000),  # deep nesting
        ("/v1/completions", as_json, b'{"prompt": "hi", "max_tokens": 1e400}'),
        ("/v1/completions", as_json, b'{"prompt": "hi", "max_tokens": 1' + b"0" * 5000 + b"}"),
        ("/v1/chat/completions", as_json, b'{"messages": [{"content": "no role"}], "max_tokens": 2}'),
        ("/generate", as_json, b'{"text": "hi", "top_logprobs_num": 1000000000, "return_logprob": true}'),
        ("/generate", as_json, json.dumps({"text": ["a"] * 100}).encode()),
        ("/generate", as_json, json.dumps({"input_ids": [0] * 100_000}).encode()),
        ("/generate", as_json, json.dumps({"text": "x" * 100_000}).encode()),
        ("/generate", {"content-type": "text/plain"}, b"hello"),
        ("/generate", as_json, b"null"),
    ]
    return cases


def test_crafted_bad_requests_get_4xx_and_leave_the_server_healthy(target):
    engine = tiny_engine("cast", target=target)
    with serve(engine, max_request_bytes=200_000) as server, server.client() as c:
        statuses = {}
        for path, headers, body in crafted_bad_requests():
            response = c.post(path, content=body, headers=headers)
            statuses[(path, body[:60])] = response.status_code
            assert set(response.json().get("error", {})) == {"message", "type", "param", "code"}, \
                (path, body[:60], response.text[:200])
        assert {key: s for key, s in statuses.items() if not 400 <= s < 500} == {}
        assert c.post("/v1/completions", content=os.urandom(300_000)).status_code == 413
        assert c.get("/health_generate").status_code == 200
        text = complete(server, "still fine", 12, stream=True)
    assert text == reference(target, "still fine", 12).text


def test_disconnect_during_the_upload_leaves_the_server_healthy(target):
    with serve(tiny_engine("cast", target=target)) as server:
        def stalled_upload():
            yield b'{"model": "tiny", "prompt": "'
            raise ConnectionResetError("client gave up mid-body")

        with server.client() as c, pytest.raises(ConnectionResetError):
            c.post("/v1/completions", content=stalled_upload(), headers={"content-type": "application/json"})
        assert complete(server, "next", 4, stream=False)
        assert server.app.state.server.worker.outstanding == 0
