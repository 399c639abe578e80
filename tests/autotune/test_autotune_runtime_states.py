"""``tune --backend sglang`` publishes the runtime states its tuned policy reaches:
the profile names them, the cap it respected and the parallel layout its rows
were measured at; the plugin reads them back and refuses the profile on another
layout.  The states' memory comes from the checkpoints' config.json."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest
import torch

from autotune.errors import AutotuneError
from autotune.sglang_backend import (SGLANG, PairIds, RuntimeStateSizing, cpu_state_sizing, runtime_state_sizing,
                                     sglang_models, states_report)
from autotune.store import Store
from autotune.workflow import TuneConfig, tune_and_publish
from sglang_cast.profile import ProfileError, load_profile
from sglang_cast.sglang_plugin.memory_plan import (GIB, MIB, ModelShape, captures_per_state, decode_graph_batch_sizes,
                                                   state_memory)
from sglang_cast.sglang_plugin.plugin_config import ParallelLayout, SGLangSection, StaticShape, require_layout
from sglang_cast.sglang_plugin.state_cover import StateCap
from support.autotune import SETUP, SPACE, fill, llama_dirs, tiny_prompts

SGLANG_TP2 = replace(SETUP, backend=SGLANG, tp_size=2)


def sglang_store(tmp_path) -> Store:
    """The tiny pipeline's traces, and its measured grid re-keyed as SGLang's at
    --tp-size 2 with planted costs (the timed ones vary run to run, and so would
    the tuned trees): a 50 ms target forward, flat in n at batch 1 and 8 ms per
    token at batch 2, and a 0.5 ms draft, so both buckets speculate, with trees of
    different widths (seeded Optuna: 3x7 and 3x10)."""
    store = fill(Store(tmp_path / "a.db"))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE measurements SET backend = 'sglang', tp_size = 2")
        for column in ("median_ms", "p10_ms", "p90_ms"):
            conn.execute(f"UPDATE measurements SET {column} = CASE role WHEN 'target' THEN 50 + (CASE batch_size "
                         "WHEN 1 THEN 0.01 ELSE 8 END) * n ELSE 0.5 + 0.01 * n END")
        conn.execute("UPDATE step_samples SET backend = 'sglang', tp_size = 2")
    return store


def planted_sizing(cap: StateCap, mib_per_node: int = 1) -> RuntimeStateSizing:
    """A state costs ``mib_per_node`` MiB per (depth x width); the GPU has 8 GiB."""
    return RuntimeStateSizing(lambda depth, width: depth * width * mib_per_node * MIB, 8 * GIB, cap, 46,
                              "a planted deployment")


def tune(tmp_path, store: Store, sizing: RuntimeStateSizing):
    config = TuneConfig(label="tiny", output=tmp_path / "tiny.yaml", buckets=(1, 2), trials=4, space=SPACE,
                        confirm_prompts=0, runtime_states=sizing)
    # No live gate (--confirm-prompts 0), so the pair is its ids, as `tune --backend sglang` passes it.
    pair = PairIds(SETUP.target_model, SETUP.draft_model, "float32", torch.device("cpu"))
    return config, tune_and_publish(pair, store, SGLANG_TP2, config, tiny_prompts().head(3), progress=False,
                                     say=lambda line: None)


def test_the_published_profile_states_its_runtime_states_cap_and_layout_and_the_plugin_reads_them(tmp_path):
    cap = StateCap(max_states=5, max_memory_share=0.5, coverage=0.99)
    config, outcome = tune(tmp_path, sglang_store(tmp_path), planted_sizing(cap))
    profile = load_profile(config.output).profile
    section = SGLangSection.of(profile)
    assert section.parallel == ParallelLayout(tp_size=2, pp_size=1) and section.cap == cap
    shape = StaticShape.covering(profile.settings)
    startup = (shape.num_steps, shape.num_draft_tokens)
    assert startup in section.runtime_states and len(section.runtime_states) <= cap.max_states
    replay = profile.provenance["sglang"]["replay"]
    reached = {tuple(map(int, key.split("x"))): count for key, count in replay["reached"].items()}
    assert sum(reached.values()) == replay["iterations"] > 0
    assert set(reached) - {startup, (0, 1)}  # the tuned policy reaches a state of its own
    assert replay["exact"] == sum(n for pair, n in reached.items() if pair in section.runtime_states)
    # The cover stops at the coverage asked for or where the cap allows no more states.
    assert replay["coverage"] >= cap.coverage or len(section.runtime_states) == cap.max_states
    assert replay["state_bytes"] == sum(d * w * MIB for d, w in section.runtime_states if (d, w) != startup)
    assert "a planted deployment" in replay["traces"]
    require_layout(profile, ParallelLayout(2, 1), config.output)
    with pytest.raises(ProfileError, match="was made for --tp-size 2 --pp-size 1 but this server runs --tp-size 1"):
        require_layout(profile, ParallelLayout(1, 1), config.output)
    report = states_report(outcome.published.profile, planted_sizing(cap)).splitlines()
    beyond = len(section.runtime_states) - 1
    assert report[0].startswith(f"SGLang runtime states (depth x width) for --tp-size 2: "
                                f"{len(section.runtime_states)} of at most 5: ")
    assert f"{replay['exact']} of {replay['iterations']} replayed iterations" in report[1]
    assert f"{beyond} beyond SGLang's startup state" in report[2]
    assert f"{beyond * 46} extra start-up CUDA-graph captures (46 each" in report[2]


def test_a_cap_that_cannot_hold_the_startup_floor_is_one_line_and_publishes_nothing(tmp_path):
    # The width-2 floor of the startup depth alone costs depth x 2 GiB here, beyond a 0.1% share of 8 GiB.
    sizing = planted_sizing(StateCap(max_states=8, max_memory_share=0.001), mib_per_node=1024)
    with pytest.raises(AutotuneError, match=r"^--max-states/--max-state-memory: the cap \(8 states, 0% of GPU "
                                            r"memory\) does not hold even the startup state"):
        tune(tmp_path, sglang_store(tmp_path), sizing)
    assert not (tmp_path / "tiny.yaml").exists()


def test_a_smaller_state_cap_builds_fewer_states(tmp_path):
    store = sglang_store(tmp_path)
    wide = SGLangSection.of(tune(tmp_path, store, planted_sizing(StateCap(8, 1.0, 1.0)))[1].published.profile)
    narrow_profile = tune(tmp_path, store, planted_sizing(StateCap(2, 1.0, 1.0)))[1].published.profile
    narrow = SGLangSection.of(narrow_profile)
    # Two states hold only the startup state and its width-2 floor: what else the policy reaches then
    # rounds up to the startup state.
    assert len(narrow.runtime_states) == 2 < len(wide.runtime_states) <= 8
    assert narrow_profile.provenance["sglang"]["replay"]["coverage"] < 1.0


def test_state_memory_is_weighed_for_the_checkpoints_config_json(tmp_path):
    target_dir, head_dir = llama_dirs(tmp_path)
    models = sglang_models(target_dir, head_dir)
    sizing = runtime_state_sizing(models, 80.0, None, 48, 1, StateCap())
    target = ModelShape.from_config(__import__("json").loads((tmp_path / "target" / "config.json").read_text()))
    head = ModelShape.from_config(__import__("json").loads((tmp_path / "head" / "config.json").read_text()))
    # SGLang's default context is the model's 131072 positions; 80 GiB captures decode graphs up to 48 requests.
    assert sizing.state_bytes(13, 72) == state_memory(target, head, 13, 72, 48, 131072, eagle3=True).total
    assert sizing.captures_per_state == captures_per_state(48) == 2 * decode_graph_batch_sizes(48)
    assert sizing.gpu_bytes == 80 * GIB and "EAGLE-3 head" in sizing.described and "131072 context" in sizing.described
    shorter = runtime_state_sizing(models, 80.0, 8192, 48, 1, StateCap())
    assert shorter.state_bytes(13, 72) < sizing.state_bytes(13, 72)
    # The lookup branch is off under SGLang's overlap scheduling (its GPU default), on in its CPU engine.
    assert not sizing.branch_runs and cpu_state_sizing(models, StateCap()).branch_runs


def test_without_max_position_embeddings_the_serving_context_must_be_given(tmp_path):
    import json

    target_dir, head_dir = llama_dirs(tmp_path)
    config = json.loads((tmp_path / "target" / "config.json").read_text())
    del config["max_position_embeddings"]
    (tmp_path / "target" / "config.json").write_text(json.dumps(config))
    with pytest.raises(AutotuneError, match="^--serve-context-length: not given and --model-path's config.json has "
                                            "no max_position_embeddings$"):
        runtime_state_sizing(sglang_models(target_dir, head_dir), 80.0, None, 48, 1, StateCap())
