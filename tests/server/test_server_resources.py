"""Requests built to stall or exhaust the server, on the real embedded model and
its real tokenizer, served by the real ``launch_server`` process (slow): a 50 MB
body (declared or chunked), prompts far past the context, and logprob requests
asking for the whole vocabulary.  Each is refused or served at bounded cost:
a small request sent while one of them is in flight keeps within 2x its solo
latency, and the server process's RSS stays within 100 MB of its level before
the attacks."""

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.server import wait_until_healthy

pytestmark = pytest.mark.slow

CONTEXT = 1024
RSS_BOUND_BYTES = 100 << 20
HUGE = 50 << 20
SMALL = {"model": "default", "prompt": "What is the capital of France?", "max_tokens": 32, "temperature": 0,
         "ignore_eos": True}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


class ServerProcess:
    """``python -m sglang_cast.launch_server`` on a free loopback port."""

    def __init__(self, log_path: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sglang_cast.launch_server", "--speculative-algorithm", "NONE", "--port",
             str(port), "--context-length", str(CONTEXT), "--max-running-requests", "4", "--log-level", "warning",
             "--weight-format", "fp32"],  # memory is measured on the reference format, not after timing four
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_until_healthy(self.process, self.url, log_path.read_text)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120)

    def rss(self) -> int:
        return rss_bytes(self.process.pid)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    live = ServerProcess(tmp_path_factory.mktemp("server") / "server.log")
    try:
        yield live
    finally:
        live.stop()


def small_latency(server: ServerProcess) -> float:
    with server.client() as c:
        started = time.perf_counter()
        response = c.post("/v1/completions", json=SMALL)
        assert response.status_code == 200, response.text
        return time.perf_counter() - started


def latency_beside(server: ServerProcess, attack, rounds: int = 5) -> tuple[float, float, int]:
    """Median latencies of a small request sent alone and sent while one
    ``attack`` request is in flight (alternating, so both see the same background
    load on a shared machine), and the server's peak RSS meanwhile."""
    peak = [server.rss()]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], server.rss())
            time.sleep(0.005)

    watcher = threading.Thread(target=sampler)
    watcher.start()
    alone, beside = [], []
    try:
        for _ in range(rounds):
            alone.append(small_latency(server))
            failures: list[BaseException] = []

            def attacker() -> None:
                try:
                    with server.client() as c:
                        attack(c)
                except BaseException as err:  # surfaced below
                    failures.append(err)

            thread = threading.Thread(target=attacker)
            thread.start()
            time.sleep(0.05)  # the attack request is on its way
            beside.append(small_latency(server))
            thread.join(120)
            assert not failures, failures[0]
    finally:
        stop.set()
        watcher.join()
    return statistics.median(alone), statistics.median(beside), peak[0]


@pytest.fixture(scope="module")
def huge_body() -> bytes:
    return b'{"model": "default", "prompt": "' + b"a" * HUGE + b'"}'


@pytest.fixture(scope="module")
def baseline_rss(server) -> int:
    for _ in range(3):  # warm up: the first requests allocate the server's working memory
        small_latency(server)
    return server.rss()


def refused_huge_body(c, body: bytes) -> None:
    response = c.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413, response.text


def refused_huge_chunked_body(c, body: bytes) -> None:
    def chunks():
        for start in range(0, len(body), 1 << 20):
            yield body[start:start + (1 << 20)]

    try:
        response = c.post("/generate", content=chunks(), headers={"content-type": "application/json"})
    except OSError:  # the server may close the connection before the client finished sending
        return
    assert response.status_code == 413, response.text


def prompt_past_the_byte_bound(c) -> None:
    response = c.post("/v1/completions", json={"prompt": "hello world " * 60_000})  # 720 kB < the 1 MiB cap
    assert response.status_code == 400 and "context length" in response.json()["error"]["message"]


def prompt_just_inside_the_byte_bound(c) -> None:
    """Tokenized (its bytes do not rule it out), then refused for its token count."""
    response = c.post("/v1/completions", json={"prompt": "hello world " * 10_000})
    assert response.status_code == 400 and "exceeds the context length" in response.json()["error"]["message"]


def whole_vocabulary_logprobs(c) -> None:
    response = c.post("/generate", json={"text": "word " * 32, "return_logprob": True, "logprob_start_len": 0,
                                         "top_logprobs_num": 1_000_000_000, "sampling_params": {"max_new_tokens": 0}})
    assert response.status_code == 400 and response.json()["error"]["param"] == "top_logprobs_num"


def most_logprobs_allowed(c) -> None:
    response = c.post("/generate", json={"text": "word " * 32, "return_logprob": True, "logprob_start_len": 0,
                                         "top_logprobs_num": 20, "sampling_params": {"max_new_tokens": 0}})
    assert response.status_code == 200 and len(response.content) < 100_000


ATTACKS = {
    "50 MB body with Content-Length": lambda body: lambda c: refused_huge_body(c, body),
    "50 MB chunked body": lambda body: lambda c: refused_huge_chunked_body(c, body),
    "prompt past the byte bound": lambda body: prompt_past_the_byte_bound,
    "prompt just inside the byte bound": lambda body: prompt_just_inside_the_byte_bound,
    "top_logprobs_num 1e9": lambda body: whole_vocabulary_logprobs,
    "top_logprobs_num at the cap": lambda body: most_logprobs_allowed,
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_costs_a_concurrent_small_request_little(server, huge_body, baseline_rss, name):
    solo_latency, latency, peak_rss = latency_beside(server, ATTACKS[name](huge_body))
    assert latency <= 2 * solo_latency, f"{name}: {latency:.3f} s beside the attack vs {solo_latency:.3f} s solo"
    assert peak_rss - baseline_rss <= RSS_BOUND_BYTES, f"{name}: RSS grew by {(peak_rss - baseline_rss) >> 20} MiB"
    with server.client() as c:
        assert c.get("/health_generate").status_code == 200
