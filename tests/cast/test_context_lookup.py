"""The prompt-lookup branch (sglang_cast/cast/context_lookup.py): what it proposes, how
its tokens join a drafted tree, and that verification accepts them."""

import numpy as np
import pytest
import torch

from sglang_cast.cast import (ContextLookup, DraftTree, MatchValue, Proposal, graft_proposals, select_verified,
                              verify_greedy)
from sglang_cast.cast.context_lookup import MATCH_VALUES
from sglang_cast.cast.trace import recorded_proposals


def test_it_proposes_what_followed_the_latest_earlier_occurrence_of_the_last_tokens():
    context = [5, 1, 2, 7, 8, 9, 4, 1, 2, 6, 6, 1, 2]
    assert ContextLookup(depth=3).propose(context) == Proposal([6, 6, 1], 2)  # (1, 2) at 7, not at 1
    assert ContextLookup(depth=8).propose(context) == Proposal([6, 6, 1, 2], 2)  # up to the context's end
    assert ContextLookup(ngram=1, depth=2).propose([4, 9, 9, 4]) == Proposal([9, 9], 1)
    assert ContextLookup().propose([3, 4, 5, 6]) == Proposal.none()  # (5, 6) never occurred before
    assert ContextLookup(window=5).propose(context) == Proposal.none()  # the earlier (1, 2) lie outside the window


def test_it_prefers_the_longest_match_to_the_latest_one():
    context = [7, 1, 2, 5, 8, 1, 2, 6, 7, 1, 2]
    assert ContextLookup(depth=2).propose(context) == Proposal([5, 8], 3)  # (7, 1, 2) at 0, not (1, 2) at 5
    assert ContextLookup(depth=2, max_ngram=2).propose(context) == Proposal([6, 7], 2)
    repeated = [3, 1, 4, 1, 5, 9, 2, 6] * 2
    assert ContextLookup(depth=3).propose(repeated) == Proposal([3, 1, 4], 8)  # matched as far as max_ngram


@pytest.mark.parametrize("field, value, message", [
    ("depth", 0, "ContextLookup.depth must be >= 1, got 0"),
    ("ngram", 0, "ContextLookup.ngram must be >= 1, got 0"),
    ("max_ngram", 1, r"ContextLookup.max_ngram must be >= ngram \(2\), got 1"),
    ("match_values", (MatchValue(2, 1.5, 0.9),),
     r"ContextLookup.match_values: first must be in \(0, 1\], got 1.5 for matched=2"),
    ("match_values", (MatchValue(2, 0.5, 0.0),),
     r"ContextLookup.match_values: next must be in \(0, 1\], got 0.0 for matched=2"),
    ("match_values", (), "ContextLookup.match_values must hold at least one MatchValue"),
])
def test_bad_settings_name_the_field_and_its_range(field, value, message):
    with pytest.raises(ValueError, match=message):
        ContextLookup(**{field: value})


def _tree() -> DraftTree:
    """Row 0: root 10 with children 20 (0.6) and 30 (0.3), 20 with child 21 (0.2);
    row 1: root 11 with children 40, 41, 42."""
    return DraftTree.from_nodes(tokens=[[10, 20, 30, 21], [11, 40, 41, 42]], parents=[[-1, 0, 0, 1], [-1, 0, 0, 0]],
                                values=[[1.0, 0.6, 0.3, 0.2], [1.0, 0.5, 0.4, 0.1]])


def test_a_proposal_reuses_the_drafted_prefix_and_hangs_the_rest_under_it():
    tree = _tree()
    flat = ContextLookup(depth=4, match_values=(MatchValue(2, 0.75, 0.9),))
    graft_proposals(tree, [Proposal([20, 21, 22, 23], 2), Proposal.none()], flat)
    assert tree.size == 6
    assert tree.tokens[0].tolist() == [10, 20, 30, 21, 22, 23]
    assert tree.parents[0].tolist() == [-1, 0, 0, 1, 3, 4]  # no second child 20 under the root
    np.testing.assert_allclose(tree.values[0], [1.0, 0.75, 0.3, 0.675, 0.6075, 0.54675])
    assert tree.depths[0].tolist() == [0, 1, 1, 2, 3, 4]
    assert tree.parents[1, 4:].tolist() == [0, 0] and tree.values[1, 4:].tolist() == [0.0, 0.0]  # fillers
    ranked = tree.ranked_nodes()
    for b in range(2):  # every prefix of the ranking is a subtree: a parent before its child
        seen = {0}
        for node in ranked[b]:
            assert tree.parents[b, node] in seen
            seen.add(int(node))


def test_verification_accepts_the_grafted_path_when_the_target_agrees():
    tree = _tree()
    graft_proposals(tree, [Proposal([20, 21, 22, 23], 8), Proposal([40, 43], 2)], ContextLookup())
    vtree = select_verified(tree, tree.size - 1)
    following = {10: 20, 20: 21, 21: 22, 22: 23, 23: 99, 11: 40, 40: 43, 43: 98}
    argmax = torch.tensor([[following.get(t, 0) for t in row] for row in vtree.tokens.tolist()])
    result = verify_greedy(vtree, argmax)
    assert result.committed(vtree) == [[20, 21, 22, 23, 99], [40, 43, 98]]


def test_a_longer_match_values_its_tokens_by_its_own_measured_rates():
    lookup = ContextLookup()
    by_match = {m: lookup.values(Proposal([1, 2, 3], m), 3) for m in (1, 2, 3, 5, 8, 20)}
    np.testing.assert_allclose(by_match[2], [0.54, 0.54 * 0.735, 0.54 * 0.735 ** 2])
    np.testing.assert_array_equal(by_match[1], by_match[2])  # below the table: its first entry
    np.testing.assert_array_equal(by_match[5], lookup.values(Proposal([1], 4), 3))  # one class: 4-7
    np.testing.assert_array_equal(by_match[20], by_match[8])
    firsts = [by_match[m][0] for m in (2, 3, 5, 8)]
    assert firsts == sorted(firsts) and firsts[-1] == MATCH_VALUES[-1].first  # the longer, the surer


def test_a_trace_stored_before_match_lengths_replays_its_proposals_as_two_token_matches():
    assert recorded_proposals({"proposals": [[4, 5], []]}) == [Proposal([4, 5], 2), Proposal([], 0)]
    assert recorded_proposals({"proposals": [[4, 5]], "proposal_matches": [6]}) == [Proposal([4, 5], 6)]
    with pytest.raises(ValueError, match="proposal_matches holds 2 entries for 1 proposals"):
        recorded_proposals({"proposals": [[4, 5]], "proposal_matches": [6, 2]})


def test_a_graft_stops_at_the_lookups_depth():
    tree = _tree()
    graft_proposals(tree, [Proposal([20, 21, 22, 23], 8), Proposal([40, 43], 2)], ContextLookup(depth=1))
    assert tree.size == 4  # each row's first token is a drafted child: reused, nothing hangs below depth 1
    np.testing.assert_allclose(tree.values[0], [1.0, MATCH_VALUES[-1].first, 0.3, 0.2])  # 21 left as drafted
    np.testing.assert_allclose(tree.values[1], [1.0, MATCH_VALUES[0].first, 0.4, 0.1])
