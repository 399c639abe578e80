"""Prefill (engine/runner.py): the requests admitted together go through the target in
right-padded forwards, grouped by `prefill_groups` on the target's cost table, with the
LM head on each prompt's last position only, and leave the caches, first tokens and
draft backlogs a prefill of each prompt alone leaves."""

import torch

from sglang_cast.cast import (CostModel, CostTable, PolicySettings, RequestSampler, SamplingParams, TreeShape,
                              make_policy)
from sglang_cast.engine import Engine, StepLog
from sglang_cast.engine.runner import PREFILL_GROUP_TOKENS, prefill_groups
from sglang_cast.engine.requests import Request
from support.random_pair import SETTINGS
from tools.tiny_models import CharTokenizer, random_pair

PROMPTS = ["hello world", "trees and more trees", "speculative decoding"]


def request(length: int) -> Request:
    params = SamplingParams(max_new_tokens=4)
    return Request(length, list(range(1, length + 1)), params, RequestSampler.create(params), frozenset())


def lengths(groups: list[list[Request]]) -> list[list[int]]:
    return [[len(r.prompt_ids) for r in group] for group in groups]


def test_a_launch_bound_forward_batches_every_prompt():
    """A GPU-like cost: a fixed launch cost dwarfs the rows' compute."""
    def forward_ms(rows: int, tokens: int) -> float:
        return 10.0 + 0.001 * rows * tokens

    assert lengths(prefill_groups([request(n) for n in (6, 5, 400, 7)], forward_ms)) == [[5, 6, 7, 400]]
    # however cheap the rows, a group's padded tokens stay within PREFILL_GROUP_TOKENS
    long = PREFILL_GROUP_TOKENS // 4
    assert lengths(prefill_groups([request(long)] * 6 + [request(10)], forward_ms)) == [[10] + [long] * 3, [long] * 3]


def test_a_compute_bound_forward_batches_only_what_padding_does_not_cost():
    """A cost proportional to rows x tokens (a weight-only int4 GEMM on a CPU): only
    prompts of equal length share a forward; a sublinear one also takes near lengths."""
    def proportional(rows: int, tokens: int) -> float:
        return rows * tokens

    assert lengths(prefill_groups([request(n) for n in (6, 5, 6, 7, 6)], proportional)) == [[5], [6, 6, 6], [7]]

    def sublinear(rows: int, tokens: int) -> float:  # 2 rows cost 1.5 rows
        return (1 + 0.5 * (rows - 1)) * tokens

    # 5 then 6: 1.5 x 6 = 9 <= 5 + 6; then 7: 2 x 7 = 14 <= 9 + 7; 40: 2.5 x 40 = 100 > 14 + 40
    assert lengths(prefill_groups([request(n) for n in (40, 7, 6, 5)], sublinear)) == [[5, 6, 7], [40]]
    assert prefill_groups([], proportional) == []


def engine(policy: str, max_batch: int, settings: PolicySettings = SETTINGS) -> Engine:
    target, draft = random_pair("cpu", torch.float32)
    return Engine(target, CharTokenizer(), draft if policy != "vanilla" else None, make_policy(policy, settings),
                  max_batch_size=max_batch, context_length=96)


def prefilled(policy: str, prompts: list[str], max_batch: int, settings: PolicySettings = SETTINGS):
    """Admit ``prompts`` into a fresh engine, counting the target forwards."""
    built = engine(policy, max_batch, settings)
    calls = []
    forward = built.runner.target.forward

    def counted(tokens, *args, **kwargs):
        calls.append(tuple(tokens.shape))
        return forward(tokens, *args, **kwargs)

    built.runner.target.forward = counted
    requests = [built.add_request(p, SamplingParams(max_new_tokens=8)) for p in prompts]
    built._admit()
    return built, requests, calls


def test_admitted_prompts_share_one_forward_and_match_one_prompt_prefills():
    together, batched, calls = prefilled("eagle2", PROMPTS, max_batch=3)
    longest = max(len(r.prompt_ids) for r in batched)
    assert calls == [(3, longest)]  # SETTINGS' cost does not grow with rows: one padded forward
    for prompt, joint in zip(PROMPTS, batched):
        alone, (single,), _ = prefilled("eagle2", [prompt], max_batch=1)
        n = len(single.prompt_ids)
        assert single.output_ids == joint.output_ids  # the first token
        assert int(together.runner.target_cache.lens[joint.slot]) == n
        torch.testing.assert_close(together.runner.target_cache.k[:, joint.slot, :, :n], alone.runner.target_cache.k[:, 0, :, :n])
        tokens, features = together.runner.draft_backlog[joint.slot]
        alone_tokens, alone_features = alone.runner.draft_backlog[single.slot]
        assert tokens == alone_tokens and len(features) == n
        torch.testing.assert_close(torch.stack(features), torch.stack(alone_features))


def test_a_batched_prefill_decodes_what_one_prompt_at_a_time_decodes():
    params = SamplingParams(max_new_tokens=12)
    joint = engine("cast", 3).generate(PROMPTS, params)
    alone = [engine("cast", 1).generate([p], params)[0] for p in PROMPTS]
    assert [r.token_ids for r in joint] == [r.token_ids for r in alone]


def row_cost_settings(shape: TreeShape) -> PolicySettings:
    """Settings whose target forward costs rows x tokens (so only equal lengths group)."""
    batch_sizes = (1, 2, 4)
    ms = torch.tensor([[[float(b * n) for n in range(1, 65)]] for b in batch_sizes], dtype=torch.float64)
    return PolicySettings.single(CostModel(CostTable(1 << 30, 1, batch_sizes, ms), CostModel.linear(1.0, 4.0).draft),
                                 shape=shape)


def test_the_engine_groups_on_its_policys_target_costs():
    """With a target whose forward costs rows x tokens, prompts of different lengths
    are prefilled one forward each, prompts of one length together."""
    _, requests, calls = prefilled("vanilla", PROMPTS, max_batch=3, settings=row_cost_settings(TreeShape(4, 3, 10)))
    sizes = [len(r.prompt_ids) for r in requests]
    assert sizes == [11, 20, 20]
    assert sorted(calls) == [(1, 11), (2, 20)]


def test_prompts_prefilled_through_one_graph_key_keep_their_own_draft_features():
    """Two prefill groups can replay the same graph key in one admission; the first
    group's draft backlog must not be a view of the outputs the second replay
    overwrites (the drafted values would then differ from an eager engine's)."""
    settings = row_cost_settings(TreeShape(3, 3, 16))
    prompts = ["abcde", "fghij", "klmnopq", "rstuvwx"]  # two lengths, two groups, one graph key (8 tokens)

    def run(backend):
        target, draft = random_pair("cpu", torch.float32)
        engine = Engine(target, CharTokenizer(), draft, make_policy("eagle2", settings), max_batch_size=4,
                        context_length=96, graph_backend=backend)
        log = StepLog()
        results = engine.generate(prompts, SamplingParams(max_new_tokens=6), on_step=log)
        return [r.token_ids for r in results], [v for record in log.records for v in record.verified_value]

    eager_tokens, eager_values = run(None)
    graph_tokens, graph_values = run("eager-replay")
    assert graph_tokens == eager_tokens
    torch.testing.assert_close(torch.tensor(graph_values), torch.tensor(eager_values))
