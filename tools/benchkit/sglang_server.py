"""One real SGLang 0.5.23 server on the CPU, started the way a user starts it
(``python -m sglang_cast.launch_server --backend sglang --device cpu ...``, or SGLang's own
flags through ``sglang_cast.sglang_plugin.cpu_serve``), for the end-to-end tests and
``tools/bench_sglang_cpu.py``: a subprocess in its own session, ready when
``/health_generate`` answers, its log kept in a file so a failure can say what the
server said."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

READY_TIMEOUT_S = 300.0  # start-up on a loaded 2-core machine: ~25 s quiet, ~60 s under load


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_launcher(*flags: str) -> list[str]:
    """The project's launcher on SGLang's CPU engine, with ``flags`` (after ``python -m``)."""
    return ["sglang_cast.launch_server", "--backend", "sglang", "--device", "cpu", *flags]


class SGLangServer:
    """``with SGLangServer(log, cpu_launcher("--speculative-algorithm", "CAST")) as server:
    server.post(...)``; ``command`` is what follows ``python -m`` (a free ``--port`` is added)."""

    def __init__(self, log_path: Path, command: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.argv = [sys.executable, "-m", *command, "--port", str(self.port)]
        # As a user starts it: the test run's TRITON_INTERPRET (Triton's interpreter, for the
        # plugin's unit tests) would otherwise reach SGLang's processes.
        inherited = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
        self.env = {**inherited, **(env or {})}
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> SGLangServer:
        self.log_file = self.log_path.open("w")
        self.process = subprocess.Popen(self.argv, stdout=self.log_file, stderr=subprocess.STDOUT, env=self.env,
                                        start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SGLang server exited with {self.process.returncode} before it was ready:\n"
                                   f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health_generate", timeout=30) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1.0)
        self.__exit__(None, None, None)
        raise RuntimeError(f"SGLang server not ready in {READY_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log_file.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def post(self, route: str, body: dict, timeout: float = 600.0) -> dict:
        request = urllib.request.Request(f"{self.url}{route}", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def get(self, route: str, timeout: float = 60.0) -> dict:
        with urllib.request.urlopen(f"{self.url}{route}", timeout=timeout) as response:
            return json.loads(response.read())
