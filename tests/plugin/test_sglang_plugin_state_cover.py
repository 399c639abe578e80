"""Runtime states from what the policy reaches (``state_cover``) and the plugin's
section of a profile (``plugin_config.SGLangSection``).  Pure: no SGLang needed."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
import torch

from sglang_cast.cast import (BucketSettings, ContextLookup, CostModel, CostTable, PolicySettings, Proposal,
                              RecordingExpander, Thresholds, TreeShape, graft_proposals, grow_tree, make_policy,
                              replay_iteration)
from sglang_cast.profile import Profile, ProfileError
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.plugin_config import ParallelLayout, SGLangSection, StaticShape
from sglang_cast.sglang_plugin.runtime_shapes import NO_DRAFT
from sglang_cast.sglang_plugin.state_cover import StateCap, cover_states, reached_pair, reached_states
from support.synthetic import PathModel

GIB = 1 << 30


def costs() -> CostModel:
    n = torch.arange(1, 65, dtype=torch.float64)
    target = CostTable(512, 4, (1, 8), torch.stack([10 + 0.6 * n**1.2, 30 + 2.0 * n**1.2]).unsqueeze(1).repeat(1, 4, 1))
    draft = CostTable(512, 4, (1, 8), torch.stack([1 + 0.2 * n, 2 + 0.5 * n]).unsqueeze(1).repeat(1, 4, 1))
    return CostModel(target=target, draft=draft)


SHAPE = TreeShape(top_k=4, max_depth=5, num_verify_tokens=16)


def settings(c=(0.3, 0.5, 0.8)) -> PolicySettings:
    return PolicySettings(buckets=(BucketSettings(1, SHAPE, Thresholds(*c)), BucketSettings(1 << 30, SHAPE,
                                                                                            Thresholds(*c))),
                          costs=costs())


LOOKUP = ContextLookup(depth=7)


def recorded_traces(count: int, seed: int = 3, lookup: ContextLookup | None = None):
    """Full-expansion EAGLE-2 traces of a path model, batch 1 and 2; with ``lookup``,
    each tree also carries a recorded prompt-lookup branch of 0..``lookup.depth`` random
    tokens per sequence, as ``collect --lookup-depth`` records it."""
    model = PathModel(vocab=10, seed=seed, agreement=0.7)
    rng = random.Random(seed)
    traces = []
    for _ in range(count):
        roots = torch.tensor([rng.randrange(10) for _ in range(rng.choice([1, 2]))])
        context = rng.randrange(10, 1500)
        plan = make_policy("eagle2", settings()).begin(roots.numel(), context)
        recorder = RecordingExpander(model, plan.top_k)
        tree = grow_tree(plan, recorder, roots)
        drafted, proposals = tree.size, []
        if lookup is not None:
            proposals = [Proposal([rng.randrange(10) for _ in range(rng.randrange(lookup.depth + 1))],
                                  rng.choice([2, 4, 8])) for _ in range(roots.numel())]
            proposals = [p if p.tokens else Proposal.none() for p in proposals]
            graft_proposals(tree, proposals, lookup)
        all_nodes = torch.arange(tree.size).expand(tree.batch_size, -1)
        traces.append(recorder.finish(tree, torch.full((roots.numel(),), context), model.argmax_for(tree, all_nodes),
                                      drafted if lookup else None, lookup.depth if lookup else 0, proposals))
    return traces


def width_bytes(depth: int, width: int) -> int:
    return width * (1 << 20)  # a state's memory grows with its width (memory_plan.state_memory)


# ------------------------------------------------------------ the cover
def test_the_cover_takes_the_most_reached_pairs_with_their_depth_floors_until_the_coverage():
    reached = Counter({(3, 9): 60, (3, 12): 25, (5, 16): 10, (2, 5): 4, (4, 7): 1})
    cover = cover_states(reached, (5, 16), StateCap(max_states=8, coverage=0.95), width_bytes, 80 * GIB)
    # startup (5, 16) and its floor (5, 2) always; (3, 9) + floor (3, 2); (3, 12) makes 95 %
    assert cover.states == ((3, 2), (3, 9), (3, 12), (5, 2), (5, 16))
    assert (cover.iterations, cover.exact, cover.coverage) == (100, 95, 0.95)
    assert cover.memory == (2 + 9 + 12 + 2) * (1 << 20)  # the startup state is SGLang's own


def test_the_cap_on_states_and_memory_stops_the_cover_short_of_its_coverage():
    reached = Counter({(3, 9): 60, (3, 12): 25, (5, 16): 10, (2, 5): 4, (4, 7): 1})
    few = cover_states(reached, (5, 16), StateCap(max_states=4, coverage=0.99), width_bytes, 80 * GIB)
    assert len(few.states) == 4 and few.coverage == 0.70  # (3, 9) and its floor: 60 + 10
    small = cover_states(reached, (5, 16), StateCap(max_states=8, max_memory_share=14 / 1024 / 80, coverage=0.99),
                         width_bytes, 80 * GIB)
    assert small.states == ((3, 2), (3, 9), (5, 2), (5, 16)) and small.memory == 13 << 20  # (3, 12) would pass 14 MiB


def test_the_zero_step_state_is_kept_when_reached_and_the_cap_must_hold_the_minimum():
    reached = Counter({NO_DRAFT: 30, (2, 6): 70})
    cover = cover_states(reached, (4, 10), StateCap(max_states=5), width_bytes, 80 * GIB)
    assert cover.states == (NO_DRAFT, (2, 2), (2, 6), (4, 2), (4, 10)) and cover.coverage == 1.0
    with pytest.raises(ValueError, match="does not hold even the startup state"):
        cover_states(reached, (4, 10), StateCap(max_states=2), width_bytes, 80 * GIB)
    with pytest.raises(ValueError, match=r"exceed the startup state \(4, 10\)"):
        cover_states(Counter({(5, 6): 1}), (4, 10), StateCap(), width_bytes, 80 * GIB)


# ------------------------------------------------------------ the replay
def test_reached_widths_are_what_tunes_replay_verifies_and_depths_what_the_worker_forecasts():
    traces = recorded_traces(40)
    counted, replayed = make_policy("cast", settings()), make_policy("cast", settings())
    depths = set()
    for trace in traces:
        depth, width = reached_pair(trace, counted)
        probe = replayed.begin(trace.batch_size, int(trace.context_lens.max()))
        roots = trace.child_probs[:, 0, :]
        assert depth == probe.reachable_depth(roots, probe.predict_depth(roots))  # the worker's depth choice
        outcome = replay_iteration(trace, replayed)  # tune's replay: the same plan, trees and FIFOs
        assert width - 1 == outcome.verified
        depths.add(depth)
    assert len(depths) > 1  # guard: the FIFOs move the forecast
    assert sum(reached_states(traces, make_policy("cast", settings())).values()) == len(traces)


def test_a_buckets_lookup_branch_deepens_the_reached_state_to_its_longest_proposal_and_widens_it_as_replay():
    """The worker raises the iteration's depth to hold the branch (``iteration_depth``)
    and verifies the grafted tree's ranking; ``reached_pair`` asks the states for the same."""
    traces = recorded_traces(40, seed=4, lookup=LOOKUP)
    # shorter than recorded: replay grafts any shorter branch; a strict C2 keeps the forecast
    # shallow enough for branches to reach past it
    branched = settings((0.3, 2.0, 0.8)).with_lookup(5)
    counted, replayed = make_policy("cast", branched), make_policy("cast", branched)
    raised = 0
    for trace in traces:
        depth, width = reached_pair(trace, counted)
        probe = replayed.begin(trace.batch_size, int(trace.context_lens.max()))
        roots = trace.child_probs[:, 0, :]
        reachable = probe.reachable_depth(roots, probe.predict_depth(roots))  # the worker's depth choice
        outcome = replay_iteration(trace, replayed)  # tune's replay, branch grafted
        longest = max(min(5, len(p.tokens)) for p in trace.proposals)
        assert depth == max(reachable, longest) and width - 1 == outcome.verified
        raised += depth > reachable
    assert raised  # guard: some branch reaches past the forecast depth


def test_the_worker_runs_every_covered_pair_in_exactly_that_state():
    traces = recorded_traces(80, seed=5)
    reached = reached_states(traces, make_policy("cast", settings()))
    shape = StaticShape(SHAPE.max_depth, SHAPE.top_k, SHAPE.num_verify_tokens)
    cover = cover_states(reached, (shape.num_steps, shape.num_draft_tokens), StateCap(max_states=8),
                         width_bytes, 80 * GIB)
    decider = CastDecider(make_policy("cast", settings()), shape, cover.states)
    assert decider.states == cover.states
    exact = sum(count for (depth, width), count in reached.items()
                if decider.depth(depth) == depth and decider.width(depth, width - 1, 1 << 10) == width)
    assert exact == cover.exact and len(reached) > 2
    assert cover.coverage >= 0.99 or len(cover.states) == 8


# ------------------------------------------------------ the profile section
def profile(section) -> Profile:
    return Profile("h100", "NVIDIA H100", "analytic", settings(), provenance={"sglang": section})


def test_the_section_is_read_from_the_profiles_provenance():
    section = SGLangSection.of(profile({"parallel": {"tp_size": 4}, "state_cap": {"max_states": 6},
                                        "runtime_states": [[5, 16], [3, 9], [0, 1]], "replay": {"iterations": 9}}))
    assert section.parallel == ParallelLayout(4, 1) and section.cap == StateCap(max_states=6)
    assert section.runtime_states == (NO_DRAFT, (3, 9), (5, 16))
    assert SGLangSection.of(replace(profile({}), provenance={})) == SGLangSection()


@pytest.mark.parametrize("section, message", [
    ({"parallel": {"tp_size": 0}}, "profile.provenance.sglang.parallel.tp_size: expected an integer >= 1"),
    ({"parallel": {"dp_size": 2}}, "profile.provenance.sglang.parallel: unknown field(s) ['dp_size']"),
    ({"state_cap": {"max_memory_share": 1.5}}, "profile.provenance.sglang.state_cap.max_memory_share: expected"),
    ({"runtime_states": [[3, 9], [3]]}, "profile.provenance.sglang.runtime_states[1]: expected [depth >= 1"),
    ({"runtime_states": []}, "profile.provenance.sglang.runtime_states: expected a non-empty list"),
    ({"states": []}, "profile.provenance.sglang: unknown field(s) ['states']"),
])
def test_a_bad_section_is_refused_naming_the_field(section, message):
    with pytest.raises(ProfileError) as refused:
        SGLangSection.of(profile(section))
    assert message in str(refused.value)
