"""The HTTP server on a tiny random model, through real uvicorn on loopback:
OpenAI and SGLang endpoints, streaming, logprobs, limits and faults, auth,
metrics, client disconnects and graceful shutdown."""

import math
import threading

import httpx
import pytest

from sglang_cast.server.app import create_app
from support.server import (BAD_INPUTS, MODEL, LiveServer, StepGate, config, metric, reference, serve, sse_events,
                            tiny_engine, wait_for)
from support.tiny import CharTokenizer


@pytest.fixture(scope="module")
def live(target):
    with serve(tiny_engine("cast", target=target)) as server:
        yield server


def encode(text):
    return CharTokenizer().encode(text)


def test_completion_matches_plain_decoding_streamed_or_not(client, target):
    expected = reference(target, "hello world", 24)
    body = {"model": MODEL, "prompt": "hello world", "max_tokens": 24, "temperature": 0}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "text_completion" and data["model"] == MODEL
    assert data["choices"][0]["text"] == expected.text
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"] == {"prompt_tokens": 11, "completion_tokens": 24, "total_tokens": 35}

    with client.stream("POST", "/v1/completions",
                       json={**body, "stream": True, "stream_options": {"include_usage": True}}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.iter_lines())
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == expected.text
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == [] and events[-1]["usage"] == data["usage"]
    assert all(e["usage"] is None for e in events[:-1])


@pytest.mark.parametrize("temperature", [1e-308, 5e-7])
def test_a_temperature_too_small_to_divide_by_decodes_greedily(target, temperature):
    """Dividing the logits by 1e-308 overflows to NaN probabilities; the request is
    greedy instead (as in SGLang and vLLM), not a 500 for every request in flight.
    (A server of its own: the module's server keeps its history for the seed test.)"""
    body = {"model": MODEL, "prompt": "tiny t", "max_tokens": 12, "temperature": temperature}
    with serve(tiny_engine("cast", target=target)) as server, server.client() as c:
        response = c.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"] == reference(target, "tiny t", 12).text


def test_generate_reports_the_stop_string_that_matched(client, target):
    """Of two stop strings the one that starts first in the text ends it, and
    ``finish_reason.matched`` names it (as SGLang's does)."""
    free = reference(target, "hello there", 30)
    first, later = free.text[12:14], free.text[20:23]
    assume_first = free.text.index(first) < free.text.index(later)
    params = {"max_new_tokens": 30, "temperature": 0, "stop": [later, first]}
    meta = client.post("/generate", json={"text": "hello there", "sampling_params": params}).json()["meta_info"]
    assert assume_first and meta["finish_reason"] == {"type": "stop", "matched": first}


def test_chat_stop_string_streamed_text_equals_final_text(client, target):
    free = reference(target, "<user>tell me<assistant>", 30)
    stop = free.text[10:13]
    expected = free.text[: free.text.index(stop)]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "tell me"}], "max_completion_tokens": 30,
            "temperature": 0, "stop": [stop]}
    data = client.post("/v1/chat/completions", json=body).json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": expected}
    assert data["choices"][0]["finish_reason"] == "stop"

    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        events = sse_events(response.iter_lines())
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == expected
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_chat_without_max_tokens_fills_the_context(client):
    content = "x" * 230  # + the template's 17 characters: 247 of the 256 context tokens
    data = client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": content}], "temperature": 0}).json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"] == {"prompt_tokens": 247, "completion_tokens": 9, "total_tokens": 256}


def test_seed_reproduces_sampled_output(client):
    body = {"model": MODEL, "prompt": "dice", "max_tokens": 12, "temperature": 1.0, "seed": 7}
    first = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    assert client.post("/v1/completions", json=body).json()["choices"][0]["text"] == first


def test_generate_text_ids_and_batch(client, target):
    expected = reference(target, ["hello", "abc"], 10)
    params = {"max_new_tokens": 10, "temperature": 0}
    single = client.post("/generate", json={"text": "hello", "sampling_params": params}).json()
    assert single["text"] == expected[0].text and single["output_ids"] == expected[0].token_ids
    meta = single["meta_info"]
    assert meta["prompt_tokens"] == 5 and meta["completion_tokens"] == 10
    assert meta["finish_reason"] == {"type": "length", "length": 10} and meta["spec_verify_ct"] >= 1

    by_ids = client.post("/generate", json={"input_ids": encode("hello"), "sampling_params": params}).json()
    assert by_ids["output_ids"] == expected[0].token_ids

    batch = client.post("/generate", json={"text": ["hello", "abc"], "sampling_params": params}).json()
    assert [b["output_ids"] for b in batch] == [e.token_ids for e in expected]
    assert len({b["meta_info"]["id"] for b in batch}) == 2


def test_generate_stream_and_stop_token(client, target):
    free = reference(target, "hello", 20)
    stop_token = free.token_ids[6]
    cut = free.token_ids.index(stop_token)
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 20, "temperature": 0,
                                                 "stop_token_ids": [stop_token]}, "stream": True}
    with client.stream("POST", "/generate", json=body) as response:
        events = sse_events(response.iter_lines())
    final = events[-1]
    assert final["output_ids"] == free.token_ids[: cut + 1] and final["text"] == free.text[:cut]
    assert final["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_token}
    texts = [e["text"] for e in events]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative, as SGLang streams


def test_logprobs_follow_the_target(client):
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 8, "temperature": 0}, "return_logprob": True,
            "top_logprobs_num": 3, "return_text_in_logprobs": True}
    data = client.post("/generate", json=body).json()
    meta = data["meta_info"]
    assert meta["input_token_logprobs"] == []  # SGLang's default: output tokens only
    output = meta["output_token_logprobs"]
    assert [token for _, token, _ in output] == data["output_ids"]
    assert [text for _, _, text in output] == [CharTokenizer().decode([t]) for t in data["output_ids"]]
    for (logprob, token, _), top in zip(output, meta["output_top_logprobs"]):
        assert len(top) == 3 and top[0][1] == token  # greedy picked the most likely token
        assert math.isclose(top[0][0], logprob, abs_tol=1e-5) and sum(math.exp(t[0]) for t in top) <= 1 + 1e-6

    # Scoring prompt + output without generating gives the same numbers.
    prompt = encode("hello")
    scored = client.post("/generate", json={"input_ids": prompt + data["output_ids"], "return_logprob": True,
                                            "sampling_params": {"max_new_tokens": 0}, "logprob_start_len": 0}).json()
    assert scored["text"] == "" and scored["output_ids"] == []
    assert scored["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    inputs = scored["meta_info"]["input_token_logprobs"]
    assert inputs[0] == [None, prompt[0], None] and len(inputs) == len(prompt) + 8
    for (rescored, _, _), (generated, _, _) in zip(inputs[len(prompt):], output):
        assert math.isclose(rescored, generated, abs_tol=1e-4)


def test_select_style_scoring_request(client):
    """What ``sgl.select`` sends: a prompt-length probe, then all choices at once."""
    probe = client.post("/generate", json={"text": "pick one:", "sampling_params": {"max_new_tokens": 0}}).json()
    prompt_len = probe["meta_info"]["prompt_tokens"]
    assert prompt_len == 9
    body = {"text": ["pick one: red", "pick one: blue"], "return_logprob": True, "return_text_in_logprobs": True,
            "sampling_params": {"max_new_tokens": 0, "temperature": 0}, "logprob_start_len": prompt_len - 2}
    results = client.post("/generate", json=body).json()
    assert [len(r["meta_info"]["input_token_logprobs"]) for r in results] == [13 - 7, 14 - 7]
    assert all(r["meta_info"]["output_token_logprobs"] == [] for r in results)
    assert all(isinstance(entry[0], float) and isinstance(entry[2], str)
               for r in results for entry in r["meta_info"]["input_token_logprobs"])


@pytest.mark.parametrize("path,body,status,message", BAD_INPUTS)
def test_bad_input_gets_its_status_and_a_message_naming_the_problem(client, path, body, status, message):
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert message in error["message"]


def test_malformed_json_and_unknown_route(client):
    response = client.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
    response = client.post("/generate", content=b'{"text": "hi"}',
                           headers={"content-type": "application/x-www-form-urlencoded"})  # curl -d
    assert response.status_code == 400 and "Content-Type: application/json" in response.json()["error"]["message"]
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404 and response.json()["error"]["message"] == "Not Found"
    assert client.post("/v1/completions", json={"model": "gpt-4", "prompt": "x"}).json()["error"]["code"] == \
        "model_not_found"


def test_info_and_health_endpoints(client):
    assert client.get("/health").status_code == 200
    assert client.get("/health_generate").status_code == 200
    assert client.post("/flush_cache").status_code == 200
    models = client.get("/v1/models").json()
    assert models["data"][0]["id"] == MODEL and models["data"][0]["max_model_len"] == 256
    info = client.get("/get_model_info").json()
    assert info["model_path"] == "tiny-random-llama" and info["is_generation"] is True
    server_info = client.get("/server_info").json()
    assert server_info == client.get("/get_server_info").json() | {"internal_states": server_info["internal_states"]}
    assert server_info["policy"] == "cast" and server_info["max_running_requests"] == 4
    assert server_info["cast_profile"]["path"] is None
    profile = client.get("/cast/profile").json()
    assert profile == {"path": None, "version": None, "label": None, "source": None, "loaded_at": None,
                       "last_reload_error": None, "calibration": None}
    response = client.post("/cast/reload")
    assert response.status_code == 400 and "--cast-profile" in response.json()["error"]["message"]


def test_metrics_report_traffic_and_iterations(client):
    client.post("/v1/completions", json={"model": MODEL, "prompt": "metrics", "max_tokens": 10, "temperature": 0})
    client.post("/v1/completions", json={"model": "gpt-4", "prompt": "x"})
    text = client.get("/metrics").text
    assert metric(text, 'cast_http_requests_total{endpoint="/v1/completions",status="200"}') >= 1
    assert metric(text, 'cast_http_requests_total{endpoint="/v1/completions",status="404"}') >= 1
    assert metric(text, "cast_generated_tokens_total") >= 10
    assert metric(text, "cast_accepted_tokens_per_iteration_count") >= 1
    assert metric(text, "cast_verified_tokens_per_iteration_count") >= 1
    assert metric(text, "cast_tree_depth_per_iteration_count") >= 1
    assert metric(text, "cast_iteration_batch_size_count") >= 1
    for name in ("cast_generated_tokens_per_second", "cast_batch_size", "cast_queue_length", "cast_profile_info",
                 "cast_profile_reload_failures_total", "cast_requests_cancelled_total"):
        assert name in text


def test_api_key_guards_everything_but_health(target):
    with serve(tiny_engine("eagle2", target=target), api_key="s3cret") as server, server.client() as c:
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
        response = c.post("/v1/completions", json=body)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
        assert c.post("/v1/completions", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/v1/models").status_code == 401
        assert c.post("/generate", json={"text": "hi"}).status_code == 401
        assert c.get("/health").status_code == 200
        assert c.post("/v1/completions", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def start_stream(c: httpx.Client, max_tokens: int, prompt: str = "long"):
    """Open a streaming completion and read its first chunk; returns the open response."""
    request = c.build_request("POST", "/v1/completions", json={
        "model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True})
    response = c.send(request, stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    next(line for line in lines if line.startswith("data:"))
    return response, lines


def test_queue_full_is_503_with_retry_after(target):
    engine = tiny_engine("cast", target=target, max_batch=1)
    StepGate(engine, delay=0.05)
    with serve(engine, max_queued_requests=1) as server, server.client() as c:
        running, _ = start_stream(c, 200)
        queued = threading.Thread(target=lambda: c.post("/v1/completions", json={
            "model": MODEL, "prompt": "queued", "max_tokens": 2}))
        queued.start()
        wait_for(lambda: server.app.state.server.worker.outstanding == 2)
        response = c.post("/v1/completions", json={"model": MODEL, "prompt": "one too many", "max_tokens": 2})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert "capacity" in response.json()["error"]["message"]
        running.close()
        queued.join(30)
        assert c.post("/v1/completions", json={"model": MODEL, "prompt": "room again", "max_tokens": 2}).status_code \
            == 200


def test_client_disconnect_frees_the_slot_at_once(target):
    engine = tiny_engine("cast", target=target, max_batch=2)
    StepGate(engine, delay=0.05)
    with serve(engine) as server, server.client() as c:
        response, _ = start_stream(c, 200)
        assert len(engine.running) == 1
        response.close()
        wait_for(lambda: not engine.running, timeout=3.0)
        assert sorted(engine.scheduler.free_slots) == [0, 1]
        assert server.app.state.server.worker.outstanding == 0
        assert metric(c.get("/metrics").text, "cast_requests_cancelled_total") == 1


def test_non_streamed_client_disconnect_cancels_too(target):
    engine = tiny_engine("cast", target=target, max_batch=2)
    StepGate(engine, delay=0.05)
    with serve(engine) as server:
        def post():
            with pytest.raises(httpx.ReadTimeout), server.client(timeout=0.5) as c:
                c.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 200})

        post()  # the client gives up after 0.5 s and closes the connection
        wait_for(lambda: server.app.state.server.worker.outstanding == 0, timeout=3.0)
        assert not engine.running


def test_graceful_shutdown_lets_streams_finish(target):
    engine = tiny_engine("cast", target=target)
    StepGate(engine, delay=0.02)
    server = serve(engine).__enter__()
    with server.client() as c:
        response, lines = start_stream(c, 40)
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        rest = sse_events(lines)
        stopper.join(30)
    assert rest[-1]["choices"][0]["finish_reason"] == "length"
    assert not server.app.state.server.worker.alive and not engine.running


def test_shutdown_cancels_what_outlives_the_grace_period(target):
    engine = tiny_engine("cast", target=target)
    StepGate(engine, delay=0.05)
    server = LiveServer(create_app(engine, config()), graceful_seconds=0.3)
    with server, server.client() as c:
        start_stream(c, 200)
        server.stop()
    assert not engine.running and not engine.waiting
    assert server.app.state.server.worker.outstanding == 0
