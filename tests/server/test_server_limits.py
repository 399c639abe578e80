"""What a request may not do, on a tiny random model through real uvicorn: bodies
over the cap, prompts that cannot fit (refused before tokenizing), lone
surrogates, loose types, unbounded logprobs, batches that can never fit; plus
SGLang's model-name rule and the admin key."""

import json
import threading

import httpx
import pytest

from sglang_cast.server.access import required_key
from sglang_cast.server.config import default_max_request_bytes
from support.server import LOOSE_TYPES, MODEL, SURROGATES, StepGate, reference, serve, tiny_engine, wait_for


@pytest.fixture(scope="module")
def live():
    with serve(tiny_engine("cast"), max_request_bytes=4096, max_queued_requests=2, max_top_logprobs=5) as server:
        yield server


def post_json(c: httpx.Client, path: str, body) -> httpx.Response:
    """JSON with ``\\uXXXX`` escapes, so a lone surrogate travels as JSON allows."""
    return c.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


def assert_error(response: httpx.Response, status: int, param: str | None, *fragments: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param, error
    for fragment in fragments:
        assert fragment in error["message"], error


def test_default_max_request_bytes_follows_the_context_length():
    assert default_max_request_bytes(256) == 1 << 20
    assert default_max_request_bytes(2048) == 2 << 20
    assert default_max_request_bytes(32768) == 32 << 20


def test_body_over_the_cap_is_413_whether_declared_or_streamed(client):
    big = {"model": MODEL, "prompt": "x" * 5000}
    assert_error(post_json(client, "/v1/completions", big), 413, None, "4096 bytes", "--max-request-bytes")

    def chunks():  # no Content-Length: the server must stop reading at the cap
        for _ in range(100):
            yield b"x" * 1000

    response = client.post("/generate", content=chunks(), headers={"content-type": "application/json"})
    assert_error(response, 413, None, "4096 bytes")
    ok = post_json(client, "/v1/completions", {"model": MODEL, "prompt": "y" * 200, "max_tokens": 2})
    assert ok.status_code == 200, ok.text


def test_prompt_that_cannot_fit_is_refused_before_tokenizing(live, client):
    encoder = live.app.state.server.encoder
    calls = []
    encode = encoder.tokenizer.encode
    encoder.tokenizer.encode = lambda text: calls.append(len(text)) or encode(text)
    try:
        # 1030 one-byte characters: at least 1030 / 4 = 258 tokens > the 256-token context.
        response = post_json(client, "/v1/completions", {"model": MODEL, "prompt": "x" * 1030})
        assert_error(response, 400, "prompt", "1030 bytes", "at least 258 tokens", "context length 256")
        response = post_json(client, "/generate", {"text": ["ok", "x" * 1030]})
        assert_error(response, 400, "text", "1030 bytes")
        assert calls == [2]  # only the short prompt of the batch was tokenized
    finally:
        encoder.tokenizer.encode = encode


@pytest.mark.parametrize("path,body,param", SURROGATES)
def test_lone_surrogates_are_refused_naming_the_field(client, path, body, param):
    assert_error(post_json(client, path, body), 400, param, "lone surrogate")


@pytest.mark.parametrize("path,body,param", LOOSE_TYPES)
def test_types_are_strict(client, path, body, param):
    assert_error(post_json(client, path, body), 400, param)


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "hi", "seed": 2 ** 70}, "seed"),
    ("/v1/completions", {"prompt": "hi", "seed": -(2 ** 63) - 1}, "seed"),
    ("/generate", {"text": "hi", "sampling_params": {"sampling_seed": 2 ** 64}}, "sampling_params.sampling_seed"),
])
def test_seed_out_of_range_names_the_field_and_the_range(client, path, body, param):
    assert_error(post_json(client, path, body), 400, param, "[-9223372036854775808, 18446744073709551615]")


def test_seed_at_the_range_ends_is_served(client):
    for seed in (-(2 ** 63), 2 ** 64 - 1):
        response = post_json(client, "/v1/completions", {"prompt": "hi", "seed": seed, "max_tokens": 2})
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("path,body,param,fragment", [
    ("/v1/completions", {"prompt": "hi", "presence_penalty": 0.5}, "presence_penalty", "not supported"),
    ("/generate", {"text": "hi", "sampling_params": {"regex": "a+"}}, "sampling_params.regex", "not supported"),
    ("/generate", {"text": "hi", "sampling_params": {"n": 2}}, "sampling_params.n", "only n=1"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 0, "n": 2}}, "sampling_params.n", "only n=1"),
    ("/generate", {"text": "hi", "image_data": "x.png"}, "image_data", "not supported"),
])
def test_unsupported_options_name_their_field(client, path, body, param, fragment):
    """Generating and scoring prompts alike (a scoring one skipped the n check once)."""
    assert_error(post_json(client, path, body), 400, param, fragment)


def test_too_many_stop_strings_or_ids_are_refused(client):
    assert_error(post_json(client, "/v1/completions", {"prompt": "hi", "stop": ["a"] * 17}), 400, "stop", "16")
    body = {"text": "hi", "sampling_params": {"stop_token_ids": list(range(257))}}
    assert_error(post_json(client, "/generate", body), 400, "sampling_params.stop_token_ids", "256")


def test_top_logprobs_num_is_capped(client):
    body = {"text": "hello", "return_logprob": True, "logprob_start_len": 0, "sampling_params": {"max_new_tokens": 0}}
    response = post_json(client, "/generate", {**body, "top_logprobs_num": 1_000_000_000})
    assert_error(response, 400, "top_logprobs_num", "at most 5", "--max-logprobs")
    response = post_json(client, "/generate", {**body, "top_logprobs_num": [5, 6], "text": ["a", "b"]})
    assert_error(response, 400, "top_logprobs_num", "got 6")
    tops = post_json(client, "/generate", {**body, "top_logprobs_num": 5}).json()["meta_info"]["input_top_logprobs"]
    assert tops[0] is None and all(len(top) == 5 for top in tops[1:])


def test_batch_that_can_never_fit_is_400_not_503(client):
    # 4 batch slots + 2 queue places: 7 prompts can never be taken at once.
    assert_error(post_json(client, "/generate", {"text": ["a"] * 7}), 400, "text", "batch of 7", "at most 6")
    assert_error(post_json(client, "/generate", {"input_ids": [[1]] * 7}), 400, "input_ids", "batch of 7")
    fits = post_json(client, "/generate", {"text": ["a"] * 6, "sampling_params": {"max_new_tokens": 1}})
    assert fits.status_code == 200 and len(fits.json()) == 6


def test_empty_prompt_names_its_field(client):
    assert_error(post_json(client, "/v1/completions", {"prompt": ""}), 400, "prompt", "at least one token")
    assert_error(post_json(client, "/generate", {"input_ids": []}), 400, "input_ids", "at least one token")


def test_default_omitted_and_served_model_names_all_serve_the_model(live, client):
    expected = reference(live.app.state.server.engine.target, "same", 6).text
    for extra in ({"model": "default"}, {}, {"model": MODEL}):
        data = post_json(client, "/v1/completions",
                         {**extra, "prompt": "same", "max_tokens": 6, "temperature": 0}).json()
        assert data["choices"][0]["text"] == expected and data["model"] == MODEL
        chat = post_json(client, "/v1/chat/completions",
                         {**extra, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert chat.status_code == 200, chat.text
    assert_error(post_json(client, "/v1/completions", {"model": "gpt-4", "prompt": "x"}), 404, "model", "gpt-4")
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [MODEL]


@pytest.mark.parametrize("path,api_key,admin_api_key,expected", [
    ("/v1/completions", None, None, None), ("/cast/reload", None, None, None),
    ("/v1/completions", "user", None, "user"), ("/server_info", "user", None, "user"),
    ("/v1/completions", None, "admin", None), ("/flush_cache", None, "admin", "admin"),
    ("/v1/completions", "user", "admin", "user"), ("/cast/profile", "user", "admin", "admin"),
    ("/health", "user", "admin", None), ("/metrics", "user", "admin", None),
])
def test_required_key_follows_sglangs_rules(path, api_key, admin_api_key, expected):
    assert required_key(path, api_key, admin_api_key) == expected


def status_with(c: httpx.Client, method: str, path: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 1} if path == "/v1/completions" else None
    return c.request(method, path, json=body, headers=headers).status_code


ADMIN_ROUTES = [("POST", "/cast/reload"), ("GET", "/cast/profile"), ("POST", "/flush_cache"),
                ("GET", "/server_info"), ("GET", "/get_server_info")]


def test_admin_key_guards_admin_routes_and_only_them():
    with serve(tiny_engine("eagle2"), api_key="user", admin_api_key="admin") as server, server.client() as c:
        for method, path in ADMIN_ROUTES:
            assert status_with(c, method, path, None) == 401
            assert status_with(c, method, path, "user") == 401  # the user key opens no admin route
            assert status_with(c, method, path, "admin") != 401
        assert status_with(c, "POST", "/cast/reload", "admin") == 400  # past auth: no profile to reload
        assert status_with(c, "POST", "/v1/completions", "user") == 200
        assert status_with(c, "POST", "/v1/completions", "admin") == 401
        assert "admin API key" in c.get("/server_info").json()["error"]["message"]
        assert status_with(c, "GET", "/health", None) == 200


def test_without_an_admin_key_admin_routes_need_the_api_key():
    with serve(tiny_engine("eagle2"), api_key="user") as server, server.client() as c:
        for method, path in ADMIN_ROUTES:
            assert status_with(c, method, path, None) == 401
            assert status_with(c, method, path, "user") != 401


def test_admin_key_alone_leaves_serving_routes_open():
    with serve(tiny_engine("eagle2"), admin_api_key="admin") as server, server.client() as c:
        assert status_with(c, "POST", "/v1/completions", None) == 200
        assert status_with(c, "GET", "/server_info", None) == 401
        assert status_with(c, "GET", "/server_info", "admin") == 200


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "x" * 300, "max_tokens": 8}, "prompt"),
    ("/v1/completions", {"prompt": [1] * 300, "max_tokens": 8}, "prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 260}]}, "messages"),
    ("/generate", {"text": "x" * 300, "sampling_params": {"max_new_tokens": 0}}, "text"),
    ("/generate", {"input_ids": [[1] * 300], "sampling_params": {"max_new_tokens": 4}}, "input_ids"),
    ("/generate", {"text": "hello", "return_logprob": True, "logprob_start_len": 9}, "logprob_start_len"),
])
def test_context_refusals_name_the_field(client, path, body, param):
    assert_error(post_json(client, path, body), 400, param)


def test_tokenizer_queue_is_bounded(live, client):
    """With the tokenizer thread stuck, at most max_pending (6) prompts wait for it;
    the next is a 503 to retry, and the queue drains once the thread is free."""
    encoder = live.app.state.server.encoder
    gate = threading.Event()
    encode = encoder.tokenizer.encode
    encoder.tokenizer.encode = lambda text: gate.wait(30) and encode(text)
    results = []

    def send(i):
        with live.client() as c:
            results.append(post_json(c, "/v1/completions", {"prompt": f"p{i}", "max_tokens": 1}))

    waiting = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    try:
        for thread in waiting:
            thread.start()
        wait_for(lambda: encoder.pending == 6)
        response = post_json(client, "/v1/completions", {"prompt": "one more", "max_tokens": 1})
        assert_error(response, 503, None, "waiting to be tokenized")
        assert response.headers["retry-after"] == "1"
    finally:
        gate.set()
        for thread in waiting:
            if thread.ident is not None:  # started
                thread.join(30)
        encoder.tokenizer.encode = encode
    assert [r.status_code for r in results] == [200] * 6 and encoder.pending == 0


def test_requests_past_the_in_flight_cap_get_503_before_their_body_is_read():
    engine = tiny_engine("cast", max_batch=2)
    gate = StepGate(engine)
    gate.hold()
    with serve(engine, max_in_flight_requests=2) as server, server.client() as c:
        streams = []
        try:
            for i in range(2):
                request = c.build_request("POST", "/v1/completions", json={
                    "model": MODEL, "prompt": f"held {i}", "max_tokens": 4, "stream": True})
                streams.append(c.send(request, stream=True))
            response = post_json(c, "/v1/completions", {"prompt": "x" * 10_000})  # too long, were it read
            assert_error(response, 503, None, "2 requests in flight")
            assert response.headers["retry-after"] == "1"
            assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200
        finally:
            gate.release()
            for stream in streams:
                stream.read()
                stream.close()
        assert post_json(c, "/v1/completions", {"prompt": "room again", "max_tokens": 2}).status_code == 200


def test_token_id_prompt_longer_than_the_context_is_refused_by_its_length(client):
    response = post_json(client, "/generate", {"input_ids": [10 ** 9] * 300})  # checked before the ids
    assert_error(response, 400, "input_ids", "300 tokens exceed the context length 256")


def test_chat_that_cannot_fit_is_refused_before_the_template_renders():
    with serve(tiny_engine("cast")) as server, server.client() as c:
        encoder = server.app.state.server.encoder
        render = encoder._render_chat
        calls = []
        encoder._render_chat = lambda messages: calls.append(len(messages)) or render(messages)
        many = [{"role": "user", "content": ""}] * 257
        assert_error(post_json(c, "/v1/chat/completions", {"messages": many}), 400, "messages",
                     "257 messages cannot fit the context length 256")
        long = [{"role": "user", "content": "x" * 600}, {"role": "user", "content": "y" * 600}]
        assert_error(post_json(c, "/v1/chat/completions", {"messages": long}), 400, "messages", "1200 bytes")
        assert calls == []
        fits = post_json(c, "/v1/chat/completions", {"messages": many[:10], "max_tokens": 2})
        assert fits.status_code == 200 and calls == [10]
