"""The native engine on tiny random models: lossless greedy decoding under every
policy, speculative sampling distribution, stop conditions and input errors."""

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from scipy.stats import chi2_contingency

from sglang_cast.cast import BucketSettings, PolicySettings, SamplingParams, TraceIteration, TreeShape, make_policy
from sglang_cast.engine import Engine, StepLog, feature_layers
from sglang_cast.models import DraftConfig, Eagle3Draft, EagleDraft, ModelConfig
from sglang_cast.models.llama import eagle3_feature_layers
from support.tiny import PROMPTS, SETTINGS, CharTokenizer, MirrorDraft, engine, tiny_target



def test_each_record_carries_the_plan_its_iteration_ran_under():
    """What a live iteration is charged against travels in its record (the server's live
    gate and the benchmarks read it there): one fresh plan per iteration, of the
    iteration's own batch size, as the batch shrinks."""
    log = StepLog()
    eng = engine("cast", tiny_target())
    eng.generate(PROMPTS[:3], [SamplingParams(max_new_tokens=n) for n in (3, 9, 20)], on_step=log)
    plans = [r.plan for r in log.records]
    assert [p.batch_size for p in plans] == [r.batch_size for r in log.records]
    assert {r.batch_size for r in log.records} == {1, 2, 3}
    assert len({id(p) for p in plans}) == len(plans)
    assert all(p.context_len == r.context_len for p, r in zip(plans, log.records))


@pytest.mark.parametrize("policy", ["eagle2", "cast", "goodput"])
@pytest.mark.parametrize("max_batch", [1, 4])
def test_greedy_outputs_equal_vanilla(policy, max_batch):
    target = tiny_target()
    params = SamplingParams(max_new_tokens=40)
    expected = [r.token_ids for r in engine("vanilla", target, max_batch).generate(PROMPTS, params)]
    results = engine(policy, target, max_batch).generate(PROMPTS, params)
    assert [r.token_ids for r in results] == expected
    assert sum(r.stats.tau for r in results) / len(results) > 1.5  # trees were really accepted


@pytest.mark.parametrize("policy", ["cast", "goodput"])
def test_bucket_without_speculation_decodes_plainly_and_catches_the_draft_up_later(policy):
    """Batches of 3-4 decode plainly, smaller ones speculate: as requests finish the
    engine switches on, and the draft must first eat the tokens it missed."""
    target = tiny_target()
    buckets = (BucketSettings(2, TreeShape(4, 4, 12)), BucketSettings(4, TreeShape(4, 4, 12), speculate=False))
    switching = make_policy(policy, PolicySettings(buckets=buckets, costs=SETTINGS.costs))
    eng = Engine(target, CharTokenizer(), MirrorDraft(target), switching, max_batch_size=4, context_length=160)
    lengths = [6, 14, 40, 40]
    params = [SamplingParams(max_new_tokens=n) for n in lengths]
    expected = [r.token_ids for r in engine("vanilla", target).generate(PROMPTS[:4], params)]
    steps = StepLog()
    results = eng.generate(PROMPTS[:4], params, on_step=steps)
    assert [r.token_ids for r in results] == expected
    plain = [h for h in steps.records if h.batch_size > 2]
    drafted = [h for h in steps.records if h.batch_size <= 2]
    assert plain and all(h.verified == 0 and h.accepted == [0] * h.batch_size for h in plain)
    assert drafted and sum(map(sum, (h.accepted for h in drafted))) / sum(h.batch_size for h in drafted) > 0.5
    assert not eng.runner.draft_backlog  # every backlog was fed or released


def test_requests_join_and_leave_between_iterations():
    target = tiny_target()
    eng = engine("eagle2", target, max_batch=2)
    lengths = [5, 30, 12, 7]
    results = eng.generate(PROMPTS[:4], [SamplingParams(max_new_tokens=n) for n in lengths])
    assert [len(r.token_ids) for r in results] == lengths
    assert all(r.finish_reason == "length" for r in results)
    assert sorted(eng.scheduler.free_slots) == [0, 1]
    alone = engine("vanilla", target, max_batch=1).generate([PROMPTS[1]], SamplingParams(max_new_tokens=30))
    assert results[1].token_ids == alone[0].token_ids


def test_stop_token_and_stop_string():
    target = tiny_target()
    free = engine("vanilla", target).generate(["hello"], SamplingParams(max_new_tokens=30))[0]
    stop_token = free.token_ids[5]
    first = free.token_ids.index(stop_token)
    out = engine("eagle2", target).generate(["hello"], SamplingParams(max_new_tokens=30,
                                                                      stop_token_ids=(stop_token,)))[0]
    assert out.token_ids == free.token_ids[: first + 1] and out.finish_reason == "stop"
    assert out.text == free.text[:first]
    stop_text = free.text[8:10]
    out = engine("cast", target).generate(["hello"], SamplingParams(max_new_tokens=30, stop=(stop_text,)))[0]
    assert out.text == free.text[: free.text.index(stop_text)] and out.finish_reason == "stop"


def test_prompt_too_long_and_empty_prompt_are_clear_errors():
    eng = engine("cast", tiny_target(), context=32)
    with pytest.raises(ValueError, match="exceeds the context length 32"):
        eng.add_request("x" * 30, SamplingParams(max_new_tokens=8))
    with pytest.raises(ValueError, match="at least one token"):
        eng.add_request([], SamplingParams())
    with pytest.raises(ValueError, match=r"input_ids: token id 48 is outside the vocabulary \[0, 48\)"):
        eng.add_request([1, 48], SamplingParams())
    with pytest.raises(ValueError, match="needs a draft head"):
        Engine(tiny_target(), CharTokenizer(), None, make_policy("cast", SETTINGS))


def _token_counts(policy: str, draws: int, seed: int) -> torch.Tensor:
    """Counts of (position 1 token, position 3 token) over many seeded requests."""
    target = tiny_target(vocab=6, seed=3, scale=0.25)
    eng = Engine(target, CharTokenizer(), MirrorDraft(target), make_policy(policy, SETTINGS), max_batch_size=16,
                 context_length=64)
    params = [SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=4, seed=seed + i) for i in range(draws)]
    results = eng.generate([[1, 2, 3]] * draws, params)
    counts = torch.zeros(2, 6, dtype=torch.long)
    for r in results:
        counts[0, r.token_ids[1]] += 1
        counts[1, r.token_ids[3]] += 1
    return counts


def test_speculative_sampling_matches_vanilla_sampling_per_position():
    vanilla = _token_counts("vanilla", 1500, seed=0)
    spec = _token_counts("eagle2", 1500, seed=10_000)
    for position in range(2):
        table = torch.stack([vanilla[position], spec[position]])
        table = table[:, table.sum(0) > 0]
        assert chi2_contingency(table.numpy()).pvalue > 1e-3


def test_seed_makes_sampling_reproducible():
    target = tiny_target()
    params = SamplingParams(temperature=1.0, max_new_tokens=20, seed=42)
    a = engine("cast", target).generate(["hello"], params)[0].token_ids
    b = engine("cast", target).generate(["hello"], params)[0].token_ids
    assert a == b


def test_a_seeded_request_samples_the_same_tokens_under_every_policy():
    """Draws are keyed by output position, so what a seed samples does not depend on the
    trees verified: plain decoding, EAGLE-2's tree and CAST's emit the same tokens."""
    target = tiny_target()
    params = [SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=30, seed=seed) for seed in (3, 4, 5)]
    outputs = {policy: [r.token_ids for r in engine(policy, target, 2).generate(PROMPTS[:3], params)]
               for policy in ("vanilla", "eagle2", "cast")}
    assert outputs["eagle2"] == outputs["vanilla"] and outputs["cast"] == outputs["vanilla"]
    assert len({tuple(tokens) for tokens in outputs["vanilla"]}) == 3


def test_a_batch_of_greedy_and_sampled_requests_verifies_each_row_its_own_way(monkeypatch):
    """One iteration verifies its greedy rows on the target's greedy tokens and its
    sampled rows with their samplers (sub-batches, results put back in row order): the
    greedy rows decode exactly as plain greedy decoding, the sampled ones reproducibly."""
    from sglang_cast.engine import runner as runner_module

    calls = []
    for name in ("verify_greedy", "verify_sampling"):
        real = getattr(runner_module, name)
        monkeypatch.setattr(runner_module, name,
                            lambda tree, *rest, _real=real, _name=name: calls.append((_name, tree.num_tokens > 1))
                            or _real(tree, *rest))
    target = tiny_target()
    greedy, sampled = SamplingParams(max_new_tokens=24), SamplingParams(temperature=0.9, max_new_tokens=24, seed=5)
    prompts, params = ["hello world", "trees", "speculative decoding"], [greedy, sampled, greedy]
    mixed = [r.token_ids for r in engine("eagle2", target, max_batch=3).generate(prompts, params)]
    again = [r.token_ids for r in engine("eagle2", target, max_batch=3).generate(prompts, params)]
    plain = [r.token_ids for r in engine("vanilla", target).generate(prompts, greedy)]
    assert ("verify_greedy", True) in calls and ("verify_sampling", True) in calls
    assert mixed[0] == plain[0] and mixed[2] == plain[2]
    assert mixed == again and len(mixed[1]) == 24


@pytest.mark.parametrize("policy", ["cast", "goodput"])
def test_replay_of_recorded_traces_matches_the_live_engine(policy):
    """docs/design/cast.md §8: traces recorded by the engine, replayed offline with the same
    policy, give the accepted lengths the live engine (real draft forwards of the
    policy's own tree) produced, iteration by iteration."""
    from sglang_cast.cast import replay

    target = tiny_target()
    params = SamplingParams(max_new_tokens=40)
    live = engine(policy, target, max_batch=1)
    live_steps, recorded_steps = StepLog(), StepLog()
    live_out = live.generate(PROMPTS[:3], params, on_step=live_steps)
    recording = engine(policy, target, max_batch=1)
    recording.record_traces()
    recorded_out = recording.generate(PROMPTS[:3], params, on_step=recorded_steps)
    assert [r.token_ids for r in recorded_out] == [r.token_ids for r in live_out]
    replayed = replay(recorded_steps.traces, make_policy(policy, SETTINGS))
    live_accepted = [h.accepted for h in live_steps.records]
    assert [o.num_accepted for o in replayed.outcomes] == [h.accepted for h in recorded_steps.records]
    exact = [i for i, o in enumerate(replayed.outcomes) if o.unrecorded == 0]
    assert len(exact) >= 0.8 * len(live_accepted)
    assert len(recorded_steps.records) == len(live_accepted)
    for i in exact:
        assert replayed.outcomes[i].num_accepted == live_accepted[i]


@pytest.mark.parametrize("policy", ["eagle2", "cast"])
def test_replay_grafts_the_recorded_lookup_branch_as_live_trees_do(policy):
    """A recording holds each iteration's lookup proposal, grafted and verified with the
    full expansion; replaying a policy whose bucket has a branch grafts it onto the
    policy's own tree and accepts what the live engine with that branch accepted."""
    from sglang_cast.cast import replay

    target, poor = tiny_target(), MirrorDraft(tiny_target(seed=1))
    settings, params = SETTINGS.with_lookup(6), SamplingParams(max_new_tokens=40)

    def run(record: bool):
        eng = Engine(target, CharTokenizer(), poor, make_policy(policy, settings), max_batch_size=1,
                     context_length=160)
        if record:
            eng.record_traces()
        log = StepLog()
        return [r.token_ids for r in eng.generate(PROMPTS[:4], params, on_step=log)], log

    (live_out, live_log), (recorded_out, recorded_log) = run(False), run(True)
    assert recorded_out == live_out
    traces = recorded_log.traces
    assert all(t.lookup_depth == 8 and len(t.proposals) == 1 for t in traces)
    assert any(t.tree.size > t.drafted_nodes for t in traces)  # the branch added nodes to the recording
    replayed = replay(traces, make_policy(policy, settings))
    assert [o.num_accepted for o in replayed.outcomes] == [h.accepted for h in recorded_log.records]
    exact = [i for i, o in enumerate(replayed.outcomes) if o.unrecorded == 0]
    assert len(exact) >= 0.8 * len(live_log.records) and len(recorded_log.records) == len(live_log.records)
    assert all(replayed.outcomes[i].num_accepted == live_log.records[i].accepted for i in exact)
    assert replayed.tau > replay(traces, make_policy(policy, SETTINGS)).tau + 0.1  # the branch's tokens count
    with pytest.raises(ValueError, match="exceeds the recording's lookup depth 8"):
        replay(traces, make_policy(policy, SETTINGS.with_lookup(9)))
    round_trip = TraceIteration.from_dict(json.loads(json.dumps(traces[0].to_dict())))
    assert (round_trip.proposals, round_trip.lookup_depth, round_trip.drafted_nodes) == (
        traces[0].proposals, 8, traces[0].drafted_nodes)


def test_trace_recording_refuses_sampling_requests():
    eng = engine("cast", tiny_target())
    eng.record_traces()
    with pytest.raises(ValueError, match="temperature must be 0"):
        eng.add_request("hello", SamplingParams(temperature=0.7))


def test_step_returns_what_it_did():
    """Prefill-only steps carry no record; an iteration's record matches its batch;
    every request is reported finished exactly once; traces only while recording."""
    eng = engine("eagle2", tiny_target(), max_batch=2)
    one_token = eng.add_request("ab", SamplingParams(max_new_tokens=1))  # finishes at prefill
    first = eng.step()
    assert first.finished == [one_token] and first.record is None and first.trace is None
    longer = [eng.add_request(p, SamplingParams(max_new_tokens=n)) for p, n in (("hello", 9), ("zz", 4))]
    finished = []
    while eng.has_work:
        step = eng.step()
        running = len(eng.running) + len(step.finished)
        assert step.record.batch_size == len(step.record.accepted) == running and step.trace is None
        finished += step.finished
    assert sorted(r.request_id for r in finished) == sorted(r.request_id for r in longer)
    eng.record_traces()
    eng.add_request("hello", SamplingParams(max_new_tokens=6))
    eng.step()  # prefill
    step = eng.step()
    assert step.trace is not None and step.trace.batch_size == step.record.batch_size == 1


def test_feature_layers_come_from_the_draft():
    target = tiny_target()
    assert feature_layers(target, MirrorDraft(target)) == feature_layers(target, None) == ()
    layer = ModelConfig.from_hf({**target.config.to_hf(), "num_hidden_layers": 1})
    eagle = EagleDraft(DraftConfig("eagle", layer, True, layer.vocab_size), target)
    eagle3 = Eagle3Draft(DraftConfig("eagle3", layer, False, draft_vocab_size=16), target)
    deep_target = SimpleNamespace(config=SimpleNamespace(num_layers=30))
    assert feature_layers(deep_target, eagle3) == eagle3_feature_layers(30) == (2, 15, 27)
    assert feature_layers(deep_target, eagle) == ()


def test_recording_reserves_room_for_the_whole_candidate_pool():
    """A recording verifies every node of the pool (1 + K + (H-1)·K² tokens), more
    than the policy's trees need; near the context limit that must still fit."""
    eng = engine("cast", tiny_target(), max_batch=1, context=64)
    pool = SETTINGS.buckets[0].shape.pool_size
    assert eng.tree_room < 1 + pool
    eng.record_traces()  # with the default lookup branch: 8 more nodes at most
    room = 1 + pool + 8
    assert eng.tree_room >= room and eng.runner.target_cache.capacity >= 64 + room
    log = StepLog()
    eng.generate(["x" * 40], SamplingParams(max_new_tokens=24, ignore_eos=True), on_step=log)  # up to 64 tokens
    assert all(t.drafted_nodes == 1 + pool for t in log.traces)  # every iteration drafted the full pool
    busy = engine("cast", tiny_target(), max_batch=1)
    busy.add_request("hello", SamplingParams(max_new_tokens=8))
    busy.step()  # prefill: a request now holds a slot
    with pytest.raises(ValueError, match="start recording before any request runs"):
        busy.record_traces()


def test_a_lookup_branch_keeps_every_output_and_wins_tokens_a_poor_draft_misses():
    """Trees with the prompt-lookup branch (`cast.context_lookup`) emit exactly plain
    decoding's tokens, greedy and seeded sampling alike; with a draft that predicts
    another model, the branch is what gets accepted where the outputs repeat themselves."""
    target = tiny_target()
    poor = MirrorDraft(tiny_target(seed=1))
    greedy = SamplingParams(max_new_tokens=60)
    sampled = [SamplingParams(temperature=1.0, max_new_tokens=30, seed=seed) for seed in (3, 4)]
    vanilla = engine("vanilla", target)
    expected = [r.token_ids for r in vanilla.generate(PROMPTS, greedy)]
    expected_sampled = [r.token_ids for r in vanilla.generate(PROMPTS[:2], sampled)]
    taus = {}
    for depth in (0, 6):
        eng = Engine(target, CharTokenizer(), poor, make_policy("eagle2", SETTINGS.with_lookup(depth)),
                     max_batch_size=4, context_length=160)
        log = StepLog()
        results = eng.generate(PROMPTS, greedy, on_step=log)
        # records charge the draft layers that ran, however deep a verified lookup path went
        assert max(r.depth for r in log.records) <= SETTINGS.buckets[0].shape.max_depth
        assert [r.token_ids for r in results] == expected
        assert [r.token_ids for r in eng.generate(PROMPTS[:2], sampled)] == expected_sampled
        taus[depth] = sum(r.stats.tau for r in results) / len(results)
    assert taus[6] > taus[0] + 0.2  # measured 1.34 against 1.03


def test_the_lookup_branch_is_each_buckets_own():
    """A batch grafts the branch of the bucket that covers its size: requests run one
    at a time in the batch-1 bucket, whatever the larger bucket says."""
    target = tiny_target()
    poor = MirrorDraft(tiny_target(seed=1))
    base = SETTINGS.buckets[0]

    def tau(lookup_small: int, lookup_large: int) -> float:
        buckets = (replace(base, max_batch_size=1, lookup_depth=lookup_small),
                   replace(base, max_batch_size=8, lookup_depth=lookup_large))
        settings = replace(SETTINGS, buckets=buckets)
        eng = Engine(target, CharTokenizer(), poor, make_policy("eagle2", settings), max_batch_size=1,
                     context_length=160)
        results = eng.generate(PROMPTS, SamplingParams(max_new_tokens=60))
        return sum(r.stats.tau for r in results) / len(results)

    assert tau(6, 0) > tau(0, 6) + 0.2
