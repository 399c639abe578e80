"""Load benchmark for a running sglang-cast (or SGLang) server, in the style of
``python -m sglang.bench_serving``: closed-loop clients at each
``--max-concurrency`` level send random-word prompts with a fixed output length
(``ignore_eos``), streaming, and the tool reports requests/s, token throughput,
end-to-end latency, TTFT and ITL percentiles per level.

    python tools/bench_serving.py --port 30000 --max-concurrency 1 8 32 \\
        --num-prompts 64 --random-input-len 32 --random-output-len 16 --max-duration 110

Each level stops early after ``--max-duration`` seconds (requests in flight
finish and count; the rest are not sent), so a slow server cannot make a run
unbounded.  ``--output-file`` appends one JSON line per level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, when run as a script

from sglang_cast.flags import int_at_least  # noqa: E402

WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact river garden music letter window morning story "
         "question answer light water paper mountain city engine history planet language").split()


@dataclass(frozen=True)
class BenchArgs:
    base_url: str
    backend: str
    model: str
    num_prompts: int
    input_words: int
    output_len: int
    concurrency_levels: tuple[int, ...]
    max_duration: float
    seed: int
    api_key: str | None
    output_file: str | None


@dataclass
class RequestResult:
    ok: bool
    latency: float = 0.0  # seconds from send to the last byte
    ttft: float = 0.0  # seconds to the first generated text
    itls: list[float] = field(default_factory=list)  # seconds between streamed chunks
    prompt_tokens: int = 0
    output_tokens: int = 0
    error: str = ""


def random_prompts(count: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]


def request_body(args: BenchArgs, prompt: str) -> tuple[str, dict]:
    if args.backend == "sglang":
        return "/generate", {"text": prompt, "stream": True, "sampling_params": {
            "max_new_tokens": args.output_len, "temperature": 0, "ignore_eos": True}}
    return "/v1/completions", {"model": args.model, "prompt": prompt, "max_tokens": args.output_len,
                               "temperature": 0, "ignore_eos": True, "stream": True,
                               "stream_options": {"include_usage": True}}


def read_counts(args: BenchArgs, data: dict, result: RequestResult) -> bool:
    """Take token counts from a stream chunk; True if the chunk carried new text."""
    if args.backend == "sglang":
        meta = data.get("meta_info", {})
        result.prompt_tokens = meta.get("prompt_tokens", result.prompt_tokens)
        result.output_tokens = meta.get("completion_tokens", result.output_tokens)
        return bool(data.get("text"))
    if data.get("usage"):
        result.prompt_tokens = data["usage"]["prompt_tokens"]
        result.output_tokens = data["usage"]["completion_tokens"]
    return any(choice.get("text") for choice in data.get("choices", []))


async def one_request(client: httpx.AsyncClient, args: BenchArgs, prompt: str) -> RequestResult:
    path, body = request_body(args, prompt)
    result = RequestResult(ok=False)
    started = last = time.perf_counter()
    try:
        async with client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                data = json.loads(line[len("data:"):])
                if "error" in data:
                    result.error = data["error"].get("message", "error in stream")
                    return result
                if read_counts(args, data, result):
                    now = time.perf_counter()
                    if result.ttft == 0.0:
                        result.ttft = now - started
                    else:
                        result.itls.append(now - last)
                    last = now
    except httpx.HTTPError as err:
        result.error = f"{type(err).__name__}: {err}"
        return result
    result.latency = time.perf_counter() - started
    result.ok = True
    return result


async def run_level(args: BenchArgs, concurrency: int, prompts: list[str]) -> tuple[list[RequestResult], float]:
    """``concurrency`` closed-loop clients share the prompt list; none starts a new
    request after ``max_duration``."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    queue = list(reversed(prompts))
    results: list[RequestResult] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=args.base_url, headers=headers, timeout=600, limits=limits) as client:
        started = time.perf_counter()

        async def worker() -> None:
            while queue and time.perf_counter() - started < args.max_duration:
                results.append(await one_request(client, args, queue.pop()))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summarize(args: BenchArgs, concurrency: int, results: list[RequestResult], duration: float) -> dict:
    done = [r for r in results if r.ok]
    ms = 1000.0
    latencies = [r.latency * ms for r in done]
    ttfts = [r.ttft * ms for r in done]
    itls = [gap * ms for r in done for gap in r.itls]
    output = sum(r.output_tokens for r in done)
    return {
        "backend": args.backend, "max_concurrency": concurrency, "completed": len(done),
        "failed": len(results) - len(done), "first_error": next((r.error for r in results if not r.ok), ""),
        "duration_s": duration, "total_input_tokens": sum(r.prompt_tokens for r in done),
        "total_output_tokens": output, "request_throughput": len(done) / duration,
        "output_throughput": output / duration,
        "mean_e2e_latency_ms": statistics.fmean(latencies) if latencies else float("nan"),
        "median_e2e_latency_ms": percentile(latencies, 50), "p99_e2e_latency_ms": percentile(latencies, 99),
        "median_ttft_ms": percentile(ttfts, 50), "p99_ttft_ms": percentile(ttfts, 99),
        "median_itl_ms": percentile(itls, 50), "p99_itl_ms": percentile(itls, 99),
    }


def print_summary(summary: dict) -> None:
    rows = [("Backend:", summary["backend"]), ("Max request concurrency:", summary["max_concurrency"]),
            ("Successful requests:", summary["completed"]), ("Failed requests:", summary["failed"]),
            ("Benchmark duration (s):", f"{summary['duration_s']:.2f}"),
            ("Total input tokens:", summary["total_input_tokens"]),
            ("Total generated tokens:", summary["total_output_tokens"]),
            ("Request throughput (req/s):", f"{summary['request_throughput']:.2f}"),
            ("Output token throughput (tok/s):", f"{summary['output_throughput']:.2f}"),
            ("Mean E2E Latency (ms):", f"{summary['mean_e2e_latency_ms']:.2f}"),
            ("Median E2E Latency (ms):", f"{summary['median_e2e_latency_ms']:.2f}"),
            ("P99 E2E Latency (ms):", f"{summary['p99_e2e_latency_ms']:.2f}"),
            ("Median TTFT (ms):", f"{summary['median_ttft_ms']:.2f}"),
            ("P99 TTFT (ms):", f"{summary['p99_ttft_ms']:.2f}"),
            ("Median ITL (ms):", f"{summary['median_itl_ms']:.2f}"),
            ("P99 ITL (ms):", f"{summary['p99_itl_ms']:.2f}")]
    print("\n{:=^50}".format(" Serving Benchmark Result "))
    for label, value in rows:
        print(f"{label:<40} {value:<10}")
    if summary["first_error"]:
        print(f"{'First error:':<40} {summary['first_error']}")
    print("=" * 50)


def run(args: BenchArgs) -> list[dict]:
    prompts = random_prompts(args.num_prompts, args.input_words, args.seed)
    summaries = []
    for concurrency in args.concurrency_levels:
        results, duration = asyncio.run(run_level(args, concurrency, prompts))
        summary = summarize(args, concurrency, results, duration)
        print_summary(summary)
        summaries.append(summary)
        if args.output_file:
            with open(args.output_file, "a") as out:
                out.write(json.dumps(summary) + "\n")
    return summaries


def parse_args(argv: list[str] | None = None) -> BenchArgs:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sglang", "sglang-oai"), default="sglang-oai",
                        help="sglang: native /generate; sglang-oai: /v1/completions (default)")
    parser.add_argument("--base-url", default=None, help="server URL (default: http://HOST:PORT)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model", default="default", help="model name sent to /v1/completions (default: default)")
    parser.add_argument("--num-prompts", type=int_at_least(1), default=64, help="prompts per level (default: 64)")
    parser.add_argument("--random-input-len", type=int_at_least(1), default=32,
                        help="words per random prompt (default: 32)")
    parser.add_argument("--random-output-len", type=int_at_least(1), default=16,
                        help="tokens generated per request, EOS ignored (default: 16)")
    parser.add_argument("--max-concurrency", type=int_at_least(1), nargs="+", default=[1, 8, 32],
                        help="closed-loop client counts, one level each (default: 1 8 32)")
    parser.add_argument("--max-duration", type=float, default=110.0,
                        help="seconds after which a level sends no new request (default: 110)")
    parser.add_argument("--seed", type=int, default=42, help="prompt sampling seed (default: 42)")
    parser.add_argument("--api-key", default=None, help="sent as 'Authorization: Bearer KEY'")
    parser.add_argument("--output-file", default=None, help="append one JSON line per level")
    ns = parser.parse_args(argv)
    if ns.max_duration <= 0:
        parser.error(f"--max-duration must be > 0, got {ns.max_duration}")
    return BenchArgs(base_url=ns.base_url or f"http://{ns.host}:{ns.port}", backend=ns.backend, model=ns.model,
                     num_prompts=ns.num_prompts, input_words=ns.random_input_len,
                     output_len=ns.random_output_len, concurrency_levels=tuple(ns.max_concurrency),
                     max_duration=ns.max_duration, seed=ns.seed, api_key=ns.api_key, output_file=ns.output_file)


def main(argv: list[str] | None = None) -> int:
    summaries = run(parse_args(argv))
    return 0 if all(s["failed"] == 0 for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
