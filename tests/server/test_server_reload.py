"""Profile hot-reload while requests stream: valid files are swapped in between
iterations, invalid ones are rejected with a reason, and no request is lost or
changed (greedy decoding is lossless under any profile)."""

import threading


from sglang_cast.cast import TreeShape
from sglang_cast.profile import load_profile
from sglang_cast.server.config import ShapeOverride
from support.server import MODEL, StepGate, metric, reference, serve, sse_events, tiny_engine, wait_for, write_profile

PROMPTS = ["alpha", "beta", "gamma", "delta"]


def profiled_engine(target, path, shape: ShapeOverride | None = None):
    loaded = load_profile(path)
    settings = (shape or ShapeOverride()).apply(loaded.profile.settings)
    engine = tiny_engine("cast", settings=settings, target=target)
    return engine, loaded


def stream_all(server, prompts, max_tokens, results):
    def run(prompt):
        with server.client() as c, c.stream("POST", "/v1/completions", json={
                "model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}) as r:
            events = sse_events(r.iter_lines())
        results[prompt] = ("".join(e["choices"][0]["text"] for e in events),
                           events[-1]["choices"][0]["finish_reason"])

    threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    return threads


def test_reload_while_streaming_keeps_every_request_intact(tmp_path, target):
    path = write_profile(tmp_path / "profile.yaml", c1=1.0)
    engine, loaded = profiled_engine(target, path)
    gate = StepGate(engine, delay=0.01)
    expected = {p: r.text for p, r in zip(PROMPTS, reference(target, PROMPTS, 60))}
    with serve(engine, profile=loaded, profile_poll_seconds=0.05) as server, server.client() as c:
        first = c.get("/cast/profile").json()
        assert first["path"] == str(path) and first["version"] == loaded.version and first["label"] == "test"
        assert first["source"] == "measured" and first["loaded_at"] and first["last_reload_error"] is None

        results = {}
        gate.hold()
        threads = stream_all(server, PROMPTS, 60, results)
        wait_for(lambda: len(engine.waiting) == len(PROMPTS))
        gate.release(steps=3)  # prefill all four together, two iterations, then hold them mid-stream
        wait_for(lambda: gate.held)
        assert len(engine.running) == len(PROMPTS) and all(len(r.output_ids) >= 3 for r in engine.running)

        write_profile(path, c1=2.5)
        second = wait_for(lambda: (s := c.get("/cast/profile").json())["version"] != first["version"] and s)
        assert second["last_reload_error"] is None
        assert engine.policy.settings.buckets[0].thresholds.c1 == 2.5

        broken_file = tmp_path / "broken.yaml"  # swapped in whole, so the watcher sees one bad version
        broken_file.write_text("schema: 1\nlabel: [unclosed\n")
        broken_file.replace(path)
        broken = wait_for(lambda: (s := c.get("/cast/profile").json())["last_reload_error"] and s)
        assert "not valid YAML" in broken["last_reload_error"]
        assert broken["version"] == second["version"]  # the old profile stays active
        assert engine.policy.settings.buckets[0].thresholds.c1 == 2.5
        assert server.app.state.server.worker.outstanding == len(PROMPTS)

        gate.release()
        for thread in threads:
            thread.join(60)
        assert results == {p: (expected[p], "length") for p in PROMPTS}
        text = c.get("/metrics").text
        assert metric(text, "cast_profile_reload_failures_total") == 1
        assert metric(text, "cast_profile_reloads_total") == 1
        assert f'version="{second["version"]}"' in text


def test_forced_reload_reports_rejections_and_applies_fixes(tmp_path, target, caplog):
    path = write_profile(tmp_path / "profile.yaml", c1=1.0)
    engine, loaded = profiled_engine(target, path, ShapeOverride(top_k=2))
    # A long poll interval: only POST /cast/reload looks at the file in this test.
    with serve(engine, profile=loaded, profile_poll_seconds=600, shape_override=ShapeOverride(top_k=2)) as server, \
            server.client() as c:
        assert c.post("/cast/reload").json() == {"reloaded": False, "profile": c.get("/cast/profile").json()}

        path.write_text(path.read_text().replace("schema: 1", "schema: 7"))
        response = c.post("/cast/reload")
        assert response.status_code == 400
        assert "profile.schema: expected 1, got 7" in response.json()["error"]["message"]
        assert c.get("/cast/profile").json()["last_reload_error"] == response.json()["error"]["message"]
        assert "profile reload rejected, the previous profile stays active: profile.schema" in caplog.text

        write_profile(path, c1=3.0, shape=TreeShape(top_k=10, max_depth=6, num_verify_tokens=60))
        response = c.post("/cast/reload")
        assert response.status_code == 400 and "restart the server" in response.json()["error"]["message"]
        assert engine.policy.settings.buckets[0].thresholds.c1 == 1.0

        # The tiny target runs fp32: a profile tuned for another format is refused, its own is not.
        write_profile(path, c1=3.0, shape=TreeShape(top_k=3, max_depth=3, num_verify_tokens=10), weight_format="bf16")
        response = c.post("/cast/reload")
        assert response.status_code == 400
        assert "tuned for weight format bf16 but the target runs fp32" in response.json()["error"]["message"]

        write_profile(path, c1=3.0, shape=TreeShape(top_k=3, max_depth=3, num_verify_tokens=10), weight_format="fp32")
        response = c.post("/cast/reload").json()
        assert response["reloaded"] is True and response["profile"]["last_reload_error"] is None
        bucket = engine.policy.settings.buckets[0]
        assert bucket.thresholds.c1 == 3.0 and bucket.shape == TreeShape(top_k=2, max_depth=3, num_verify_tokens=10)
        generated = c.post("/v1/completions", json={"model": MODEL, "prompt": "after", "max_tokens": 12,
                                                    "temperature": 0}).json()["choices"][0]["text"]
        assert generated == reference(target, "after", 12).text
