"""A steady load on a running server, its throughput per time window: how a served
configuration evolves while it serves (start-up calibration, the live gate switching
buckets off, explorations switching them on; docs/server.md).

Closed-loop clients (``--concurrency``) send the first turns of a JSONL dataset in a
cycle as greedy ``/v1/completions`` with a fixed ``--max-tokens`` (``ignore_eos``) for
``--duration`` seconds; every ``--window`` seconds' completed tokens give one rate.
At the end it reads the server's live gate state (``/server_info``, when the admin
routes are open) into the JSON record.

    python tools/steady_load.py --port 30000 --concurrency 4 --duration 300 --window 60 \\
        --dataset datasets/mt_bench.jsonl --json /tmp/steady.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx


def first_turns(path: Path) -> list[str]:
    prompts = [json.loads(line)["turns"][0] for line in path.read_text().splitlines() if line.strip()]
    if not prompts:
        raise SystemExit(f"--dataset: {path} holds no records with 'turns'")
    return prompts


async def client(url: str, prompts: list[str], start: int, step: int, max_tokens: int, deadline: float,
                 done: list[tuple[float, int]]) -> None:
    """One closed-loop client: prompt ``start``, ``start + step``, ...; appends (finish time, tokens)."""
    index = start
    async with httpx.AsyncClient(timeout=600) as http:
        while time.monotonic() < deadline:
            response = await http.post(f"{url}/v1/completions", json={
                "model": "default", "prompt": prompts[index % len(prompts)], "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True})
            if response.status_code != 200:
                raise SystemExit(f"a request failed: HTTP {response.status_code}: {response.text[:300]}")
            done.append((time.monotonic(), response.json()["usage"]["completion_tokens"]))
            index += step


async def run(args: argparse.Namespace) -> dict:
    url = args.base_url or f"http://{args.host}:{args.port}"
    prompts = first_turns(args.dataset)
    began = time.monotonic()
    done: list[tuple[float, int]] = []
    await asyncio.gather(*(client(url, prompts, i, args.concurrency, args.max_tokens, began + args.duration, done)
                           for i in range(args.concurrency)))
    windows = []
    for start in range(0, int(args.duration), int(args.window)):
        tokens = sum(n for t, n in done if start <= t - began < start + args.window)
        windows.append({"from_s": start, "tokens": tokens, "tokens_per_s": tokens / args.window})
    record = {"concurrency": args.concurrency, "duration_s": args.duration, "max_tokens": args.max_tokens,
              "dataset": str(args.dataset), "requests": len(done), "tokens": sum(n for _, n in done),
              "tokens_per_s": sum(n for t, n in done if t - began <= args.duration) / args.duration,
              "windows": windows}
    async with httpx.AsyncClient(timeout=60) as http:
        info = await http.get(f"{url}/server_info")
    if info.status_code == 200:
        body = info.json()
        record["live_gate"] = [{key: b.get(key) for key in ("max_batch_size", "speculate_served", "speculate_live",
                                                            "explores", "probes", "switches_on", "switches_off",
                                                            "probe_iterations", "probe_extra_ms")}
                               for b in body["cast_live_calibration"]["buckets"]]
        record["calibration"] = body["cast_profile"].get("calibration")
    return record


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=None, help="server URL (default: http://HOST:PORT)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--concurrency", type=int, default=4, help="closed-loop clients (default 4)")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load (default 300)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds per throughput window (default 60)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per completion (default 64)")
    parser.add_argument("--dataset", type=Path, default=Path("datasets/mt_bench.jsonl"))
    parser.add_argument("--json", type=Path, default=None, help="write the record here")
    args = parser.parse_args(argv)
    for name in ("concurrency", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    for name in ("duration", "window"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name}: must be > 0, got {getattr(args, name)}")
    return args


def main() -> None:
    args = parse_args()
    record = asyncio.run(run(args))
    print(json.dumps(record, indent=1))
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
