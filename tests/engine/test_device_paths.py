"""The engine's whole path on every device present: CPU always, CUDA when this
machine has one (skipped otherwise, with the reason).  Every policy (the ablation
variants included), greedy and sampling, float32 and bfloat16, on a small random
target with a random EAGLE head, so the real draft code runs.

Plus CPU-side checks of the two faults the first CUDA run hit: a non-contiguous
SDPA output fed to ``grouped_attention``, and policy decisions fed device tensors
(they decide on the host tree's arrays, cast/tree.py)."""

import numpy as np
import pytest
import torch

from sglang_cast.cast import POLICIES, SamplingParams, make_policy
from sglang_cast.cast import largest_valid_index
from sglang_cast.engine import Engine
from sglang_cast.hardware import isa_class
from sglang_cast.models import attention
from support.random_pair import PROMPTS, SETTINGS
from tools.tiny_models import VOCAB, CharTokenizer, random_pair

CUDA_REASON = "no CUDA device on this machine (torch.cuda.is_available() is False)"
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=CUDA_REASON))]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def make_engine(policy: str, device: str, dtype: str, max_batch: int = 3) -> Engine:
    target, draft = random_pair(device, DTYPES[dtype])
    return Engine(target, CharTokenizer(), draft, make_policy(policy, SETTINGS), max_batch_size=max_batch,
                  context_length=96)


def assert_engine_on(engine: Engine, device: str) -> None:
    """Every cache buffer and draft root state lives on ``device``; lengths on the host."""
    kind = torch.device(device).type
    caches = [engine.runner.target_cache] + ([engine.runner.draft_cache] if engine.draft is not None else [])
    for cache in caches:
        assert cache.k.device.type == kind and cache.v.device.type == kind
    if engine.draft is not None:
        assert engine.runner.root_hidden.device.type == kind and engine.runner.root_logits.device.type == kind


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("device", DEVICES)
def test_greedy_runs_and_float32_equals_plain_decoding(device, policy, dtype):
    params = SamplingParams(max_new_tokens=24)
    engine = make_engine(policy, device, dtype)
    results = engine.generate(PROMPTS, params)
    assert [len(r.token_ids) for r in results] == [24] * len(PROMPTS)
    assert all(0 <= t < VOCAB for r in results for t in r.token_ids)
    assert_engine_on(engine, device)
    if dtype == "float32":  # bf16 may flip near-ties between tree and plain attention
        plain = make_engine("vanilla", device, dtype).generate(PROMPTS, params)
        assert [r.token_ids for r in results] == [r.token_ids for r in plain]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("device", DEVICES)
def test_sampling_runs_and_is_reproducible(device, policy, dtype):
    params = [SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=i) for i in range(len(PROMPTS))]
    first = make_engine(policy, device, dtype).generate(PROMPTS, params)
    again = make_engine(policy, device, dtype).generate(PROMPTS, params)
    assert [len(r.token_ids) for r in first] == [16] * len(PROMPTS)
    assert [r.token_ids for r in first] == [r.token_ids for r in again]


def test_grouped_attention_takes_a_non_contiguous_sdpa_output(monkeypatch):
    """CUDA's fp32 SDPA kernels return ``[B, H, L, D]`` in a transposed layout; the
    grouped heads must be un-grouped without assuming contiguity."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def transposed_layout(*args, **kwargs):
        out = sdpa(*args, **kwargs)
        strided = out.transpose(1, 2).contiguous().transpose(1, 2)
        assert not strided.is_contiguous()
        return strided

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen) for shape in ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 8)))
    expected = attention.grouped_attention(q, k, v, None)
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", transposed_layout)
    assert torch.equal(attention.grouped_attention(q, k, v, None), expected)


def chain_attention_inputs(n: int, prefix: int = 37):
    """Grouped q ``[1, 6, n, 16]`` (3 query heads per K/V head) over a prefix of ``prefix``
    keys plus ``n`` new ones ``[1, 2, prefix + n, 16]``, and the chain's additive mask."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn((1, 6, n, 16), generator=gen)
    k, v = (torch.randn((1, 2, prefix + n, 16), generator=gen) for _ in range(2))
    starts = torch.tensor([prefix])
    mask = attention.build_attention_mask(starts, attention.causal_tree_mask(1, n, "cpu"), prefix + n)
    return q, k, v, attention.grouped_bias(mask, 3, q.dtype)


def test_a_cpu_verify_row_attends_as_the_plain_step_would():
    """On a CPU a verify's masked attention is the fused kernel a plain step runs unmasked,
    so row i over the prefix and its i + 1 path keys is the plain step's result: on the AMX
    Xeon bit for bit (masked keys add exact zeros; speculative greedy decoding then picks
    the very token plain decoding would, docs/results/2026-11-30_sdpa_cpu_amx.md), on the
    AVX-512 EPYC without AMX within fp32 rounding (1-2e-7, 2026-12-01)."""
    n, prefix = 4, 37
    q, k, v, bias = chain_attention_inputs(n, prefix)
    verified = attention.grouped_attention(q, k, v, bias)
    tolerance = 0.0 if isa_class() == "amx" else 1e-6
    for i in range(n):
        seen = slice(0, prefix + i + 1)
        plain = attention.grouped_attention(q[:, :, i : i + 1], k[:, :, seen], v[:, :, seen], None)
        torch.testing.assert_close(verified[:, :, i : i + 1], plain, rtol=0.0, atol=tolerance, msg=f"row {i}")


def test_the_gpu_small_query_kernels_agree_with_the_fused_kernel():
    """`three_kernel_attention` (a GPU's path for few query rows) computes the same
    attention as the fused kernel a CPU runs, to rounding."""
    q, k, v, bias = chain_attention_inputs(3)
    grouped = q.reshape(1, 2, 9, 16)
    fused = torch.nn.functional.scaled_dot_product_attention(grouped, k, v, attn_mask=bias)
    assert torch.allclose(attention.three_kernel_attention(grouped, k, v, bias), fused, atol=1e-5, rtol=1e-5)


def test_algorithm1_refuses_device_tensors_with_a_clear_error():
    with pytest.raises(ValueError, match="must be host values"):
        largest_valid_index(torch.ones(3, device="meta").cumsum(0), torch.arange(1.0, 4.0), 0.5)


class HostDecisionSpy:
    """Checks that every decision a plan makes reads host data: ``keep``'s candidate
    values and ``verify_count``'s tree are NumPy arrays (cast/tree.py), never tensors
    that could live on a device."""

    def __init__(self) -> None:
        self.decisions = 0

    def wrap(self, policy):
        begin, spy = policy.begin, self

        def checked_begin(batch_size, context_len):
            plan = begin(batch_size, context_len)
            keep, verify_count = plan.keep, plan.verify_count

            def checked_keep(layer, values):
                assert isinstance(values, np.ndarray), f"keep() got {type(values).__name__}, not host values"
                spy.decisions += 1
                return keep(layer, values)

            def checked_verify_count(tree):
                assert all(isinstance(getattr(tree, name), np.ndarray) for name in ("tokens", "parents", "values")), \
                    "verify_count() got a tree that is not on the host"
                spy.decisions += 1
                return verify_count(tree)

            plan.keep, plan.verify_count = checked_keep, checked_verify_count
            return plan

        policy.begin = checked_begin
        return policy


@pytest.mark.parametrize("policy", ["eagle2", "cast", "goodput", "cast-rerank", "cast-depth-breadth"])
def test_every_policy_decision_reads_host_data(policy):
    spy = HostDecisionSpy()
    target, draft = random_pair("cpu", torch.float32)
    engine = Engine(target, CharTokenizer(), draft, spy.wrap(make_policy(policy, SETTINGS)), max_batch_size=2,
                    context_length=96)
    engine.generate(PROMPTS[:2], SamplingParams(max_new_tokens=8))
    assert spy.decisions > 0
