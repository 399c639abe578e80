"""CUDA graphs (engine/cuda_graphs.py), checked on the CPU through `EagerReplay`: the
same keys, static buffers, padding and output reuse a recorded graph has, with the
recorded function re-run at each replay.  What only a GPU can check (the capture
itself, graph memory, the speed) runs in tools/gpu_kit.sh; the CUDA case here is
skipped without a GPU."""

import pytest
import torch

from sglang_cast.cast import CostModel, PolicySettings, SamplingParams, TreeShape, make_policy
from sglang_cast.engine import Engine, StepLog
from sglang_cast.engine.cuda_graphs import (DecodeShapes, GraphedForward, GraphKey, StaticInputs, buckets_upto,
                                            held_memory)
from sglang_cast.models import AttentionBatch, KVCache
from sglang_cast.models.attention import causal_tree_mask
from support.random_pair import PROMPTS
from tools.tiny_models import CharTokenizer, random_pair

SETTINGS = PolicySettings.single(CostModel.linear(1.0, 4.0, draft_ratio=0.2), shape=TreeShape(3, 3, 8))
CUDA_REASON = "no CUDA device on this machine (torch.cuda.is_available() is False)"


def test_buckets_are_powers_of_two_then_the_limit():
    assert buckets_upto(1) == (1,)
    assert buckets_upto(8) == (1, 2, 4, 8)
    assert buckets_upto(6) == (1, 2, 4, 6)
    with pytest.raises(ValueError, match="limit"):
        buckets_upto(0)


def test_a_key_covers_a_call_only_with_room_for_its_padded_tokens():
    key = GraphKey(rows=4, tokens=4, columns=8, feature_width=32)
    assert key.covers(3, 4, 8, 32)
    assert key.covers(1, 2, 6, 32)  # 2 padded tokens fit after 6 real columns
    assert not key.covers(1, 2, 7, 32)  # they would not
    assert not key.covers(5, 1, 1, 32) and not key.covers(1, 5, 5, 32)
    assert not key.covers(1, 1, 1, 0)  # another feature width is another graph


def test_decode_shapes_cover_every_forward_a_policy_makes():
    shapes = DecodeShapes(max_batch=3, verify_tokens=9, top_k=3, max_depth=3)
    target = shapes.target_keys()
    assert GraphKey(1, 1, 1) in target and GraphKey(3, 9, 9) in target
    draft = shapes.draft_keys(hidden=32, target_features=96)
    # tree steps: top_k tokens per row over whole levels of scratch; catch-up: up to depth + 1 tokens
    assert {GraphKey(3, 3, d * 3, 32) for d in (1, 2, 3)} <= set(draft)
    assert GraphKey(3, 4, 4, 96) in draft and GraphKey(1, 1, 1, 96) in draft
    assert DecodeShapes(4, 1, 1, 0).draft_keys(32, 32) == []


def test_padding_rows_use_the_pad_slot_and_padded_tokens_see_only_their_own_entry():
    key = GraphKey(rows=3, tokens=4, columns=6)
    inputs = StaticInputs(key, pad_slot=7, device=torch.device("cpu"), dtype=torch.float32)
    index = inputs.host_index(torch.tensor([2, 5]), torch.tensor([10, 20]), tokens=2, columns=3)
    assert index[:, 0].tolist() == [2, 5, 7]
    # the call's two tokens write at lens + s - n + j (scratch entries 1, 2); the padded
    # tokens at entries columns - tokens + j = 4, 5, past the call's 3 scratch entries
    assert index[0, 2:].tolist() == [11, 12, 14, 15] and index[1, 2:].tolist() == [21, 22, 24, 25]
    assert index[2, 1:].tolist() == [0, 2, 3, 4, 5]
    # each padded token's mask sees exactly the entry it writes (columns are entries)
    entries = torch.arange(4) + (key.columns - key.tokens)
    assert inputs.pad_mask.sum(dim=2).eq(1).all()
    assert torch.equal(inputs.pad_mask[0].nonzero()[:, 1], entries)


def engine(policy: str, backend: str | None, max_batch: int = 3) -> Engine:
    target, draft = random_pair("cpu", torch.float32)
    return Engine(target, CharTokenizer(), draft if policy != "vanilla" else None, make_policy(policy, SETTINGS),
                  max_batch_size=max_batch, context_length=96, graph_backend=backend)


def drafted_values(log: StepLog) -> list[float]:
    """Per iteration and sequence, the summed draft probabilities of the verified nodes:
    what the draft's forwards computed (the tokens alone would not show a wrong draft)."""
    return [v for record in log.records for v in record.verified_value]


@pytest.mark.parametrize("policy", ["vanilla", "eagle2", "cast"])
def test_replayed_forwards_decode_and_draft_what_eager_forwards_do(policy):
    params = SamplingParams(max_new_tokens=24)
    eager_log, graphed_log = StepLog(), StepLog()
    expected = [r.token_ids for r in engine(policy, None).generate(PROMPTS, params, on_step=eager_log)]
    graphed = engine(policy, "eager-replay")
    assert [r.token_ids for r in graphed.generate(PROMPTS, params, on_step=graphed_log)] == expected
    assert drafted_values(graphed_log) == pytest.approx(drafted_values(eager_log), rel=1e-4, abs=1e-6)
    report = graphed.graph_report()
    assert report["target"]["replays"] > 0 and report["target"]["failed"] == 0
    if policy != "vanilla":
        assert report["draft"]["replays"] > 0  # tree steps and catch-up went through graphs too
    assert engine(policy, None).graph_report() is None


def test_sampling_through_graphs_matches_eager_sampling():
    params = [SamplingParams(max_new_tokens=16, temperature=0.8, seed=3 + i) for i in range(len(PROMPTS))]
    expected = [r.token_ids for r in engine("cast", None).generate(PROMPTS, params)]
    assert [r.token_ids for r in engine("cast", "eager-replay").generate(PROMPTS, params)] == expected


def forward_inputs(target, n: int, slots: list[int], cache: KVCache):
    ids = torch.randint(0, 64, (len(slots), n), generator=torch.Generator().manual_seed(1))
    positions = cache.lens[slots].view(-1, 1) + torch.arange(n)
    return ids, positions, torch.tensor(slots), causal_tree_mask(len(slots), n, "cpu")


def graphed_target(target, cache: KVCache, keys: list[GraphKey]) -> GraphedForward:
    def step(inputs: StaticInputs):
        batch = AttentionBatch.fixed(cache, inputs.slots, inputs.starts, inputs.write_positions, inputs.mask)
        return (target.logits(target.run(inputs.ids, inputs.positions, batch).hidden),)

    return GraphedForward("target", step, cache, cache.max_batch - 1, keys, "eager-replay", torch.float32)


@torch.inference_mode()
def test_a_padded_replay_writes_only_its_own_slots_and_matches_an_exact_forward():
    target, _ = random_pair("cpu", torch.float32)
    cache = KVCache.for_model(target.config, 4, 32, "cpu", torch.float32)  # slot 3: the pad slot
    cache.lens[:] = torch.tensor([5, 7, 3, 0])
    for layer in range(target.config.num_layers):
        cache.k[layer].normal_()
        cache.v[layer].normal_()
    graphed = graphed_target(target, cache, [GraphKey(4, 4, 4)])
    untouched = cache.k[:, 1].clone()
    ids, positions, slots, mask = forward_inputs(target, 3, [0, 2], cache)  # 2 of 4 rows, 3 of 4 tokens
    exact = target.logits(target(ids, positions, cache, slots, mask).hidden)
    (logits,) = graphed(ids, positions, slots, mask)
    assert logits.shape == exact.shape
    torch.testing.assert_close(logits, exact, rtol=1e-5, atol=1e-5)
    assert torch.equal(cache.k[:, 1], untouched)  # slot 1 was not in the call


@torch.inference_mode()
def test_a_call_no_key_covers_or_that_would_overrun_the_cache_runs_eagerly():
    target, _ = random_pair("cpu", torch.float32)
    cache = KVCache.for_model(target.config, 3, 16, "cpu", torch.float32)
    graphed = graphed_target(target, cache, [GraphKey(2, 2, 2)])
    assert graphed(*forward_inputs(target, 3, [0], cache)) is None  # 3 tokens > 2
    cache.lens[0] = 15
    assert graphed(*forward_inputs(target, 1, [0], cache)) is None  # 15 + 2 columns > 16 positions
    assert graphed.stats.eager_calls == 2 and graphed.stats.replays == 0


@torch.inference_mode()
def test_a_key_that_fails_to_record_is_left_to_eager_and_the_others_still_replay():
    target, _ = random_pair("cpu", torch.float32)
    cache = KVCache.for_model(target.config, 3, 16, "cpu", torch.float32)

    def step(inputs: StaticInputs):
        if inputs.key.tokens == 2:
            raise RuntimeError("operation not permitted when stream is capturing")
        batch = AttentionBatch.fixed(cache, inputs.slots, inputs.starts, inputs.write_positions, inputs.mask)
        return (target.run(inputs.ids, inputs.positions, batch).hidden,)

    graphed = GraphedForward("target", step, cache, 2, [GraphKey(2, 1, 1), GraphKey(2, 2, 2)], "eager-replay",
                             torch.float32)
    assert graphed.keys == [GraphKey(2, 1, 1)]
    assert graphed.stats.failed == 1 and "stream is capturing" in graphed.stats.failures[0]
    assert graphed(*forward_inputs(target, 2, [0], cache)) is None
    assert graphed(*forward_inputs(target, 1, [0], cache)) is not None


def test_graph_memory_is_read_with_the_allocator_cache_released(monkeypatch):
    """Capturing a graph empties the allocator's cache, so a reading that kept cached
    blocks on one side came out negative on an H200: both sides release it first."""
    cached = {"bytes": 300 << 20}
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: cached.update(bytes=0))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: (100 << 20) + cached["bytes"])
    assert held_memory(torch.device("cuda")) == 100 << 20
    assert held_memory(torch.device("cpu")) == 0


def test_graphs_reserve_a_pad_slot_no_request_gets():
    graphed = engine("cast", "eager-replay", max_batch=2)
    assert graphed.runner.target_cache.max_batch == 3 and graphed.runner.draft_cache.max_batch == 3
    assert graphed.scheduler.free_slots == [0, 1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason=CUDA_REASON)
@pytest.mark.parametrize("policy", ["vanilla", "cast"])
def test_cuda_graphs_decode_what_eager_cuda_decodes(policy):
    target, draft = random_pair("cuda", torch.float32)
    params = SamplingParams(max_new_tokens=24)
    outputs = []
    for backend in (None, "cuda"):
        run = Engine(target, CharTokenizer(), draft if policy != "vanilla" else None, make_policy(policy, SETTINGS),
                     max_batch_size=3, context_length=96, graph_backend=backend)
        outputs.append([r.token_ids for r in run.generate(PROMPTS, params)])
    assert outputs[0] == outputs[1]
    assert run.graph_report()["target"]["captured"] > 0
