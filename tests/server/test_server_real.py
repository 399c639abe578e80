"""The server on the real embedded SmolLM2-135M-Instruct (slow): the official
OpenAI client, a real SGLang frontend program through ``sgl.RuntimeEndpoint``,
16 concurrent clients whose greedy outputs must equal plain decoding of each
prompt alone, and SIGTERM on the real ``launch_server`` process."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import httpx
import openai
import pytest
import torch

from sglang_cast.cast import CostModel, PolicySettings, SamplingParams, TreeShape, make_policy
from sglang_cast.engine import Engine
from sglang_cast.engine.build import default_draft_path
from sglang_cast.models import load_draft, load_target
from sglang_cast.server.app import create_app
from sglang_cast.server.config import ServerConfig
from support.server import LiveServer, wait_until_healthy
from support.models import random_head

pytestmark = pytest.mark.slow

NAME = "SmolLM2-135M-Instruct"
# Small trees keep these tests inside the CI budget; losslessness does not depend on the tree size.
SETTINGS = PolicySettings.single(CostModel.linear(per_token_ms=2.0, fixed_ms=40.0, draft_ratio=0.15),
                                 shape=TreeShape(top_k=2, max_depth=3, num_verify_tokens=6))
QUESTIONS = [
    "What is the capital of France?", "Name three primary colours.", "What is 12 times 12?",
    "Give one tip for learning to code.", "What does a bee make?", "Translate 'thank you' into French.",
    "Why do leaves fall in autumn?", "What is the boiling point of water?", "Name a planet with rings.",
    "Write a two-word slogan for tea.", "What is the opposite of hot?", "Who wrote Hamlet?",
    "How many legs does a spider have?", "What colour is the sky on a clear day?", "Spell 'cat' backwards.",
    "What is the largest ocean?",
]


@pytest.fixture(scope="module")
def model():
    target, config, tokenizer = load_target(None, "cpu", torch.float32)
    path = default_draft_path(None)
    draft = load_draft(path, target, "cpu", torch.float32) if path is not None else random_head(target, config)
    return target, config, tokenizer, draft


def engine(model, policy, max_batch):
    target, config, tokenizer, draft = model
    draft = draft if policy != "vanilla" else None
    return Engine(target, tokenizer, draft, make_policy(policy, SETTINGS), max_batch_size=max_batch,
                  context_length=1024, eos_token_ids=config.eos_token_ids)


@pytest.fixture(scope="module")
def live(model):
    app = create_app(engine(model, "cast", max_batch=8), ServerConfig(served_model_name=NAME, model_path=NAME))
    with LiveServer(app) as server:
        yield server


def chat_prompt(tokenizer, question):
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=False)


def test_openai_client_completions_and_chat(live):
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == [NAME]

    completion = client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=6,
                                           temperature=0)
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    streamed = client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=6,
                                         temperature=0, stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == completion.choices[0].text
    assert "Paris" in completion.choices[0].text

    messages = [{"role": "user", "content": "What is 2 + 2? Answer with a number."}]
    chat = client.chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0)
    answer = chat.choices[0].message.content
    assert chat.choices[0].message.role == "assistant" and "4" in answer
    chunks = list(client.chat.completions.create(model=NAME, messages=messages, max_completion_tokens=12,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert chunks[-1].usage.total_tokens == chat.usage.total_tokens

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model=NAME, messages=messages, max_tokens=4, temperature=7)


def test_sglang_frontend_program(live):
    import sglang as sgl  # installed by run.sh (requirements/sglang-frontend.txt); slow to import

    @sgl.function
    def capital_quiz(s, country):
        s += f"The capital of {country} is"
        s += sgl.select("city", choices=[" Paris", " London", " a banana"])
        s += "." + sgl.gen("more", max_tokens=10, temperature=0, stop="\n\n")

    @sgl.function
    def chat(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=12, temperature=0))

    backend = sgl.RuntimeEndpoint(live.url, chat_template_name="chatml")
    state = capital_quiz.run(country="France", backend=backend)
    assert state["city"] == " Paris"
    scores = state.get_meta_info("city")["normalized_prompt_logprobs"]
    assert scores[0] == max(scores) and all(score < 0 for score in scores)
    with httpx.Client(base_url=live.url, timeout=120) as c:
        direct = c.post("/generate", json={"text": "The capital of France is Paris.", "sampling_params": {
            "max_new_tokens": 10, "temperature": 0, "stop": "\n\n"}}).json()
    assert state["more"] == direct["text"]

    answer = chat.run(question="What is 2 + 2? Answer with a number.", backend=backend)["answer"]
    streamed = chat.run(question="What is 2 + 2? Answer with a number.", backend=backend, stream=True)
    assert "".join(streamed.text_iter("answer")) == answer and "4" in answer


def test_sixteen_concurrent_clients_match_plain_decoding_alone(live, model):
    tokenizer = model[2]
    prompts = [chat_prompt(tokenizer, q) for q in QUESTIONS]
    lengths = [8 + i for i in range(len(prompts))]  # they finish, and new ones join, at different times
    outputs: dict[int, list[int]] = {}

    def client(i):
        with httpx.Client(base_url=live.url, timeout=600) as c:
            response = c.post("/generate", json={"text": prompts[i], "sampling_params": {
                "max_new_tokens": lengths[i], "temperature": 0}})
        assert response.status_code == 200, response.text
        outputs[i] = response.json()["output_ids"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert sorted(outputs) == list(range(len(prompts)))

    alone = engine(model, "vanilla", max_batch=1)
    for i, prompt in enumerate(prompts):
        expected = alone.generate([prompt], SamplingParams(max_new_tokens=lengths[i]))[0].token_ids
        assert outputs[i] == expected, f"client {i} diverged from plain decoding"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sigterm_lets_the_open_stream_finish_then_exits(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "sglang_cast.launch_server", "--speculative-algorithm", "NONE", "--port", str(port),
         "--context-length", "512", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_until_healthy(server, url, server.stdout.read)

        events = []
        with httpx.Client(base_url=url, timeout=120) as c, c.stream("POST", "/v1/completions", json={
                "model": NAME, "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0,
                "stream": True}) as response:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                if not events:
                    server.send_signal(signal.SIGTERM)  # mid-stream
                if line == "data: [DONE]":
                    break
                events.append(json.loads(line[len("data:"):]))
        assert events[-1]["choices"][0]["finish_reason"] == "length"
        assert "".join(e["choices"][0]["text"] for e in events)
        # uvicorn re-raises the signal once its graceful shutdown is done.
        assert server.wait(60) in (0, -signal.SIGTERM)
        assert "Traceback" not in server.stdout.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
