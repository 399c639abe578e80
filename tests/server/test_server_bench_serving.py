"""tools/bench_serving.py against the tiny-model server: every level completes
its prompts, the token counts it reports are the server's own, and a failing
server is reported as failures, not as throughput."""

from __future__ import annotations


from tools import bench_serving
from support.server import metric, serve, tiny_engine


def test_levels_complete_and_count_the_servers_tokens(tmp_path):
    with serve(tiny_engine("cast", max_batch=4)) as server:
        before = metric(server.client().get("/metrics").text, "cast_generated_tokens_total")
        out = tmp_path / "bench.jsonl"
        summaries = []
        for backend in ("sglang-oai", "sglang"):
            summaries += bench_serving.run(bench_serving.parse_args([
                "--base-url", server.url, "--backend", backend, "--num-prompts", "6", "--random-input-len", "5",
                "--random-output-len", "7", "--max-concurrency", "1", "3", "--output-file", str(out)]))
        generated = metric(server.client().get("/metrics").text, "cast_generated_tokens_total") - before
    assert [(s["backend"], s["max_concurrency"]) for s in summaries] == [
        ("sglang-oai", 1), ("sglang-oai", 3), ("sglang", 1), ("sglang", 3)]
    for summary in summaries:
        assert summary["completed"] == 6 and summary["failed"] == 0
        assert summary["total_output_tokens"] == 6 * 7  # ignore_eos: every request runs to its length
        assert summary["total_input_tokens"] > 6 * 5  # CharTokenizer: one token per character
        assert summary["median_e2e_latency_ms"] <= summary["p99_e2e_latency_ms"]
        assert 0 < summary["median_ttft_ms"] <= summary["p99_e2e_latency_ms"]
    assert generated == sum(s["total_output_tokens"] for s in summaries)
    assert len(out.read_text().splitlines()) == 4


def test_refused_requests_count_as_failures():
    with serve(tiny_engine("cast"), api_key="secret") as server:
        summary = bench_serving.run(bench_serving.parse_args([
            "--base-url", server.url, "--num-prompts", "3", "--max-concurrency", "2"]))[0]
    assert summary["completed"] == 0 and summary["failed"] == 3
    assert "HTTP 401" in summary["first_error"]


def test_steady_load_reports_each_window_and_the_live_gate(tmp_path):
    import asyncio

    from tools import steady_load

    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"turns": ["alpha"]}\n{"turns": ["beta gamma"]}\n')
    with serve(tiny_engine("cast", max_batch=4)) as server:
        before = metric(server.client().get("/metrics").text, "cast_generated_tokens_total")
        record = asyncio.run(steady_load.run(steady_load.parse_args([
            "--base-url", server.url, "--concurrency", "2", "--duration", "2", "--window", "1", "--max-tokens", "5",
            "--dataset", str(dataset)])))
        generated = metric(server.client().get("/metrics").text, "cast_generated_tokens_total") - before
    assert record["requests"] >= 2 and record["tokens"] == 5 * record["requests"] == generated
    assert [w["from_s"] for w in record["windows"]] == [0, 1]
    assert sum(w["tokens"] for w in record["windows"]) <= record["tokens"]  # the last requests end past the duration
    assert record["live_gate"][0]["max_batch_size"] >= 1 and "probe_extra_ms" in record["live_gate"][0]
