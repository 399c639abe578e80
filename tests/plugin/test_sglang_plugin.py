"""The SGLang plugin's pure parts: they run without SGLang installed.

The worker's decisions (breadth ``n_i``, depth, rerank ``k``) must equal the
native engine's on the same draft distributions; its tree must be the native
tree written in SGLang's static flat layout; launch flags must be translated or
refused with a clear message; profiles must hot-reload.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sglang_cast.cast import (ContextLookup, DraftTree, PolicySettings, Proposal, Thresholds, TreeShape, grow_tree,
                              make_policy, select_verified)
from sglang_cast.profile import ProfileError, save_profile
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.drafting import DraftedTree, draft_masked_tree, roots_to_host
from sglang_cast.sglang_plugin.launch import plugin_environment, translate_args, validate
from sglang_cast.sglang_plugin.lookup_branch import batch_contexts, iteration_depth, propose, request_context
from sglang_cast.sglang_plugin.plugin_config import PROFILE_ENV, StaticShape, draft_is_eagle3
from sglang_cast.sglang_plugin.reload import ProfileWatcher
from sglang_cast.sglang_plugin.runtime_shapes import (choose_depth, choose_width, draft_depths, max_nodes,
                                                      verify_widths, widths_at_depth)
from sglang_cast.sglang_plugin.verify_layout import flat_numbering, verifiable_ranking, verify_layout
from support.synthetic import PathModel
from support.plugin import (Float32Model, SGLangLayoutDraft, launch_args, no_draft_above_two, steep_costs,
                            two_bucket_settings, unused_forwards, worker_iteration)


# ------------------------------------------------------ decisions = native
@pytest.mark.parametrize("policy", ["cast", "goodput", "eagle2"])
@pytest.mark.parametrize("thresholds", [Thresholds(0.3, 0.5, 0.8), Thresholds(2.0, 3.0, 1.5), Thresholds(0.05, 8, 4)])
@pytest.mark.parametrize("expected_depth", [None, 1, 6])  # the plan's prediction, too shallow, too deep
def test_worker_decisions_equal_the_native_engine(policy, thresholds, expected_depth):
    settings = two_bucket_settings(thresholds)
    native, worker = make_policy(policy, settings), make_policy(policy, settings)
    decider = CastDecider(worker, StaticShape(num_steps=6, topk=5, num_draft_tokens=20))
    model = Float32Model(vocab=24, seed=7)
    rng = random.Random(1)
    for iteration in range(12):
        batch = rng.choice([1, 2, 3, 5])
        roots = torch.tensor([rng.randrange(24) for _ in range(batch)])
        context = rng.randrange(0, 2500)
        native_plan = native.begin(batch, context)
        native_tree = grow_tree(native_plan, model, roots)
        native_k = native_plan.verify_count(native_tree)
        plan, drafted, k, forwards, expected = worker_iteration(decider, model, roots, context, topk=5,
                                                                max_steps=6, expected_depth=expected_depth)
        where = f"iteration {iteration} (batch {batch}, context {context})"
        assert plan.kept == native_plan.kept, where  # n_i per layer, hence the depth
        assert k == native_k, where
        # one draft forward per layer after the first, and one more only where the
        # draft stopped below the depth forwards were launched early for
        assert forwards == len(plan.kept) - 1 + unused_forwards(plan, expected, 6), where
        for name in ("tokens", "parents", "values", "depths"):
            assert np.array_equal(getattr(drafted.tree, name), getattr(native_tree, name)), f"{name} at {where}"
        for layer in range(1, 7):  # depth-pruning FIFOs evolve identically
            assert worker.depth_ratios().mean(layer) == native.depth_ratios().mean(layer), where


def test_a_draft_of_d_layers_copies_to_the_host_d_times(monkeypatch):
    """Host decisions between layers cost one device-to-host copy per layer after
    the first; layer 1 is decided on the roots' copy, which the depth choice makes
    anyway.  Every copy carries a whole layer, not one tensor."""
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=4, max_depth=5, num_verify_tokens=16))
    plan = make_policy("eagle2", settings).begin(2, 10)
    draft = SGLangLayoutDraft(Float32Model(), torch.tensor([1, 2]), topk=4)
    root_probs, root_tokens = draft.root_children()
    copies = []
    real_cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: copies.append(self.shape) or real_cpu(self, *a, **k))
    roots = roots_to_host(root_probs, root_tokens, torch.tensor([1, 2]))
    drafted = draft_masked_tree(plan, root_probs, root_tokens, roots, draft, 5, expected_depth=5)
    assert drafted.depth == 5 and len(copies) == 5
    # The roots: K probabilities, K tokens and the root token per sequence; then values,
    # rows and tokens of all K·K ranked children of a layer (the rerank pool).
    assert copies == [torch.Size([2, 4 + 4 + 1])] + [torch.Size([3, 2, 16])] * 4


@pytest.mark.parametrize("expected_depth, layer_events", [(4, ["forward", "keep"]), (1, ["keep", "forward"])])
def test_a_layers_draft_forward_is_launched_before_its_decisions_where_the_depth_is_expected(
        expected_depth, layer_events, monkeypatch):
    """Each copy waits for the device.  Right after it, the layer's draft forward is
    launched (its inputs do not depend on the layer's ``keep``) where the predicted
    depth says it will be needed, else after ``grow``; the decisions and the tree's
    bookkeeping run while the device drafts."""
    from sglang_cast.cast import DraftTree

    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=4, max_depth=4, num_verify_tokens=16))
    plan = make_policy("eagle2", settings).begin(2, 10)
    draft = SGLangLayoutDraft(Float32Model(), torch.tensor([1, 2]), topk=4)
    root_probs, root_tokens = draft.root_children()
    roots = roots_to_host(root_probs, root_tokens, torch.tensor([1, 2]))
    events = []
    real_cpu, real_add_layer, real_keep = torch.Tensor.cpu, DraftTree.add_layer, plan.keep
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: events.append("copy") or real_cpu(self, *a, **k))
    monkeypatch.setattr(DraftTree, "add_layer", lambda self, *a: events.append("tree") or real_add_layer(self, *a))
    monkeypatch.setattr(plan, "keep", lambda *a: events.append("keep") or real_keep(*a))

    def forward(tokens, rows, step):
        events.append("forward")
        return draft(tokens, rows, step)

    drafted = draft_masked_tree(plan, root_probs, root_tokens, roots, forward, 4, expected_depth)
    assert drafted.depth == 4 and events == (layer_events + ["tree", "copy"]) * 3 + ["keep", "tree"]


def test_the_roots_copy_is_exact():
    """Token ids travel as float64 with the probabilities: exact below 2^53."""
    probs = torch.tensor([[0.5, 0.25], [0.7, 0.1]], dtype=torch.float32)
    tokens = torch.tensor([[128255, 3], [2**40 + 1, 0]])
    roots = roots_to_host(probs, tokens, torch.tensor([7, 2**31 - 1], dtype=torch.int32))
    assert torch.equal(roots.values, probs.double()) and torch.equal(roots.tokens, tokens)
    assert torch.equal(roots.bonus, torch.tensor([7, 2**31 - 1]))
    values, rows, layer_tokens = roots.layer_one(width=1)
    assert torch.equal(values, torch.tensor([[0.5, -1.0], [0.7, -1.0]], dtype=torch.float32).double())
    assert torch.equal(rows, torch.zeros(2, 2, dtype=torch.long)) and torch.equal(layer_tokens, tokens)


def test_cast_actually_prunes_in_these_comparisons():
    """Guard for the test above: the thresholds used there do prune breadth and depth."""
    settings = two_bucket_settings(Thresholds(2.0, 3.0, 1.5))
    decider = CastDecider(make_policy("cast", settings), StaticShape(6, 5, 20))
    plan, drafted, k, _, _ = worker_iteration(decider, Float32Model(vocab=24, seed=7), torch.tensor([3]), 100, 5, 6)
    assert min(plan.kept) < plan.top_k or len(plan.kept) < plan.max_depth
    assert 1 <= k <= drafted.tree.size - 1


def test_static_depth_caps_the_tree():
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=3, max_depth=6, num_verify_tokens=16))
    decider = CastDecider(make_policy("eagle2", settings), StaticShape(2, 3, 7))
    plan, drafted, _, forwards, _ = worker_iteration(decider, Float32Model(), torch.tensor([1, 2]), 10, 3, max_steps=2)
    assert drafted.depth == 2 and forwards == 1 and int(drafted.tree.depths.max()) == 2


def test_a_profile_wider_than_sglangs_topk_is_refused():
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=6, max_depth=2, num_verify_tokens=8))
    plan = make_policy("cast", settings).begin(1, 10)
    draft = SGLangLayoutDraft(PathModel(), torch.tensor([1]), topk=4)
    with pytest.raises(ValueError, match="top_k=6.*--speculative-eagle-topk 4"):
        root_probs, root_tokens = draft.root_children()
        draft_masked_tree(plan, root_probs, root_tokens, roots_to_host(root_probs, root_tokens, torch.tensor([1])),
                          draft, 2, expected_depth=2)


# ------------------------------------------------------------ the layout
def kernel_parent_position(layout, topk: int, b: int, i: int) -> int:
    """What SGLang's ``build_tree_kernel_efficient`` computes for verify node ``i``
    (1-based): its parent's position, from the flat ids and ``parent_list`` alone
    (``cpu_standins.kernels._parent_slot`` states the same rule as a kernel)."""
    block = int(layout.top_scores_index[b, i - 1]) // topk
    if block == 0:
        return 0  # a child of the root
    parent_flat = int(layout.parent_list[b, block])
    return int((layout.top_scores_index[b] == parent_flat).nonzero()[0, 0]) + 1


def kernel_depth(layout, topk: int, b: int, i: int) -> int:
    """How deep the kernel finds verify node ``i``: its ancestor walk from the flat ids."""
    depth = 0
    while i:
        i, depth = kernel_parent_position(layout, topk, b, i), depth + 1
    return depth


@pytest.mark.parametrize("seed", range(6))
def test_flat_ids_encode_the_verified_subtree_the_way_sglang_reads_them(seed):
    rng = random.Random(seed)
    topk = rng.choice([2, 3, 4])
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=topk, max_depth=rng.choice([1, 3, 5]),
                                                              num_verify_tokens=16),
                                     Thresholds(rng.choice([0.2, 1.0]), rng.choice([0.3, 2.0]), 0.5))
    decider = CastDecider(make_policy(rng.choice(["cast", "goodput", "eagle2"]), settings),
                          StaticShape(5, topk, 16))
    roots = torch.tensor([rng.randrange(12) for _ in range(3)])
    _, drafted, k, _, _ = worker_iteration(decider, Float32Model(seed=seed), roots, 300, topk, 5)
    width = decider.width(5, k, drafted.tree.size - 1)
    layout = verify_layout(drafted, width, 5)
    assert layout.width == width and layout.top_scores_index.shape == (3, width - 1)
    expected = select_verified(drafted.tree, width - 1)
    assert torch.equal(layout.verified.parents, expected.parents)
    assert torch.equal(layout.draft_tokens, expected.tokens[:, 1:])
    # parent_list has the depth-5 state's row width; entries no verified node points at are -1
    assert layout.parent_list.shape == (3, 1 + topk * 4)
    for b in range(3):
        for i in range(1, width):
            assert kernel_parent_position(layout, topk, b, i) == int(expected.parents[b, i])
        used = {int(f) // topk for f in layout.top_scores_index[b]} - {0}
        assert all(int(layout.parent_list[b, q]) == -1 for q in range(1, 1 + topk * 4) if q not in used)
    # every id is unique, and ids grow along every path (a parent's id is below its children's)
    flat = layout.top_scores_index
    assert all(len(set(row.tolist())) == width - 1 for row in flat)
    parents = expected.parents[:, 1:]
    assert all(flat[b, i] > flat[b, int(parents[b, i]) - 1] for b in range(3) for i in range(width - 1)
               if parents[b, i] > 0)


def test_flat_numbering_refuses_a_subtree_the_kernel_cannot_hold():
    chain = np.array([[-1, 0, 1, 2]])  # root -> 1 -> 2 -> 3
    parent_list, flat = flat_numbering(chain, topk=2, state_depth=3)
    assert parent_list.tolist() == [[-1, 0, 2, -1, -1]] and flat.tolist() == [[0, 2, 4]]
    with pytest.raises(ValueError, match="does not fit a depth-2 state of topk 2"):  # 3 parents, room for 2
        flat_numbering(np.array([[-1, 0, 1, 2, 3]]), topk=2, state_depth=2)
    with pytest.raises(ValueError, match="more than 2 children per node"):
        flat_numbering(np.array([[-1, 0, 0, 0]]), topk=2, state_depth=2)


def grafted(tokens, parents, values, drafted_layers: int, topk: int) -> DraftedTree:
    """One sequence's tree of given nodes whose first ``drafted_layers`` layers the head
    drafted (the rest came from a graft)."""
    return DraftedTree(tree=DraftTree.from_nodes([tokens], [parents], [values]), depth=drafted_layers, topk=topk)


def test_a_grafted_branch_is_verified_only_as_far_as_the_state_holds_it():
    # Drafted: root -> a (.5), b (.3).  Grafted: root -> c (.9) -> d (.8) -> e (.7) -> f (.6).
    drafted = grafted([0, 11, 12, 13, 14, 15, 16], [-1, 0, 0, 0, 3, 4, 5], [1, .5, .3, .9, .8, .7, .6], 1, topk=2)
    assert drafted.grafted
    c, d, a = 3, 4, 1
    # depth 2: e and f are too deep; the root already has topk = 2 children (c, a) when b comes
    assert verifiable_ranking(drafted, 2, limit=10).tolist() == [[c, d, a]]
    assert verifiable_ranking(drafted, 2, limit=2).tolist() == [[c, d]]
    layout = verify_layout(drafted, 4, 2)
    assert layout.verified.node_ids.tolist() == [[0, c, d, a]]
    assert layout.top_scores_index.tolist() == [[0, 2, 1]] and layout.parent_list.tolist() == [[-1, 0, -1]]
    assert [kernel_parent_position(layout, 2, 0, i) for i in (1, 2, 3)] == [0, 1, 0]
    with pytest.raises(ValueError, match="a width-5 verify needs 4 nodes per sequence, the ranking has 3"):
        verify_layout(drafted, 5, 2)
    # depth 4 holds the whole branch; b still finds the root's block full
    assert verifiable_ranking(drafted, 4, limit=10).tolist() == [[c, d, 5, 6, a]]


def test_a_grafted_tree_keeps_to_the_parents_a_state_has_room_for():
    # topk 2, depth 3: room for 2·(3-1) = 4 parents besides the root.  A full binary tree
    # three deep has six (a, b and their four children): b1 and b2's children are left out.
    tokens = list(range(11))
    parents = [-1, 0, 0, 1, 1, 2, 2, 3, 4, 5, 6]  # a b | a1 a2 b1 b2 | under a1, a2, b1, b2
    values = [1, .9, .88, .87, .86, .85, .84, .83, .82, .81, .8]
    drafted = grafted(tokens, parents, values, 2, topk=2)
    assert verifiable_ranking(drafted, 3, limit=10).tolist() == [[1, 2, 3, 4, 5, 6, 7, 8]]
    layout = verify_layout(drafted, 9, 3)
    assert all(kernel_parent_position(layout, 2, 0, i) == int(layout.verified.parents[0, i]) for i in range(1, 9))
    assert max(kernel_depth(layout, 2, 0, i) for i in range(1, 9)) == 3
    # the drafted tree alone (no graft) is the ranking itself, without a walk
    assert verifiable_ranking(replace(drafted, depth=3), 3, limit=4).tolist() == [[1, 2, 3, 4]]


# ---------------------------------------------------- the prompt-lookup branch
def test_a_requests_context_is_its_prompt_and_output_when_they_end_at_the_root():
    from array import array

    prompt, output = [5, 6, 7, 8], array("q", [9, 5, 6])  # SGLang keeps output_ids as array("q")
    assert request_context(prompt, output, root=6, window=100).tolist() == [5, 6, 7, 8, 9, 5, 6]
    assert request_context(prompt, output, root=6, window=5).tolist() == [7, 8, 9, 5, 6]
    assert request_context(prompt, output, root=6, window=2).tolist() == [5, 6]
    assert request_context(prompt, [], root=8, window=3).tolist() == [6, 7, 8]
    # results one iteration behind (overlap scheduling): the context does not end at the root
    assert request_context(prompt, output, root=7, window=100) is None
    assert request_context([], [], root=7, window=100) is None
    lookup = ContextLookup(depth=3)
    reqs = [SimpleNamespace(origin_input_ids_unpadded=prompt, output_ids=output)] * 2  # SGLang's Req fields
    contexts = batch_contexts(reqs, torch.tensor([6, 7]), 100)
    assert contexts[0].tolist() == [5, 6, 7, 8, 9, 5, 6] and contexts[1] is None
    proposals = propose(lookup, contexts)
    assert proposals == [Proposal([7, 8, 9], 2), Proposal.none()]  # "5 6" occurred before, then 7 8 9
    # the state's depth holds the longest proposal, up to the branch's depth, and the plan's prediction
    assert iteration_depth(1, lookup, proposals) == 3 and iteration_depth(1, ContextLookup(depth=2), proposals) == 2
    assert iteration_depth(4, lookup, proposals) == 4 and iteration_depth(1, None, proposals) == 1


def test_the_decider_runs_a_buckets_branch_unless_overlap_scheduling_is_on():
    settings = two_bucket_settings(Thresholds())
    branched = replace(settings, buckets=(replace(settings.buckets[0], lookup_depth=8), settings.buckets[1]))
    shape = StaticShape(6, 4, 20)
    on = CastDecider(make_policy("cast", branched), shape)
    assert on.lookup(on.begin(1, 10)) == ContextLookup(depth=8) and on.lookup(on.begin(5, 10)) is None
    assert on.lookup_notes(branched) == ["bucket max_batch_size=2: its 8-token prompt-lookup branch is verified at "
                                         "most 6 deep (the deepest runtime state)"]
    assert on.lookup_notes(settings) == []
    quiet = replace(branched, buckets=(replace(branched.buckets[0], speculate=False), branched.buckets[1]))
    assert on.lookup_notes(quiet) == []  # a bucket that does not draft grafts nothing ...
    plain = CastDecider(make_policy("cast", quiet), shape)
    assert plain.lookup(plain.begin(1, 10)) is None  # ... even where it must draft (no zero-step state built)
    off = CastDecider(make_policy("cast", branched), shape, lookup_enabled=False)
    assert off.lookup(off.begin(1, 10)) is None
    assert "prompt-lookup branches are off" in off.lookup_notes(branched)[0]
    assert off.lookup_notes(settings) == []
    assert off.clamps(branched)[0] == off.lookup_notes(branched)[0]  # said again on a hot reload


def test_verify_widths_and_choice():
    assert verify_widths(20, [12, 20, 30, 1]) == (2, 4, 8, 12, 16, 20)
    assert verify_widths(2, []) == (2,)
    widths = (2, 4, 8, 16)
    assert choose_width(3, 40, widths) == 4  # smallest width holding root + 3 nodes
    assert choose_width(4, 40, widths) == 8
    assert choose_width(20, 40, widths) == 16  # capped: the best 15 nodes
    assert choose_width(5, 5, widths) == 4  # a small tree cannot fill width 8
    with pytest.raises(ValueError, match="at least|>= 2"):
        verify_widths(1, [])
    with pytest.raises(ValueError, match="no pre-built verify width"):
        choose_width(1, 0, widths)


def test_draft_depths_and_the_state_catalogue():
    assert draft_depths(6, [6, 3, 9, 0]) == (1, 2, 3, 4, 6)
    assert draft_depths(1, []) == (1,)
    with pytest.raises(ValueError, match="--speculative-num-steps"):
        draft_depths(0, [])
    assert choose_depth(3, (1, 2, 4, 6)) == 4 and choose_depth(1, (1, 2, 4, 6)) == 1
    assert choose_depth(0, (1, 2, 4)) == 1 and choose_depth(9, (1, 2, 4)) == 4
    # topk 4: one layer drafts the root's 4 children; every deeper layer the 4
    # children of each of 4 frontier rows, and every drafted child joins the rerank
    # pool: two layers offer 4 + 16 nodes (width 21)
    assert max_nodes(4, 1) == 4 and max_nodes(4, 2) == 20 and max_nodes(4, 3) == 36
    assert widths_at_depth((2, 4, 8, 16, 20, 24), 1, 4) == (2, 4)
    assert widths_at_depth((2, 4, 8, 16, 20, 24), 2, 4) == (2, 4, 8, 16, 20)
    decider = CastDecider(make_policy("cast", two_bucket_settings(Thresholds())), StaticShape(6, 4, 20))
    # powers of two, the buckets' num_verify_tokens (20, 12) and their one-layer trees
    # whole (top-k 4 and 3: widths 5 and 4), at every depth that can fill them
    assert decider.depths == (1, 2, 4, 6) and decider.widths == (2, 4, 5, 8, 12, 16, 20)
    assert decider.states[:4] == ((1, 2), (1, 4), (1, 5), (2, 2)) and decider.states[-1] == (6, 20)
    assert len(decider.states) == 3 + 7 + 7 + 7


def test_the_fallback_grid_verifies_a_one_layer_tree_whole_at_every_depth():
    """A top-k-2 bucket launched with ``--speculative-eagle-topk 4``: a one-layer tree
    has two nodes, and when the rerank wants both a width-3 state verifies them (the
    grid's powers of two alone offered width 2, one node, at every depth)."""
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=2, max_depth=6, num_verify_tokens=10),
                                     Thresholds())
    decider = CastDecider(make_policy("cast", settings), StaticShape(6, 4, 10))
    assert [decider.width(depth, 2, 2) for depth in decider.depths] == [3] * len(decider.depths)


def test_a_two_layer_eagle2_draft_offers_every_drafted_child_to_the_rerank():
    """Guard for ``max_nodes``: the pool holds topk + topk² nodes after two layers."""
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=4, max_depth=2, num_verify_tokens=21))
    decider = CastDecider(make_policy("eagle2", settings), StaticShape(2, 4, 21))
    _, drafted, _, _, _ = worker_iteration(decider, Float32Model(vocab=16), torch.tensor([1, 2]), 50, 4, 2)
    assert drafted.tree.size - 1 == max_nodes(4, 2) == 20


def test_named_runtime_states_replace_the_grid_with_the_startup_state_and_floors_added():
    settings = two_bucket_settings(Thresholds())
    decider = CastDecider(make_policy("cast", settings), StaticShape(6, 4, 20), ((3, 9), (6, 12), (1, 4)))
    assert decider.states == ((1, 2), (1, 4), (3, 2), (3, 9), (6, 2), (6, 12), (6, 20))
    assert decider.depths == (1, 3, 6) and decider.widths_at(3) == (2, 9)
    assert decider.depth(2) == 3 and decider.width(3, 5, 30) == 9 and decider.width(3, 5, 4) == 2
    for bad in ((7, 4), (6, 21), (1, 6)):  # too deep, too wide, more than one layer drafts (4 nodes)
        with pytest.raises(ValueError, match=re.escape(f"runtime states [{bad}] do not fit")):
            CastDecider(make_policy("cast", settings), StaticShape(6, 4, 20), (bad,))


# ------------------------------------------------------ depth prediction
@pytest.mark.parametrize("policy", ["cast", "goodput", "eagle2", "cast-rerank-depth"])
@pytest.mark.parametrize("c2", [0.5, 3.0, 12.0])
def test_predicted_depth_is_the_depth_drafted_when_layers_follow_the_fifos(policy, c2):
    settings = two_bucket_settings(Thresholds(0.4, c2, 0.8))
    pol = make_policy(policy, settings)
    ratios = [0.7, 0.6, 0.9, 0.5, 0.8]
    for layer, ratio in enumerate(ratios, start=1):  # teach the FIFOs these ratios
        for _ in range(4):
            pol.depth_ratios().push(layer, ratio)
    roots = torch.tensor([[0.6, 0.2, 0.1, 0.05], [0.9, 0.05, 0.02, 0.01]], dtype=torch.float64)
    plan = pol.begin(2, 300)
    predicted = plan.predict_depth(roots)
    assert plan.kept == [] and plan.draft_ms == 0.0  # the probe left the plan alone
    assert [pol.depth_ratios().mean(i) for i in range(1, 6)] == pytest.approx(ratios)  # and the FIFOs
    # A draft whose layer-i values are layer 1's scaled by the FIFO means so far:
    # its layers follow the FIFOs exactly, so the prediction must be exact.
    values = [roots]
    for i in range(1, 6):
        values.append(values[-1] * pol.depth_ratios().mean(i))
    layer = 1
    while True:  # the exact rule, layer by layer
        plan.keep(layer, values[layer - 1])
        if not plan.grow(layer):
            break
        layer += 1
    assert predicted == layer
    if policy == "eagle2":
        assert predicted == plan.max_depth


@pytest.mark.parametrize("policy, thresholds", [("cast", Thresholds(0.05, 50.0, 0.8)), ("goodput", Thresholds())])
def test_stops_at_the_predicted_states_depth_count_so_the_depth_probe_still_comes(policy, thresholds):
    """The worker drafts in the state of the predicted depth.  Where the depth rule stops
    after layer 1 iteration after iteration, the native engine re-tests layer 2 at the
    16th stop in a row (docs/cast_decisions.md D9); so must the worker, whose state of
    depth 1 ends every draft at layer 1: its stops there count too."""
    settings = two_bucket_settings(thresholds)
    native, worker = make_policy(policy, settings), make_policy(policy, settings)
    decider = CastDecider(worker, StaticShape(num_steps=6, topk=4, num_draft_tokens=20))
    model = Float32Model(vocab=24, seed=7)
    native_depths, worker_depths = [], []
    for _ in range(2 * native.depth_probe_every + 2):
        native_plan = native.begin(1, 1500)
        grow_tree(native_plan, model, torch.tensor([3]))
        plan, *_ = worker_iteration(decider, model, torch.tensor([3]), 1500, topk=4, max_steps=None)
        native_depths.append(len(native_plan.kept))
        worker_depths.append(len(plan.kept))
    assert native_depths.count(1) > native.depth_probe_every and max(native_depths) > 1  # stops, then a probe
    assert worker_depths == native_depths


def test_predicted_depth_of_a_plan_that_does_not_speculate_is_zero():
    settings = PolicySettings(buckets=(replace(two_bucket_settings(Thresholds()).buckets[0], speculate=False),),
                              costs=steep_costs())
    assert make_policy("cast", settings).begin(1, 10).predict_depth(torch.ones(1, 4)) == 0


def test_the_thresholds_above_give_different_predicted_depths():
    """Guard for the parametrised test: its C2 values do move the prediction."""
    depths = set()
    for c2 in (0.5, 3.0, 12.0):
        pol = make_policy("cast", two_bucket_settings(Thresholds(0.4, c2, 0.8)))
        depths.add(pol.begin(2, 300).predict_depth(torch.tensor([[0.6, 0.2, 0.1, 0.05]] * 2)))
    assert len(depths) >= 2


# ------------------------------------------------------------ static shape
def test_static_shape_covers_and_names_what_does_not_fit():
    settings = two_bucket_settings(Thresholds())
    assert StaticShape.covering(settings) == StaticShape(num_steps=6, topk=4, num_draft_tokens=20)
    problems = StaticShape(5, 4, 16).misfits(settings)
    assert problems == ["bucket max_batch_size=2 has max_depth=6 but SGLang runs with --speculative-num-steps 5",
                        "bucket max_batch_size=2 has num_verify_tokens=20 but SGLang runs with "
                        "--speculative-num-draft-tokens 16"]
    StaticShape(2, 4, 21).check()  # 4 + 16 nodes and the root
    with pytest.raises(ValueError, match=r"topk \+ topk\^2\*\(steps-1\) \+ 1 = 21\]"):
        StaticShape(2, 4, 22).check()
    with pytest.raises(ValueError, match="--speculative-eagle-topk must be >= 2 for CAST, got 1"):
        StaticShape(3, 1, 4).check()
    chain = PolicySettings.single(steep_costs(), TreeShape(top_k=1, max_depth=3, num_verify_tokens=4))
    assert StaticShape.covering(chain) == StaticShape(3, 2, 4)
    off = replace(settings, buckets=(settings.buckets[0], replace(settings.buckets[1], speculate=False)))
    assert StaticShape.covering(off).misfits(off) == []  # speculate=false runs SGLang's zero-step state
    branched = replace(settings, buckets=(replace(settings.buckets[0], lookup_depth=8), settings.buckets[1]))
    # a branch drafts nothing, but its graft is verified only as deep as the state
    assert StaticShape.covering(branched) == StaticShape(num_steps=8, topk=4, num_draft_tokens=20)


def test_a_bucket_that_does_not_speculate_adds_the_zero_step_state_and_drafts_off_by_batch_size():
    decider = CastDecider(make_policy("cast", no_draft_above_two()), StaticShape(6, 4, 20))
    assert decider.states[0] == (0, 1) and decider.has_no_draft_state
    assert [decider.drafts(b) for b in (1, 2, 3, 64)] == [True, True, False, False]
    # EAGLE-2 drafts everywhere: no zero-step state is built for it
    eagle2 = CastDecider(make_policy("eagle2", no_draft_above_two()), StaticShape(6, 4, 20))
    assert (0, 1) not in eagle2.states and eagle2.drafts(64)
    # a reload that turns drafting off without a zero-step state keeps drafting, and says so
    drafting = CastDecider(make_policy("cast", two_bucket_settings(Thresholds())), StaticShape(6, 4, 20))
    drafting.policy.reconfigure(no_draft_above_two())
    assert drafting.drafts(64)
    assert "speculate: false buckets keep drafting" in drafting.clamps(no_draft_above_two())[0]


# ------------------------------------------------------------ launch flags
def test_cast_translates_to_sglang_flags_with_the_profiles_largest_tree(profile_path, eagle3_head):
    args = launch_args(speculative_algorithm="cast", speculative_draft_model_path=str(eagle3_head),
                       cast_profile=profile_path, api_key="secret", device="cuda:1")
    validate(args)
    assert translate_args(args) == [
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--device", "cuda", "--base-gpu-id", "1",
        "--attention-backend", "flashinfer",
        "--host", "127.0.0.1", "--port", "30000", "--max-running-requests", "8", "--context-length", "4096",
        "--api-key", "secret", "--speculative-algorithm", "CAST", "--speculative-draft-model-path", str(eagle3_head),
        "--speculative-num-steps", "6", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "20"]
    assert plugin_environment(args) == {PROFILE_ENV: str(profile_path.resolve())}


@pytest.mark.parametrize("algorithm", ["NONE", "EAGLE", "CAST"])
def test_on_the_cpu_every_algorithm_runs_sglangs_cpu_engine_with_the_intel_amx_backend(
        algorithm, profile_path, eagle3_head):
    """EAGLE's tree attention on SGLang's CPU engine needs intel_amx (torch_native is refused), and
    plain decoding, EAGLE and CAST are compared on the same attention."""
    spec = {} if algorithm == "NONE" else dict(speculative_draft_model_path=str(eagle3_head))
    args = launch_args(speculative_algorithm=algorithm, device="cpu",
                       cast_profile=profile_path if algorithm == "CAST" else None, **spec)
    validate(args)
    argv = translate_args(args)
    assert argv[2:10] == ["--device", "cpu", "--attention-backend", "intel_amx", "--disable-cuda-graph",
                          "--sleep-on-idle", "--dtype", "float32"]
    assert argv.count("--attention-backend") == 1 and argv.count("--disable-cuda-graph") == 1


def test_cpu_serve_adds_only_the_cpu_flags_sglangs_own_command_line_lacks(monkeypatch):
    """``cpu_serve`` runs SGLang's own flags (``--speculative-adaptive``, say) with what every
    CPU server needs; a flag given stays as given and is not repeated."""
    from sglang_cast.sglang_plugin import cpu_serve

    served = []
    monkeypatch.setattr(cpu_serve, "enter_cpu_engine", lambda: None)
    monkeypatch.setattr(cpu_serve, "run_sglang_server", lambda argv, on_cpu: served.append((argv, on_cpu)))
    cpu_serve.main(["--model-path", "m", "--speculative-adaptive", "--attention-backend", "intel_amx"])
    argv, on_cpu = served[0]
    assert on_cpu and argv[:5] == ["--model-path", "m", "--speculative-adaptive", "--attention-backend", "intel_amx"]
    assert argv[5:] == ["--device", "cpu", "--disable-cuda-graph", "--sleep-on-idle"]


def test_explicit_shape_flags_win_when_they_hold_the_profile(profile_path, eagle3_head):
    args = launch_args(speculative_algorithm="GOODPUT", speculative_draft_model_path=str(eagle3_head),
                       cast_profile=profile_path, speculative_num_steps=8, speculative_eagle_topk=6,
                       speculative_num_draft_tokens=32)
    validate(args)
    argv = translate_args(args)
    assert argv[argv.index("--speculative-num-steps") + 1] == "8"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "32"


def test_disable_cuda_graph_reaches_sglang_only_when_asked(eagle3_head):
    assert "--disable-cuda-graph" not in translate_args(launch_args())
    assert "--disable-cuda-graph" in translate_args(launch_args(disable_cuda_graph=True))


def test_eagle_picks_sglangs_eagle3_for_an_eagle3_head(eagle3_head, tmp_path):
    args = launch_args(speculative_algorithm="EAGLE", speculative_draft_model_path=str(eagle3_head))
    validate(args)
    argv = translate_args(args)
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert "--speculative-num-steps" not in argv and plugin_environment(args) == {}
    eagle_head = tmp_path / "eagle-head"
    eagle_head.mkdir()
    (eagle_head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert not draft_is_eagle3(str(eagle_head))
    assert translate_args(launch_args(speculative_algorithm="NONE", host=None, port=None, max_running_requests=None,
                                      context_length=None)) == [
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--device", "cuda"]


@pytest.mark.parametrize("overrides, message", [
    (dict(speculative_algorithm="MEDUSA"), "must be one of NONE, EAGLE, CAST, GOODPUT"),
    (dict(device="tpu"), "--device must be cpu, cuda or cuda:N with --backend sglang, got 'tpu'"),
    (dict(speculative_num_steps=4), "cannot be used with --speculative-algorithm NONE"),
    (dict(cast_profile="p.yaml"), "--cast-profile cannot be used with --speculative-algorithm NONE"),
    (dict(speculative_algorithm="CAST"), "needs --speculative-draft-model-path"),
    (dict(speculative_algorithm="CAST", speculative_draft_model_path="head"), "needs --cast-profile PATH"),
    (dict(speculative_algorithm="EAGLE", speculative_draft_model_path="head", speculative_num_steps=3),
     "give all of"),
    (dict(speculative_algorithm="EAGLE", speculative_draft_model_path="head", cast_profile="p.yaml"),
     "has no effect with --speculative-algorithm EAGLE"),
    (dict(port=70000), r"--port must be in \[1, 65535\]"),
    (dict(max_running_requests=0), "--max-running-requests must be an integer >= 1"),
    (dict(speculative_algorithm="CAST", speculative_draft_model_path="head", cast_profile="/nonexistent.yaml"),
     "profile file not found"),
])
def test_unsupported_combinations_fail_with_a_clear_message(overrides, message):
    with pytest.raises(ValueError, match=message):
        validate(launch_args(**overrides))


def test_mem_fraction_static_is_passed_through_and_checked(profile_path, eagle3_head):
    args = launch_args(speculative_algorithm="CAST", speculative_draft_model_path=str(eagle3_head),
                       cast_profile=profile_path, mem_fraction_static=0.316)
    validate(args)
    argv = translate_args(args)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.316"
    assert "--mem-fraction-static" not in translate_args(launch_args())  # SGLang's default when not given
    argv = translate_args(launch_args(admin_api_key="root"))
    assert argv[argv.index("--admin-api-key") + 1] == "root"
    with pytest.raises(ValueError, match=r"--mem-fraction-static must be a number in \(0, 1\), got 1.5"):
        validate(launch_args(mem_fraction_static=1.5))


def test_a_profile_larger_than_the_given_shape_is_refused(profile_path):
    args = launch_args(speculative_algorithm="CAST", speculative_draft_model_path="head", cast_profile=profile_path,
                       speculative_num_steps=4)
    with pytest.raises(ProfileError, match="max_depth=6 but SGLang runs with --speculative-num-steps 4"):
        validate(args)


# ------------------------------------------------------------ hot reload
def test_profile_hot_reload_reconfigures_the_policy_and_keeps_it_on_bad_files(profile_path):
    from sglang_cast.profile import load_profile

    loaded = load_profile(profile_path)
    policy = make_policy("cast", loaded.profile.settings)
    watcher = ProfileWatcher(loaded, policy, StaticShape(6, 4, 20), poll_seconds=0.01)
    assert watcher.check_now() is False  # unchanged file

    stricter = replace(loaded.profile, settings=two_bucket_settings(Thresholds(5.0, 5.0, 5.0)))
    save_profile(stricter, profile_path)
    assert watcher.check_now() is True
    assert policy.settings.buckets[0].thresholds.c1 == 5.0

    profile_path.write_text("schema: 1\nlabel: [broken\n")
    assert watcher.check_now() is False
    assert "not valid YAML" in watcher.last_error and policy.settings.buckets[0].thresholds.c1 == 5.0

    too_deep = replace(loaded.profile, settings=PolicySettings.single(
        steep_costs(), TreeShape(top_k=4, max_depth=9, num_verify_tokens=20)))
    save_profile(too_deep, profile_path)
    assert watcher.check_now() is False
    assert "max_depth=9 but SGLang runs with --speculative-num-steps 6" in watcher.last_error
    assert policy.settings.buckets[0].thresholds.c1 == 5.0


def test_a_reload_between_catalogue_states_is_clamped_up_and_logged_once(profile_path, caplog):
    from sglang_cast.profile import load_profile

    loaded = load_profile(profile_path)
    decider = CastDecider(make_policy("cast", loaded.profile.settings), StaticShape(6, 4, 20))
    assert decider.depths == (1, 2, 4, 6) and decider.widths == (2, 4, 5, 8, 12, 16, 20)
    watcher = ProfileWatcher(loaded, decider.policy, decider.shape, clamps=decider.clamps)
    between = PolicySettings.single(steep_costs(), TreeShape(top_k=4, max_depth=3, num_verify_tokens=10),
                                    Thresholds(0.05, 0.05, 0.05))
    save_profile(replace(loaded.profile, settings=between), profile_path)
    with caplog.at_level("WARNING", logger="sglang_cast.sglang_plugin.reload"):
        assert watcher.check_now() is True
        assert watcher.check_now() is False  # unchanged: nothing new to say
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == "WARNING" and r.name == "sglang_cast.sglang_plugin.reload"]
    assert len(warnings) == 1
    assert "max_depth 3 runs in depth-4 states" in warnings[0]
    assert "num_verify_tokens 10 is verified in width-12 states" in warnings[0]
    # and the worker's choices do land in those states
    plan = decider.begin(1, 100)
    assert plan.max_depth == 3 and decider.depth(plan.predict_depth(torch.tensor([[0.9, 0.5, 0.4, 0.3]]))) == 4
    assert decider.width(4, 9, 12) == 12
    assert decider.clamps(loaded.profile.settings) == []  # the startup profile has a state for every value


def test_the_watcher_thread_picks_up_a_change(profile_path):
    import time

    from sglang_cast.profile import load_profile

    loaded = load_profile(profile_path)
    policy = make_policy("goodput", loaded.profile.settings)
    watcher = ProfileWatcher(loaded, policy, StaticShape(6, 4, 20), poll_seconds=0.01)
    watcher.start()
    try:
        save_profile(replace(loaded.profile, label="h100-retuned",
                             settings=two_bucket_settings(Thresholds(3.0, 1.0, 1.0))), profile_path)
        deadline = time.monotonic() + 5
        while policy.settings.buckets[0].thresholds.c1 != 3.0 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        watcher.stop()
    assert policy.settings.buckets[0].thresholds.c1 == 3.0


def test_the_launcher_refuses_pipeline_stages_and_a_profile_of_another_tp_layout(profile_path, eagle3_head):
    """--backend sglang with CAST: --pp-size > 1 is refused with SGLang's reason, and a profile
    made for TP 1 is refused, in one line, on a --tp-size 4 launch before SGLang loads."""
    cast = dict(speculative_algorithm="CAST", speculative_draft_model_path=str(eagle3_head), cast_profile=profile_path)
    with pytest.raises(ValueError, match=r"--pp-size must be 1 \(got 2\).*eagle_worker_v2.py:1508-1545"):
        validate(launch_args(**cast, pp_size=2))
    with pytest.raises(ValueError, match=r"made for --tp-size 1 --pp-size 1 but this server runs --tp-size 4") as err:
        validate(launch_args(**cast, tp_size=4))
    assert "\n" not in str(err.value)
    args = launch_args(**cast, tp_size=1, dp_size=2)
    validate(args)
    argv = translate_args(args)
    assert argv[argv.index("--dp-size") + 1] == "2" and argv[argv.index("--tp-size") + 1] == "1"


def test_our_launcher_takes_sglangs_parallel_flags_for_the_sglang_backend_only():
    from sglang_cast.server.launch_args import parse_launch_args

    args = parse_launch_args(["--backend", "sglang", "--model-path", "m", "--tp-size", "4", "--dp-size", "2"])
    assert (args.tp_size, args.dp_size, args.pp_size) == (4, 2, 1)
    assert (parse_launch_args([]).tp_size, parse_launch_args([]).dp_size) == (1, 1)
    with pytest.raises(SystemExit):
        parse_launch_args(["--tp-size", "2"])


def test_the_plugin_charges_the_profiles_host_overhead():
    """The SGLang worker decides through the shared policies, so a profile's host-overhead
    table (issue 33; measured through SGLang's own steps where CUDA is present) reaches
    its decisions: a costly draft layer makes the predicted depth, and so the runtime
    state it runs, shallower; a costly verified token narrows the verify."""
    from sglang_cast.cast import DraftTree, OverheadTable

    settings = two_bucket_settings(Thresholds(0.4, 3.0, 0.8))

    def with_host(per_layer: float, per_token: float) -> PolicySettings:
        terms = torch.tensor([[[0.0, 0.0, per_layer, per_token]]], dtype=torch.float64)
        return replace(settings, costs=replace(settings.costs, overhead=OverheadTable(1 << 20, 1, (1,), terms)))

    roots = torch.tensor([[0.6, 0.2, 0.1, 0.05]], dtype=torch.float64)
    shape = StaticShape(num_steps=6, topk=4, num_draft_tokens=20)
    depths = [CastDecider(make_policy("cast", s), shape).begin(1, 300).predict_depth(roots)
              for s in (settings, with_host(1e3, 0.0))]
    assert depths[0] > 1 and depths[1] == 1
    tree = DraftTree.from_roots(torch.tensor([0]))
    for token in range(1, 7):
        tree.add_layer(torch.tensor([[token]]), torch.tensor([[token - 1]]), torch.tensor([[0.5]], dtype=torch.float64))
    verified = [CastDecider(make_policy("cast", s), shape).begin(1, 300).verify_count(tree)
                for s in (settings, with_host(0.0, 1e3))]
    assert verified[0] > verified[1] >= 1


def test_the_standin_folder_on_pythonpath_offers_only_sgl_kernel():
    """Everything in the folder put on PYTHONPATH is importable by its top-level name in
    SGLang's processes: a stand-ins module once sat there as ``kernels`` and shadowed the
    PyPI ``kernels`` that transformers 5.25 imports, so transformers' Llama did not load."""
    from sglang_cast.sglang_plugin.cpu_standins import STANDIN_PATH

    importable = {entry.stem for entry in STANDIN_PATH.iterdir()
                  if entry.suffix == ".py" and entry.stem != "__init__" or (entry / "__init__.py").is_file()}
    assert importable == {"sgl_kernel"}
