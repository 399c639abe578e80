"""The project's CPU stand-ins for SGLang 0.5.23's ``sgl_kernel`` ops
(``sglang_cast/sglang_plugin/cpu_standins``), against SGLang's own code.

Each op is compared, on random inputs, with its Triton twin in SGLang's source run by
Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``, set here before SGLang is
imported), or, where SGLang has no twin, with a plain reference (a Python loop, or
``scaled_dot_product_attention`` with an explicit mask).  SGLang's own call sites
(``*_func`` wrappers, the ``intel_amx`` attention backend) are also driven into the
stand-ins, so their argument lists are checked against the registered schemas.

Needs an interpreter where SGLang's modules import (``.venv-sglang``); elsewhere the
module is skipped with the reason.  Run as::

    TRITON_INTERPRET=1 SGLANG_USE_CPU_ENGINE=1 .venv-sglang/bin/python -m pytest -q tests/plugin/test_sglang_plugin_cpu_standins.py

The module itself does not set ``SGLANG_USE_CPU_ENGINE`` (SGLang caches ``is_cpu()`` for
the whole session, and other test modules import SGLang without it); the call-site tests
switch the CPU branches on with ``monkeypatch`` instead.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from sglang_cast.sglang_plugin.cpu_standins import STANDIN_PATH  # noqa: E402

# With SGLANG_USE_CPU_ENGINE=1, SGLang's CPU modules import sgl_kernel at import time.
if os.environ.get("SGLANG_USE_CPU_ENGINE") and importlib.util.find_spec("sgl_kernel") is None:
    sys.path.insert(0, str(STANDIN_PATH))

from support.plugin import load_standin_shim, require_sglang  # noqa: E402

require_sglang("triton", "sglang.kernels.ops.attention.decode_attention",
               "sglang.kernels.ops.attention.extend_attention", "sglang.kernels.ops.kvcache",
               "sglang.kernels.ops.speculative", "sglang.srt.layers.attention.intel_amx_backend",
               "sglang.srt.layers.radix_attention", "sglang.srt.mem_cache.allocation",
               "sglang.srt.mem_cache.memory_pool", "sglang.srt.model_executor.forward_batch_info",
               "sglang.srt.speculative.eagle_utils")

from sglang.kernels.ops.kvcache import cache_move  # noqa: E402
from sglang.kernels.ops.speculative import cache_locs, eagle, multi_layer_eagle  # noqa: E402
from sglang.srt.mem_cache import allocation  # noqa: E402
from sglang.srt.mem_cache.memory_pool import move_kv_cache_native  # noqa: E402

from sglang_cast.sglang_plugin.cpu_standins import kernels  # noqa: E402


shim = load_standin_shim()
ops = torch.ops.sgl_kernel


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


# ------------------------------------------------------------ the shim itself
def test_the_shim_registers_every_op_sglangs_cpu_path_calls_and_no_amx_op():
    for name in ["assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu",
                 "assign_draft_cache_locs_contiguous_cpu", "build_draft_decode_metadata_cpu",
                 "copy_all_layer_kv_cache_cpu", "fill_bonus_tokens_cpu", "fill_accept_out_cache_loc_cpu",
                 "rotate_input_ids_cpu", "build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu",
                 "decode_attention_cpu", "extend_attention_cpu"]:
        assert hasattr(ops, name), name
    for name in shim.__all__:
        assert callable(getattr(shim, name))
    # SGLang's cpu_has_amx_support() looks for this op; its absence keeps the layers native.
    assert not hasattr(ops, "convert_weight_packed")
    schema = str(ops.extend_attention_cpu.default._schema)
    assert "Tensor(a!) o_extend" in schema and "Tensor? tree_mask, bool is_causal" in schema
    assert load_standin_shim().REGISTERED == ()  # a second import registers nothing again


# ------------------------------------------------------- KV-slot bookkeeping
def ragged_offsets(rng: random.Random, bs: int, pool_len: int, dtype):
    start = [rng.randrange(0, pool_len // 2) for _ in range(bs)]
    end = [s + rng.randrange(0, pool_len - s) for s in start]
    return torch.tensor(start, dtype=dtype), torch.tensor(end, dtype=dtype)


@pytest.mark.parametrize("seed", range(3))
def test_assign_req_to_token_pool_matches_sglangs_triton_kernel(seed, monkeypatch):
    rng = random.Random(seed)
    bs, pool_len, rows = rng.choice([1, 3, 5]), 24, 8
    offset_dtype = rng.choice([torch.int32, torch.int64])
    req_pool_indices = torch.tensor(rng.sample(range(rows), bs), dtype=rng.choice([torch.int32, torch.int64]))
    start, end = ragged_offsets(rng, bs, pool_len, offset_dtype)
    out_cache_loc = torch.randperm(1000, generator=torch.Generator().manual_seed(seed))[: int((end - start).sum())]
    base = torch.randint(0, 1000, (rows, pool_len), dtype=torch.int32)
    want, got = base.clone(), base.clone()
    allocation.assign_req_to_token_pool[(bs,)](req_pool_indices, want, start, end, out_cache_loc, pool_len,
                                               next_pow2(bs))
    ops.assign_req_to_token_pool_cpu(req_pool_indices, got, start, end, out_cache_loc, pool_len)
    assert torch.equal(got, want)
    # SGLang's own CPU call site
    monkeypatch.setattr(allocation, "_is_cpu", True)
    monkeypatch.setattr(allocation, "assign_req_to_token_pool_cpu", shim.assign_req_to_token_pool_cpu,
                        raising=False)
    via_sglang = base.clone()
    allocation.assign_req_to_token_pool_func(req_pool_indices, via_sglang, start, end, out_cache_loc, bs)
    assert torch.equal(via_sglang, want)


@pytest.mark.parametrize("seed", range(3))
def test_assign_extend_cache_locs_matches_sglangs_triton_kernel(seed, monkeypatch):
    rng = random.Random(seed)
    bs, pool_len, rows = rng.choice([1, 2, 4]), 20, 6
    req_pool_indices = torch.tensor(rng.sample(range(rows), bs), dtype=torch.int64)
    start, end = ragged_offsets(rng, bs, pool_len, rng.choice([torch.int32, torch.int64]))
    req_to_token = torch.randint(0, 5000, (rows, pool_len), dtype=torch.int32)
    total = int((end - start).sum())
    want = torch.full((total + 3,), -7, dtype=torch.int64)
    got = want.clone()
    cache_locs.assign_extend_cache_locs[(bs,)](req_pool_indices, req_to_token, start, end, want, pool_len,
                                               next_pow2(bs))
    ops.assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start, end, got, pool_len)
    assert torch.equal(got, want) and (got[total:] == -7).all()
    # SGLang's own CPU call sites: the verify/extend locations and the front-slot packer
    monkeypatch.setattr(cache_locs, "_is_cpu", True)
    monkeypatch.setattr(cache_locs, "assign_extend_cache_locs_cpu", shim.assign_extend_cache_locs_cpu, raising=False)
    draft_token_num = 3
    end_uniform = start.to(torch.int64) + draft_token_num
    uniform = cache_locs.assign_extend_cache_locs_func(req_pool_indices=req_pool_indices, req_to_token=req_to_token,
                                                       start_offset=start.to(torch.int64), end_offset=end_uniform,
                                                       batch_size=bs, draft_token_num=draft_token_num, device="cpu")
    expected = torch.cat([req_to_token[int(r), int(s): int(s) + draft_token_num].long()
                          for r, s in zip(req_pool_indices, start)])
    assert torch.equal(uniform, expected)
    window = torch.randint(0, 5000, (bs * 4,), dtype=torch.int64)
    num_front = torch.tensor([rng.randrange(0, 5) for _ in range(bs)], dtype=torch.int64)
    front = torch.full((bs * 4,), -1, dtype=torch.int64)
    cache_locs.fill_front_out_cache_loc_func(num_front, window, front)
    packed = torch.cat([window.view(bs, 4)[b, : int(num_front[b])] for b in range(bs)])
    assert torch.equal(front[: packed.numel()], packed)


@pytest.mark.parametrize("topk,num_steps", [(1, 3), (2, 2), (4, 3)])
def test_assign_draft_cache_locs_contiguous_matches_sglangs_triton_kernel(topk, num_steps, monkeypatch):
    bs, pool_len, rows = 3, 32, 5
    req_pool_indices = torch.tensor([4, 0, 2], dtype=torch.int64)
    seq_lens = torch.tensor([3, 9, 1], dtype=torch.int64)
    req_to_token = torch.randint(0, 9000, (rows, pool_len), dtype=torch.int32)
    want = torch.empty(bs * topk * num_steps, dtype=torch.int64)
    got = torch.empty_like(want)
    cache_locs.assign_draft_cache_locs_contiguous[(bs,)](req_pool_indices, req_to_token, seq_lens, want, pool_len,
                                                         topk, num_steps)
    ops.assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, got, pool_len, topk,
                                               num_steps)
    assert torch.equal(got, want)
    monkeypatch.setattr(cache_locs, "_is_cpu", True)
    monkeypatch.setattr(cache_locs, "assign_draft_cache_locs_contiguous_cpu",
                        shim.assign_draft_cache_locs_contiguous_cpu, raising=False)
    via_sglang = torch.empty_like(want)
    cache_locs.assign_draft_cache_locs_contiguous_func(req_pool_indices, req_to_token, seq_lens, via_sglang, topk,
                                                       num_steps)
    assert torch.equal(via_sglang, want)


@pytest.mark.parametrize("topk,num_steps", [(1, 2), (3, 3)])
def test_build_draft_decode_metadata_matches_a_reference_loop(topk, num_steps):
    # No Triton twin: SGLang's GPU backends build kv_indices instead.  Reference: the
    # layout's definition, row b*topk+tk = prefix of b, then candidate tk's draft slots
    # (the ones assign_draft_cache_locs_contiguous reads).
    pool_len, rows = 24, 6
    req_to_token = torch.randperm(rows * pool_len).to(torch.int32).view(rows, pool_len)
    req_pool_indices = torch.tensor([5, 1, 3], dtype=torch.int64)
    seq_lens = torch.tensor([4, 0, 10], dtype=torch.int32)
    got = shim.build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len)
    assert got.shape == (3 * topk, pool_len) and got.dtype == req_to_token.dtype
    for b in range(3):
        src, sl = req_to_token[int(req_pool_indices[b])], int(seq_lens[b])
        for tk in range(topk):
            row = got[b * topk + tk]
            assert torch.equal(row[:sl], src[:sl])
            assert torch.equal(row[sl: sl + num_steps], src[sl + tk * num_steps: sl + (tk + 1) * num_steps])


@pytest.mark.parametrize("seed", range(2))
def test_copy_all_layer_kv_cache_matches_sglangs_triton_kernel_and_native_move(seed):
    g = torch.Generator().manual_seed(seed)
    k_bufs = [torch.randn(20, 2, 8, generator=g) for _ in range(2)]
    v_bufs = [torch.randn(20, 2, 4, generator=g).to(torch.bfloat16) for _ in range(2)]
    # overlapping source and target rows: only gather-then-scatter gives the shift
    src = torch.tensor([3, 4, 5, 6, 11], dtype=torch.int64)
    tgt = torch.tensor([4, 5, 6, 7, 2], dtype=torch.int64)

    def run(fn):
        ks, vs = [b.clone() for b in k_bufs], [b.clone() for b in v_bufs]
        bufs = ks + vs
        ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
        strides = torch.tensor([b.stride(0) * b.element_size() for b in bufs], dtype=torch.int64)
        fn(ptrs, strides)
        return bufs

    n = src.numel()
    triton_out = run(lambda p, s: cache_move.copy_all_layer_kv_cache_tiled[(p.numel(), 1)](
        p, s, tgt, src, n, next_pow2(n), BYTES_PER_TILE=128))
    ours = run(lambda p, s: ops.copy_all_layer_kv_cache_cpu(p, s, tgt, src))
    ks, vs = [b.clone() for b in k_bufs], [b.clone() for b in v_bufs]
    move_kv_cache_native(ks, vs, tgt, src)
    for got, want, native in zip(ours, triton_out, ks + vs):
        assert torch.equal(got, want) and torch.equal(got, native)
    assert not torch.equal(ours[0], k_bufs[0])


# ------------------------------------------------------------- EAGLE helpers
@pytest.mark.parametrize("seed", range(2))
def test_fill_bonus_tokens_matches_sglangs_triton_kernel(seed):
    g = torch.Generator().manual_seed(seed)
    bs, stride = 4, 5
    accept_tokens = torch.randint(0, 100, (bs, stride), dtype=torch.int32, generator=g)
    accept_lens = torch.randint(1, stride + 1, (bs,), dtype=torch.int32, generator=g)
    want = torch.zeros(bs, dtype=torch.int32)
    got = torch.zeros(bs, dtype=torch.int32)
    eagle.fill_bonus_tokens[(bs,)](accept_tokens, accept_lens, want, stride)
    ops.fill_bonus_tokens_cpu(accept_tokens, accept_lens, got, stride)
    assert torch.equal(got, want)


@pytest.mark.parametrize("seed", range(2))
def test_fill_accept_out_cache_loc_matches_sglangs_triton_kernel(seed):
    g = torch.Generator().manual_seed(seed)
    bs, steps, drafts = 3, 4, 6
    accept_index = torch.randint(0, bs * drafts, (bs, steps), dtype=torch.int32, generator=g)
    accept_index[torch.rand(bs, steps, generator=g) < 0.4] = -1
    out_cache_loc = torch.randint(0, 10_000, (bs * drafts,), dtype=torch.int64, generator=g)
    size = accept_index.numel()
    want = torch.full((size,), -5, dtype=torch.int64)
    got = want.clone()
    eagle.fill_accept_out_cache_loc[(size,)](accept_index, out_cache_loc, want, next_pow2(size))
    ops.fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, got)
    assert torch.equal(got, want)


@pytest.mark.parametrize("with_select_index", [False, True])
def test_rotate_input_ids_matches_sglangs_triton_kernel(with_select_index):
    g = torch.Generator().manual_seed(1)
    seq_lens = torch.tensor([3, 0, 5, 1], dtype=torch.int32)
    start_loc = torch.cumsum(seq_lens, 0, dtype=torch.int32) - seq_lens
    input_ids = torch.randint(0, 1000, (int(seq_lens.sum()),), dtype=torch.int64, generator=g)
    topk_index = torch.randint(1000, 2000, (4, 1), dtype=torch.int64, generator=g)
    select_index = None
    if with_select_index:  # a position inside each segment, not necessarily the last
        select_index = torch.tensor([0, 0, 6, 8], dtype=torch.int64)
    want, got = input_ids.clone(), input_ids.clone()
    multi_layer_eagle.rotate_input_ids_kernel[(4,)](want, start_loc, seq_lens, topk_index, select_index,
                                                    BLOCK_SIZE=4096 if with_select_index else 8)
    ops.rotate_input_ids_cpu(got, start_loc, seq_lens, topk_index, select_index)
    assert torch.equal(got, want)
