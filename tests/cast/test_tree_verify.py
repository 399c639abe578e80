import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from sglang_cast.cast import (DraftTree, RequestSampler, SamplingParams, VerifyTree, committed_tokens,
                              select_verified, target_probs, verify_greedy, verify_sampling)
from sglang_cast.cast.sampling import inverse_cdf, nucleus, position_uniform
from sglang_cast.cast.tree import ancestor_matrix
from support.synthetic import ancestor_mask, path_of, random_tree, root_to_leaf_paths


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), batch=st.integers(1, 3), size=st.integers(1, 30))
def test_every_rerank_prefix_is_a_valid_subtree(seed, batch, size):
    tree = random_tree(random.Random(seed), batch, size)
    for k in range(tree.size):
        chosen = select_verified(tree, k)
        for b in range(batch):
            ids = set(chosen.node_ids[b].tolist())
            for node in ids - {0}:
                assert int(tree.parents[b, node]) in ids
        assert (chosen.parents[:, 1:] < torch.arange(1, k + 1)).all()  # parents come first


def test_ties_break_by_depth_then_creation_order():
    tree = DraftTree.from_roots(torch.tensor([7]))
    tree.add_layer(torch.tensor([[1, 2]]), torch.tensor([[0, 0]]), torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    tree.add_layer(torch.tensor([[3, 4]]), torch.tensor([[1, 2]]), torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    assert tree.ranked_nodes().tolist() == [[1, 2, 3, 4]]


def test_a_tree_grown_in_an_earlier_trees_storage_is_that_of_fresh_storage():
    """The engine grows each iteration's tree in the last one's room: none of the earlier
    tree's nodes or ancestor rows may show through (it was a chain, so its node 3 had
    nodes 1 and 2 as ancestors: here they are node 3's siblings)."""
    def grow(room=None):
        tree = DraftTree.from_roots(torch.tensor([4, 6]), capacity=8, room=room)
        for tokens, parents in layers:
            tree.add_layer(torch.tensor(tokens), torch.tensor(parents), torch.full((2, len(tokens[0])), 0.5,
                                                                                  dtype=torch.float64))
        return tree

    layers = [([[1], [1]], [[0], [0]]), ([[2], [2]], [[1], [1]]), ([[3], [3]], [[2], [2]])]
    old = grow()
    layers = [([[1, 2, 3], [1, 2, 3]], [[0, 0, 0], [0, 0, 0]]), ([[5, 6], [7, 8]], [[3, 2], [1, 3]])]
    reused, fresh = grow(room=old.storage), grow()
    assert reused.storage is old.storage
    for name in ("tokens", "parents", "values", "depths", "ancestors"):
        assert np.array_equal(getattr(reused, name), getattr(fresh, name)), name
    assert np.array_equal(reused.ancestors, ancestor_matrix(fresh.parents))


def test_ancestor_mask_positions_and_paths():
    tree = DraftTree.from_roots(torch.tensor([9]))
    tree.add_layer(torch.tensor([[1, 2]]), torch.tensor([[0, 0]]), torch.tensor([[0.6, 0.3]], dtype=torch.float64))
    tree.add_layer(torch.tensor([[5]]), torch.tensor([[1]]), torch.tensor([[0.4]], dtype=torch.float64))
    vt = select_verified(tree, 3)
    assert vt.tokens.tolist() == [[9, 1, 5, 2]]
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(vt.mask[0], expected)
    assert vt.positions(torch.tensor([20])).tolist() == [[20, 21, 22, 21]]
    assert root_to_leaf_paths(vt.parents)[0].tolist() == [[0, 1, 2], [0, 3, -1]]


def _brute_force_greedy(tree, vt, argmax_of_path, b):
    """Longest root-to-node path whose every token is the target's argmax."""
    best, best_len = 0, 0
    for i in range(vt.num_tokens):
        path = path_of(tree, b, int(vt.node_ids[b, i]))
        if all(path[d] == argmax_of_path(path[:d]) for d in range(1, len(path))) and len(path) - 1 > best_len:
            best, best_len = i, len(path) - 1
    return best_len, argmax_of_path(path_of(tree, b, int(vt.node_ids[b, best])))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**6), batch=st.integers(1, 4), size=st.integers(1, 25), vocab=st.integers(2, 6))
def test_greedy_verification_equals_brute_force(seed, batch, size, vocab):
    rng = random.Random(seed)
    tree = random_tree(rng, batch, size, vocab=vocab)
    vt = select_verified(tree, rng.randrange(tree.size))
    table = {}

    def argmax_of_path(path):
        return table.setdefault(path, rng.randrange(vocab))

    argmax = torch.tensor([[argmax_of_path(path_of(tree, b, int(i))) for i in vt.node_ids[b]] for b in range(batch)])
    result = verify_greedy(vt, argmax)
    committed = result.committed(vt)
    for b in range(batch):
        length, bonus = _brute_force_greedy(tree, vt, argmax_of_path, b)
        assert int(result.num_accepted[b]) == length
        assert int(result.bonus[b]) == bonus
        assert len(committed[b]) == length + 1 and committed[b][-1] == bonus


# --- speculative sampling is lossless --------------------------------------------------------

VOCAB = 6
PARAMS = SamplingParams(temperature=0.9, top_k=5, top_p=0.95)


def _sampling_tree():
    """Root with children tokens 3, 1, 4 (best first); token 3 has children 0, 2."""
    tree = DraftTree.from_roots(torch.tensor([5]))
    tree.add_layer(torch.tensor([[3, 1, 4]]), torch.tensor([[0, 0, 0]]),
                   torch.tensor([[0.5, 0.3, 0.1]], dtype=torch.float64))
    tree.add_layer(torch.tensor([[0, 2]]), torch.tensor([[1, 1]]), torch.tensor([[0.3, 0.1]], dtype=torch.float64))
    return select_verified(tree, 5)


def _samplers(draws: int, seed: int) -> list[RequestSampler]:
    """One request per draw, each with its own seed (draws of one seed at one position are one draw)."""
    return [RequestSampler.create(SamplingParams(temperature=0.9, top_k=5, top_p=0.95, seed=seed + i))
            for i in range(draws)]


def _draw(draws: int, seed: int):
    vt = _sampling_tree()
    logits = torch.randn(1, vt.num_tokens, VOCAB, generator=torch.Generator().manual_seed(1234))
    logits[0, 0] = torch.tensor([0.5, 1.2, -0.3, 1.0, 0.8, -2.0])  # root: drafted 3, 1, 4 all likely
    logits[0, 1] = torch.tensor([1.0, -0.5, 0.9, 0.2, -1.0, 0.4])  # after 3: drafted 0, 2
    batch_tree = vt.rows([0] * draws)
    result = verify_sampling(batch_tree, logits.expand(draws, -1, -1), _samplers(draws, seed), [0] * draws)
    first = []
    second_after_3 = []
    for tokens in result.committed(batch_tree):
        first.append(tokens[0])
        if tokens[0] == 3:
            second_after_3.append(tokens[1])
    node_of_3 = 1
    return first, second_after_3, target_probs(logits[0, 0], PARAMS), target_probs(logits[0, node_of_3], PARAMS)


def _p_value(samples, probs):
    counts = torch.bincount(torch.tensor(samples), minlength=VOCAB).double()
    support = probs > 0
    assert counts[~support].sum() == 0, "sampled a token the target distribution excludes"
    expected = probs[support] * counts.sum()
    return chisquare(counts[support].numpy(), expected.numpy()).pvalue


def test_speculative_sampling_matches_target_distribution():
    first, second, p_root, p_node = _draw(6000, seed=7)
    assert _p_value(first, p_root) > 1e-3
    assert _p_value(second, p_node) > 1e-3


def _path_logits(prefix: tuple[int, ...]) -> torch.Tensor:
    """A target whose next-token logits ``[VOCAB]`` depend on the whole prefix alone."""
    return 2.0 * torch.randn(VOCAB, generator=torch.Generator().manual_seed(hash(prefix) % (1 << 31)))


def _local_path(tree: VerifyTree, node: int) -> tuple[int, ...]:
    """Tokens from below the root down to local ``node`` of row 0."""
    tokens, parents = tree.tokens[0].tolist(), tree.parents[0].tolist()
    path = []
    while node > 0:
        path.append(tokens[node])
        node = parents[node]
    return tuple(reversed(path))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_seeded_request_samples_the_same_tokens_whatever_trees_are_verified(seed):
    """Each emitted token is the target's draw at its output position, so random trees
    (or the root alone) commit, token for token, what plain seeded sampling does."""
    sampler = RequestSampler.create(SamplingParams(temperature=1.0, seed=seed))
    plain: list[int] = []
    for position in range(40):
        plain.append(sampler.draw(target_probs(_path_logits(tuple(plain)), sampler.params), position))
    rng = random.Random(seed)
    speculative: list[int] = []
    while len(speculative) < len(plain):
        tree = random_tree(rng, 1, rng.randint(1, 12), vocab=VOCAB)
        vt = select_verified(tree, rng.randrange(tree.size))
        logits = torch.stack([_path_logits(tuple(speculative) + _local_path(vt, i)) for i in range(vt.num_tokens)])
        speculative += verify_sampling(vt, logits[None], [sampler], [len(speculative)]).committed(vt)[0]
    assert speculative[: len(plain)] == plain


def test_inverse_cdf_draws_only_tokens_the_distribution_holds():
    probs = torch.tensor([0.0, 0.25, 0.0, 0.75, 0.0], dtype=torch.float64)
    assert [inverse_cdf(probs, u) for u in (1e-17, 0.1, 0.2499, 0.2501, 0.9, 1 - 1e-16)] == [1, 1, 1, 3, 3, 3]
    short = probs * (1 - 1e-12)  # a sum rounded below 1 still ends inside the support
    assert inverse_cdf(short, 1 - 1e-16) == 3


def test_position_uniforms_are_fixed_by_seed_and_position():
    assert position_uniform(7, 3) == position_uniform(7, 3)
    values = {position_uniform(seed, position) for seed in (0, 1, -5, 1 << 63) for position in range(50)}
    assert len(values) == 200 and all(0.0 < u < 1.0 for u in values)


def test_greedy_params_and_top_p_processing():
    logits = torch.tensor([0.0, 3.0, 2.9, -5.0])
    probs = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert probs.tolist() == [0.0, 1.0, 0.0, 0.0]
    probs = target_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert probs[0] == 0 and probs[3] == 0 and probs[1] > probs[2] > 0


def sorted_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The top-p cut by sorting the whole vocabulary: what `nucleus` must equal."""
    sorted_probs, order = torch.sort(probs, descending=True)
    before = sorted_probs.cumsum(0) - sorted_probs
    sorted_probs[before >= top_p] = 0.0
    kept = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return kept / kept.sum()


@pytest.mark.parametrize("scale, top_p", [(8.0, 0.95), (3.0, 0.9), (0.05, 0.95), (1.0, 0.999), (20.0, 0.5)])
def test_top_p_from_a_prefix_equals_sorting_the_whole_vocabulary(scale, top_p):
    """Peaked rows are decided inside `NUCLEUS_PREFIX`, flat ones (scale 0.05) fall back to
    the full sort; either way the kept tokens and their probabilities are the sort's."""
    generator = torch.Generator().manual_seed(int(scale * 100))
    for _ in range(5):
        probs = torch.softmax(scale * torch.randn(49152, generator=generator, dtype=torch.float64), dim=-1)
        assert torch.equal(nucleus(probs, top_p), sorted_nucleus(probs, top_p))


@pytest.mark.parametrize("field, value", [("temperature", -1.0), ("top_p", 0.0), ("top_k", -1),
                                          ("max_new_tokens", 0), ("seed", "x")])
def test_bad_sampling_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_ancestor_mask_of_a_chain_is_causal():
    parents = torch.tensor([[-1, 0, 1, 2]])
    assert torch.equal(ancestor_mask(parents)[0], torch.ones(4, 4, dtype=torch.bool).tril())


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), batch=st.integers(1, 3), size=st.integers(1, 30))
def test_incremental_ancestors_equal_the_walk(seed, batch, size):
    tree = random_tree(random.Random(seed), batch, size)
    assert np.array_equal(tree.ancestors, ancestor_matrix(tree.parents))
    chosen = select_verified(tree, random.Random(seed).randrange(tree.size))
    assert torch.equal(chosen.mask, ancestor_mask(chosen.parents))


def test_bonus_after_an_accepted_leaf_follows_the_target_at_that_leaf():
    """A leaf has no child to try, so the bonus is drawn from the target's
    distribution *at the leaf*; here it differs sharply from the root's."""
    tree = DraftTree.from_roots(torch.tensor([5]))
    tree.add_layer(torch.tensor([[3, 1]]), torch.tensor([[0, 0]]), torch.tensor([[0.6, 0.3]], dtype=torch.float64))
    tree.add_layer(torch.tensor([[0]]), torch.tensor([[1]]), torch.tensor([[0.24]], dtype=torch.float64))
    vt = select_verified(tree, 3)  # local order: root, 3, 1, 0 (under 3)
    logits = torch.tensor([[[0.0, 0.5, -1.0, 2.5, 0.0, -3.0],  # root: mostly 3
                            [2.5, -1.0, 0.0, 0.0, -1.0, -3.0],  # after 3: mostly 0
                            [-2.0, 0.0, 1.5, -2.0, 0.0, 1.0],  # after 1 (a leaf)
                            [-3.0, -2.0, 1.0, -2.0, 0.5, 1.5]]])  # after 3, 0 (a leaf)
    draws = 6000
    batch_tree = vt.rows([0] * draws)
    result = verify_sampling(batch_tree, logits.expand(draws, -1, -1), _samplers(draws, 11), [0] * draws)
    after_leaf_1, after_leaf_0 = [], []
    for tokens in result.committed(batch_tree):
        if tokens[:1] == [1]:
            after_leaf_1.append(tokens[1])
        if tokens[:2] == [3, 0]:
            after_leaf_0.append(tokens[2])
    assert len(after_leaf_1) > 300 and len(after_leaf_0) > 1000
    assert _p_value(after_leaf_1, target_probs(logits[0, 2], PARAMS)) > 1e-3
    assert _p_value(after_leaf_0, target_probs(logits[0, 3], PARAMS)) > 1e-3


def test_verifying_no_node_gives_the_root_alone():
    """Plain decoding's verified tree (its shortcut, views of the root's fields)."""
    tree = random_tree(random.Random(3), 3, 9)
    root = select_verified(tree, 0)
    assert root.node_ids.tolist() == [[0]] * 3 and root.parents.tolist() == [[-1]] * 3
    assert root.tokens.tolist() == tree.tokens[:, :1].tolist() and root.depths.tolist() == [[0]] * 3
    assert root.values.tolist() == [[1.0]] * 3 and root.mask.tolist() == [[[True]]] * 3
    result = verify_greedy(root, torch.tensor([[5], [6], [7]]))
    assert result.num_accepted == [0, 0, 0] and result.bonus == [5, 6, 7]


def test_the_roots_verified_tree_equals_selecting_no_node_of_a_roots_tree():
    """Plain decoding's verified tree is made from the roots alone (`VerifyTree.of_roots`,
    where the roots are); it must be what the host tree of the roots selects."""
    roots = torch.tensor([4, 8, 15])
    made, selected = VerifyTree.of_roots(roots), select_verified(DraftTree.from_roots(roots), 0)
    for name in ("node_ids", "tokens", "parents", "depths", "values"):
        assert torch.equal(getattr(made, name), getattr(selected, name)), name
    assert torch.equal(made.mask, selected.mask)


def test_an_iteration_commits_its_accepted_tokens_and_one_bonus_per_sequence():
    assert committed_tokens([2, 0, 1]) == 6
    assert committed_tokens([]) == 0
