"""The live runs ``tune --backend sglang``'s gate times (sglang_plugin/live_runs.py), on
CPU with the stand-in ``sglang.Engine`` of the step design's tests: it serves the
profile SGLang's processes would load through the plugin's own decider and logs every
decode iteration through the plugin's ``StepLog``."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.space import SearchSpace
from sglang_cast.cast import BucketSettings, PolicySettings, TreeShape
from sglang_cast.profile import Profile, load_profile
from sglang_cast.sglang_plugin.live_runs import WARMUP_TOKENS, SGLangLiveRuns, plain_profile
from sglang_cast.sglang_plugin.plugin_config import PROFILE_ENV, StaticShape
from sglang_cast.sglang_plugin.profile_forwards import SGLangProfileLaunch
from sglang_cast.sglang_plugin.step_log import STEP_PROFILE_ENV, read_steps
from support.plugin import StandInFactory, forward_tables, shape_flags

LAUNCH = SGLangProfileLaunch("target", "draft", "float32", context_length=512, max_batch_size=2, topk=4, max_n=8)
NEW_TOKENS = 12


def candidate() -> Profile:
    """Two speculating buckets (B = 1: top-k 2 depth 2; B = 2: top-k 3 depth 3), their states built."""
    buckets = (BucketSettings(1, TreeShape(2, 2, 5)), BucketSettings(2, TreeShape(3, 3, 7)))
    sglang = {"parallel": {"tp_size": 1, "pp_size": 1}, "runtime_states": [[2, 5], [3, 7]]}
    return Profile("gate", "cpu", "measured", PolicySettings(buckets, forward_tables()),
                   provenance={"sglang": sglang})


SLICES = {1: [["a" * 20, "b" * 24], ["c" * 28, "d" * 22]], 2: [["e" * 20, "f" * 30, "g" * 26, "h" * 21]]}


def test_the_plain_profile_keeps_trees_and_states_and_decodes_every_bucket_plainly():
    plain = plain_profile(candidate())
    assert [b.speculate for b in plain.settings.buckets] == [False, False] and plain.explore_share == 0.0
    assert [b.shape for b in plain.settings.buckets] == [b.shape for b in candidate().settings.buckets]
    assert plain.provenance == candidate().provenance


def test_each_run_is_one_engine_at_the_candidates_startup_tree_over_every_bucket_then_shut_down(tmp_path):
    factory = StandInFactory()
    runs = SGLangLiveRuns(LAUNCH, tmp_path, engine_factory=factory)
    before = {name: os.environ.get(name) for name in (PROFILE_ENV, STEP_PROFILE_ENV)}
    cast = runs.run(candidate(), False, SLICES, NEW_TOKENS)
    plain = runs.run(candidate(), True, SLICES, NEW_TOKENS)
    assert len(factory.engines) == 2 and all(engine.shut for engine in factory.engines)
    assert {name: os.environ.get(name) for name in before} == before
    covering = StaticShape.covering(candidate().settings)
    assert [shape_flags(engine.argv) for engine in factory.engines] == [covering, covering]
    served = [load_profile(Path(engine.mode.log).with_suffix(".yaml")).profile for engine in factory.engines]
    assert [b.speculate for b in served[0].settings.buckets] == [True, True]
    assert [b.speculate for b in served[1].settings.buckets] == [False, False]

    for logged in (cast, plain):
        assert {batch: len(parts) for batch, parts in logged.items()} == {1: 2, 2: 1}
        assert all(s.batch_size == 1 for part in logged[1] for s in part)
        assert all(s.batch_size <= 2 for s in logged[2][0]) and logged[2][0][0].batch_size == 2
        # Each slice holds its own waves' decode iterations: tokens up to NEW_TOKENS a prompt (an
        # iteration may overshoot the last by its accepted drafts), each wave's last iteration lost
        # to the next wave's prefill.
        for batch, parts in logged.items():
            for part, prompts in zip(parts, SLICES[batch]):
                assert 0 < sum(s.tokens for s in part) <= len(prompts) * (NEW_TOKENS + 8)
    assert all(s.depth == 0 and s.verified == 0 for parts in plain.values() for part in parts for s in part)
    # Every iteration's verify forward was timed on its own: the stand-in runs its table's f_T(B, c, t).
    assert all(s.speed() == pytest.approx(1.0) for logged in (cast, plain) for parts in logged.values()
               for part in parts for s in part)
    assert any(s.depth > 0 for parts in cast.values() for part in parts for s in part)

    # The log holds, per batch size, the warm-up wave's iterations, then the slices' (in order).
    for engine, logged in zip(factory.engines, (cast, plain)):
        every, _ = read_steps(engine.mode.log)
        start = 0
        for batch in SLICES:
            block = [s for part in logged[batch] for s in part]
            at = next(i for i in range(start + 1, len(every)) if every[i:i + len(block)] == block)
            assert all(s.tokens <= WARMUP_TOKENS * s.batch_size for s in every[start:at])  # the warm-up, dropped
            start = at + len(block)
        assert start == len(every)


@pytest.mark.requires_sglang("sglang.srt.mem_cache.allocation_sizing")
@pytest.mark.parametrize("space", [SearchSpace(), SearchSpace(top_k=3, max_depth=2, max_tokens=16, lookup_depth=0),
                                   SearchSpace(top_k=1, max_depth=6, max_tokens=40, lookup_depth=8)])
def test_the_gates_context_holds_what_sglang_reserves_ahead_of_a_step_of_any_tree_in_the_space(monkeypatch, space):
    """``speculative_reserve`` against SGLang's own rule (``get_alloc_reserve_per_decode``)
    at the widest startup shape a tune in ``space`` can publish, plus one step's overshoot
    past ``max_new_tokens``: a context short of it overflowed ``req_to_token``."""
    import sglang.srt.mem_cache.allocation_sizing as sizing

    from autotune.sglang_backend import speculative_reserve

    widest = StaticShape(space.max_depth + space.lookup_depth, max(2, space.top_k), space.max_tokens)
    spec = SimpleNamespace(speculative_algorithm="EAGLE", speculative_num_steps=widest.num_steps,
                           speculative_eagle_topk=widest.topk)
    monkeypatch.setattr(sizing, "get_spec", lambda: spec)
    monkeypatch.setattr(sizing, "max_speculative_num_draft_tokens", lambda: widest.num_draft_tokens)
    monkeypatch.setattr(sizing, "get_alloc_page_size", lambda: 1)
    assert speculative_reserve(space) >= sizing.get_alloc_reserve_per_decode() + widest.num_draft_tokens
