"""CAST inside the real SGLang 0.5.23 runtime on the CPU: SGLang's own HTTP server,
tokenizer manager, scheduler subprocess, ``ModelRunner`` and EAGLE v2 worker, with the
plugin's ``CastWorker``, on the embedded SmolLM2-135M and its shipped EAGLE-3 head.

One server per configuration, started once per module (``SGLangServer``): plain
decoding, SGLang's EAGLE-3 at a static tree, and CAST.  Runs in ``.venv-sglang``
(``bash run.sh test`` does); elsewhere the module is skipped.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

try:
    import sglang.srt.server_args  # noqa: F401
except Exception as err:  # noqa: BLE001 - any import failure means "not the SGLang venv"
    pytest.skip(f"SGLang 0.5.23 does not import here ({type(err).__name__}: {err}); run these tests with "
                ".venv-sglang/bin/python", allow_module_level=True)

from sglang_server import SGLangServer

from sglang_cast.models.loader import resolve_model_dir

ROOT = Path(__file__).resolve().parents[1]
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
    with SGLangServer(log, *flags) as running:
        yield running


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    yield from server(tmp_path_factory, "plain", "--speculative-algorithm", "NONE")


@pytest.fixture(scope="module")
def eagle3(tmp_path_factory):
    yield from server(tmp_path_factory, "eagle3", "--speculative-algorithm", "EAGLE", *EAGLE_TREE)


@pytest.fixture(scope="module")
def cast(tmp_path_factory):
    yield from server(tmp_path_factory, "cast", "--speculative-algorithm", "CAST")


def generate(server: SGLangServer, input_ids: list[list[int]], **sampling) -> list[dict]:
    """One request per prompt, ``CONCURRENCY`` in flight, so SGLang batches them."""
    params = {"max_new_tokens": NEW_TOKENS, "temperature": 0.0, "ignore_eos": True, **sampling}

    def one(ids: list[int]) -> dict:
        return server.post("/generate", {"input_ids": ids, "sampling_params": params})

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(one, input_ids))


def test_greedy_fp32_cast_equals_plain_decoding_and_eagle3_token_for_token(plain, eagle3, cast, chat_ids):
    outputs = {name: generate(server, chat_ids) for name, server in
               (("plain", plain), ("eagle3", eagle3), ("cast", cast))}
    for name, results in outputs.items():
        assert all(len(r["output_ids"]) == NEW_TOKENS for r in results), name
    for i in range(len(chat_ids)):
        assert outputs["cast"][i]["output_ids"] == outputs["plain"][i]["output_ids"], f"prompt {i}"
        assert outputs["eagle3"][i]["output_ids"] == outputs["plain"][i]["output_ids"], f"prompt {i}"
    eagle_accept = [r["meta_info"]["spec_accept_length"] for r in outputs["eagle3"]]
    # The shipped head's own lm_head is used (with the target's embedding as lm_head it accepted ~1.03).
    assert min(eagle_accept) > 1.3, eagle_accept
