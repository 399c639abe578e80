"""CAST inside the real SGLang 0.5.23 runtime on the CPU: SGLang's own HTTP server,
tokenizer manager, scheduler subprocess, ``ModelRunner`` and EAGLE v2 worker, with the
plugin's ``CastWorker``, on the embedded SmolLM2-135M and its shipped EAGLE-3 head.

One server per configuration, started once per module (``SGLangServer``): plain
decoding, SGLang's EAGLE-3 at a static tree, and CAST.  Runs in ``.venv-sglang``
(``bash run.sh test`` does); elsewhere the module is skipped.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.plugin import RUNTIME, require_sglang

require_sglang(RUNTIME)

from tools.benchkit.sglang_server import SGLangServer, cpu_launcher

from sglang_cast.models.loader import resolve_model_dir
from support import ROOT

PROMPTS = [json.loads(line)["turns"][0] for line in (ROOT / "datasets" / "mt_bench.jsonl").read_text().splitlines()]
GREEDY_PROMPTS, NEW_TOKENS, CONCURRENCY = 8, 64, 4
# SGLang's EAGLE-3 static tree, the one the first run measured.
EAGLE_TREE = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")


@pytest.fixture(scope="module")
def chat_ids() -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(None))
    return [tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False)
            for prompt in PROMPTS[:GREEDY_PROMPTS]]


def server(tmp_path_factory, name: str, *flags: str):
    log = tmp_path_factory.mktemp(name) / "server.log"
    with SGLangServer(log, cpu_launcher(*flags)) as running:
        yield running


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    yield from server(tmp_path_factory, "plain", "--speculative-algorithm", "NONE")


@pytest.fixture(scope="module")
def eagle3(tmp_path_factory):
    yield from server(tmp_path_factory, "eagle3", "--speculative-algorithm", "EAGLE", *EAGLE_TREE)


@pytest.fixture(scope="module")
def cast_profile(tmp_path_factory) -> Path:
    """A copy of profiles/cpu.yaml the reload test may rewrite: its trees (and prompt-lookup
    branch) at batches 1 and 2, ``speculate: false`` (SGLang's zero-step state) above, set
    here so the tests do not depend on which buckets the last tune switched on."""
    import yaml

    data = yaml.safe_load((ROOT / "profiles" / "cpu.yaml").read_text())
    for bucket in data["buckets"]:
        bucket["speculate"] = bucket["speculate"] and bucket["max_batch_size"] <= 2
    assert [b["speculate"] for b in data["buckets"]][:2] == [True, True]
    path = tmp_path_factory.mktemp("profile") / "cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def cast(tmp_path_factory, cast_profile):
    yield from server(tmp_path_factory, "cast", "--speculative-algorithm", "CAST", "--cast-profile", str(cast_profile))


def generate(server: SGLangServer, input_ids: list[list[int]], concurrency: int = CONCURRENCY,
             **sampling) -> list[dict]:
    """One request per prompt, ``concurrency`` in flight, so SGLang batches them."""
    params = {"max_new_tokens": NEW_TOKENS, "temperature": 0.0, "ignore_eos": True, **sampling}

    def one(ids: list[int]) -> dict:
        return server.post("/generate", {"input_ids": ids, "sampling_params": params})

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, input_ids))


@pytest.fixture(scope="module")
def plain_outputs(plain, chat_ids) -> list[list[int]]:
    return [r["output_ids"] for r in generate(plain, chat_ids)]


def test_greedy_fp32_cast_equals_plain_decoding_and_eagle3_token_for_token(plain_outputs, eagle3, cast, chat_ids):
    outputs = {name: generate(server, chat_ids) for name, server in (("eagle3", eagle3), ("cast", cast))}
    assert all(len(ids) == NEW_TOKENS for ids in plain_outputs)
    for i in range(len(chat_ids)):
        assert outputs["cast"][i]["output_ids"] == plain_outputs[i], f"prompt {i}"
        assert outputs["eagle3"][i]["output_ids"] == plain_outputs[i], f"prompt {i}"
    eagle_accept = [r["meta_info"]["spec_accept_length"] for r in outputs["eagle3"]]
    # The shipped head's own lm_head is used (with the target's embedding as lm_head it accepted ~1.03).
    assert min(eagle_accept) > 1.3, eagle_accept


def test_cast_is_registered_and_runs_in_sglangs_scheduler_subprocess(cast):
    """The worker is built by the scheduler process (the launcher never builds one), which found
    CAST in SGLang's registry through the plugin's entry point."""
    import psutil

    children = psutil.Process(cast.process.pid).children(recursive=True)
    assert any("scheduler" in " ".join(child.cmdline()) or "scheduler" in child.name() for child in children)
    log = cast.log()
    assert "CAST worker: policy cast" in log and "CAST worker: " in log and "runtime states" in log


def test_a_speculate_false_bucket_runs_the_zero_step_state_and_speculation_resumes(cast, chat_ids, plain_outputs):
    """`cast_profile`: batches of 3-4 do not speculate, batch 1 does.  Four at a time,
    most iterations verify the root alone; one at a time the tree comes back."""
    batched = generate(cast, chat_ids[:4], concurrency=4)
    alone = generate(cast, chat_ids[4:6], concurrency=1)
    assert [r["output_ids"] for r in batched + alone] == plain_outputs[:6]
    batched_accept = [r["meta_info"]["spec_accept_length"] for r in batched]
    alone_accept = [r["meta_info"]["spec_accept_length"] for r in alone]
    assert max(batched_accept) < min(alone_accept), (batched_accept, alone_accept)
    assert min(alone_accept) > 1.3


def test_temperature_sampling_through_cast_gives_valid_sampled_tokens(cast, chat_ids):
    """Valid tokens under temperature, through CAST's speculative iterations, and not
    the greedy text.  Seeded runs are not asserted to repeat because SGLang does not
    make them so here: it reads ``sampling_seed`` only under
    ``--enable-deterministic-inference`` (``SamplingBatchInfo.from_schedule_batch``),
    which refuses the CPU's ``intel_amx`` backend; and on the CPU engine its verify is
    greedy whatever the temperature (``eagle_utils._verify_uses_greedy(is_cpu=True)``),
    so the draws are the first token's and any zero-step iteration's."""
    vocab, tokens, prompts = 49152, 16, chat_ids[:4]
    sampled = generate(cast, prompts, concurrency=1, max_new_tokens=tokens, temperature=1.5, sampling_seed=1234)
    for result in sampled:
        assert len(result["output_ids"]) == tokens and all(0 <= t < vocab for t in result["output_ids"])
        assert result["meta_info"]["spec_verify_ct"] > 0
    greedy = generate(cast, prompts, concurrency=1, max_new_tokens=tokens)
    # The temperature was kept: at 1.5 the first draw is the argmax for all four prompts with tiny odds.
    assert [r["output_ids"] for r in sampled] != [r["output_ids"] for r in greedy]


def test_the_openai_client_chats_and_streams_through_cast(cast):
    import openai

    client = openai.OpenAI(base_url=f"{cast.url}/v1", api_key="unused")
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Name three colours."}]
    reply = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0)
    assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=24, temperature=0, stream=True) if chunk.choices)
    assert streamed == reply.choices[0].message.content


def test_an_sglang_frontend_program_gens_and_selects_through_cast(cast):
    import sglang as sgl

    @sgl.function
    def quiz(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=16, temperature=0))
        s += sgl.user("Is that answer right? Say yes or no.")
        s += sgl.assistant(sgl.select("verdict", choices=["yes", "no"]))

    state = quiz.run(question="What is 2 + 2?", backend=sgl.RuntimeEndpoint(cast.url))
    assert state["answer"] and state["verdict"] in ("yes", "no")


def native_tau(policy: str, settings, chat_ids: list[list[int]]) -> float:
    """Tokens per verify of the native engine (fp32, the same head), one request at a time,
    counted as SGLang counts ``spec_accept_length``: every generated token over the verifies."""
    from sglang_cast.cast import SamplingParams
    from sglang_cast.engine import EngineArgs, build_engine

    engine = build_engine(EngineArgs(policy=policy, settings=settings, weight_format="fp32", max_batch_size=1))
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    results = [engine.generate([ids], params)[0] for ids in chat_ids]
    return sum(r.completion_tokens for r in results) / sum(r.stats.iterations for r in results)


def sglang_tau(results: list[dict]) -> float:
    return (sum(r["meta_info"]["completion_tokens"] for r in results)
            / sum(r["meta_info"]["spec_verify_ct"] for r in results))


def test_sglangs_eagle3_and_the_native_engines_eagle2_accept_alike_on_the_same_tree(eagle3, chat_ids):
    """Same head, prompts and static tree (3 steps, top-k 4, 8 verified tokens), batch 1:
    SGLang's accept length is the native engine's τ within 5 %."""
    from sglang_cast.cast import CostModel, PolicySettings, TreeShape

    prompts = chat_ids[:4]
    settings = PolicySettings.single(CostModel.linear(per_token_ms=1.0, fixed_ms=0.0),
                                     TreeShape(top_k=4, max_depth=3, num_verify_tokens=8))
    native = native_tau("eagle2", settings, prompts)
    sglang = sglang_tau(generate(eagle3, prompts, concurrency=1))
    print(f"EAGLE-3 static tree: SGLang accept length {sglang:.3f}, native eagle2 tau {native:.3f}")
    assert sglang == pytest.approx(native, rel=0.05)


def test_the_plugins_cast_trees_accept_like_the_native_engines_cast(cast, cast_profile, chat_ids):
    """Same head, prompts and profile (its prompt-lookup branch included), batch 1.  SGLang
    verifies a pre-built width (the next state holding the nodes CAST asked for), so it
    may verify a few more nodes than the native engine and accept a little more; never
    less by more than 5 %.  The branch is what lifts both above the head's trees alone."""
    from sglang_cast.profile import load_profile

    prompts = chat_ids[:4]
    settings = load_profile(cast_profile).profile.settings
    native = native_tau("cast", settings, prompts)
    unbranched = native_tau("cast", settings.with_lookup(0), prompts)
    sglang = sglang_tau(generate(cast, prompts, concurrency=1))
    print(f"CAST (profiles/cpu.yaml, batch 1): SGLang accept length {sglang:.3f}, native tau {native:.3f} "
          f"({unbranched:.3f} without the branch)")
    assert "prompt-lookup" not in cast.log()  # every bucket's branch runs whole: no note
    assert native > unbranched  # the branch matters on these prompts ...
    assert sglang >= native * 0.95  # ... and SGLang's worker grafts it too


def test_the_profile_hot_reloads_while_requests_stream(cast, cast_profile, chat_ids, plain_outputs):
    """Rewrite the served profile while four requests decode one at a time: the new version
    is announced, the requests finish with plain decoding's tokens, and a request after
    the reload runs the new profile (its batch-1 bucket switched to ``speculate: false``)."""
    import yaml

    data = yaml.safe_load(cast_profile.read_text())
    data["buckets"][0]["speculate"] = False
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(generate, cast, chat_ids[:4], 1)
        time.sleep(2.0)
        cast_profile.write_text(yaml.safe_dump(data, sort_keys=False))
        during = running.result()
    assert [r["output_ids"] for r in during] == plain_outputs[:4]
    deadline = time.monotonic() + 30
    while "is now active" not in cast.log() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "is now active" in cast.log()
    after = generate(cast, chat_ids[4:5], concurrency=1)
    assert after[0]["output_ids"] == plain_outputs[4]
    meta = after[0]["meta_info"]
    assert meta["spec_verify_ct"] == meta["completion_tokens"] - 1  # one token a verify after the prefill's
