"""The project's CPU stand-ins for SGLang 0.5.23's tree and attention ops (tree
building and greedy verification, ``decode_attention_cpu``, ``extend_attention_cpu``)
and SGLang's ``intel_amx`` backend driving them, against SGLang's Triton twins run by
Triton's interpreter on CPU tensors, or against ``scaled_dot_product_attention`` with an
explicit mask.  The other stand-ins, and how to run these:
tests/plugin/test_sglang_plugin_cpu_standins.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from types import SimpleNamespace  # noqa: E402

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

from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd  # noqa: E402
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd  # noqa: E402
from sglang.kernels.ops.speculative import spec_tree  # noqa: E402
from sglang.srt.layers.attention import intel_amx_backend  # noqa: E402
from sglang.srt.layers.radix_attention import AttentionType  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.speculative.eagle_utils import organize_draft_results  # noqa: E402

from sglang_cast.sglang_plugin.cpu_standins import kernels  # noqa: E402


shim = load_standin_shim()
ops = torch.ops.sgl_kernel



# ------------------------------------------------------------------ draft trees
def draft_tree(bs: int, topk: int, depth: int, num_draft_tokens: int, seed: int):
    """EAGLE's draft outputs for a random draft model: the same score / token / parent
    bookkeeping as SGLang's ``select_top_k_tokens``, reduced by its own
    ``organize_draft_results`` to (parent_list, top_scores_index, draft_tokens)."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(bs, topk, generator=g), -1).sort(-1, descending=True).values
    score_list = [probs.unsqueeze(1)]
    token_list = [torch.randint(0, 32, (bs, topk), generator=g)]
    parents_list = [torch.arange(-1, topk).expand(bs, -1)]
    scores = probs
    for i in range(1, depth):
        step_p = torch.softmax(torch.randn(bs, topk, topk, generator=g), -1)
        expand = scores.unsqueeze(2) * step_p
        best_p, best_index = expand.flatten(1).topk(topk, dim=-1)
        score_list.append(expand)
        token_list.append(torch.randint(0, 32, (bs, topk * topk), generator=g))
        parents_list.append(best_index + topk * topk * (i - 1) + topk)
        scores = best_p
    return organize_draft_results(score_list, token_list, parents_list, num_draft_tokens)


TREE_CASES = [(1, 1, 4, 2), (2, 2, 3, 5), (2, 4, 4, 8), (3, 1, 3, 3), (2, 3, 4, 10)]  # bs, topk, depth, nd


def build_tree(fn, case, seed, mode):
    bs, topk, depth, nd = case
    parent_list, selected, _ = draft_tree(bs, topk, depth, nd, seed)
    seq_lens = torch.randint(1, 7, (bs,), generator=torch.Generator().manual_seed(seed))
    numel = bs * nd * nd + (int(seq_lens.sum()) * nd if mode == spec_tree.TreeMaskMode.FULL_MASK else 0)
    mask = torch.full((numel,), True)  # SGLang's callers pre-fill with True
    positions = torch.empty(bs * nd, dtype=torch.long)
    retrieve = torch.full((3, bs, nd), -1, dtype=torch.long)
    fn(parent_list, selected, seq_lens, mask, positions, retrieve[0], retrieve[1], retrieve[2], topk, depth, nd,
       mode)
    return mask, positions, retrieve, seq_lens


@pytest.mark.parametrize("mode", [spec_tree.TreeMaskMode.QLEN_ONLY, spec_tree.TreeMaskMode.FULL_MASK])
@pytest.mark.parametrize("case", TREE_CASES)
def test_build_tree_kernel_efficient_matches_sglangs_triton_kernel(case, mode, monkeypatch):
    want = build_tree(spec_tree.sgl_build_tree_kernel_triton, case, 7, mode)
    got = build_tree(ops.build_tree_kernel_efficient_cpu, case, 7, mode)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # SGLang's own CPU call site
    monkeypatch.setattr(spec_tree, "_is_cpu", True)
    monkeypatch.setattr(spec_tree, "sgl_build_tree_kernel_efficient_cpu", shim.build_tree_kernel_efficient_cpu,
                        raising=False)
    via_sglang = build_tree(spec_tree.build_tree_kernel_efficient_func, case, 7, mode)
    for a, b in zip(via_sglang, want):
        assert torch.equal(a, b)


def children(next_token, next_sibling, node):
    out, child = [], int(next_token[node])
    while child != -1:
        out.append(child)
        child = int(next_sibling[child])
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", TREE_CASES[1:])
def test_verify_tree_greedy_matches_sglangs_triton_kernel(case, seed, monkeypatch):
    bs, topk, depth, nd = case
    parent_list, selected, draft_tokens = draft_tree(bs, topk, depth, nd, seed)
    _, _, retrieve, _ = build_tree(spec_tree.sgl_build_tree_kernel_triton, case, seed,
                                   spec_tree.TreeMaskMode.QLEN_ONLY)
    rng = random.Random(seed)
    roots = torch.tensor([rng.randrange(32) for _ in range(bs)])
    candidates = torch.cat([roots.unsqueeze(1), draft_tokens], dim=1)  # [bs, nd]
    target = torch.randint(0, 32, (bs, nd), generator=torch.Generator().manual_seed(seed))
    for b in range(bs):  # mostly follow a child, so paths of several lengths get accepted
        for node in range(nd):
            kids = children(retrieve[1, b], retrieve[2, b], node)
            if kids and rng.random() < 0.75:
                target[b, node] = candidates[b, rng.choice(kids)]

    def run(fn, **names):
        predicts = torch.zeros(bs * nd, dtype=torch.int32)
        accept_index = torch.full((bs, depth + 1), -1, dtype=torch.int32)
        accepted = torch.full((bs,), -3, dtype=torch.int32)
        fn(predicts=predicts, accept_index=accept_index, accept_token_num=accepted, candidates=candidates,
           target_predict=target, **{names[k]: v for k, v in zip(("index", "next", "sibling"), retrieve)})
        return predicts, accept_index, accepted

    triton_names = dict(index="retrieve_index", next="retrieve_next_token", sibling="retrieve_next_sibling")
    cpu_names = dict(index="retrive_index", next="retrive_next_token", sibling="retrive_next_sibling")
    want = run(spec_tree.verify_tree_greedy_triton, **triton_names)
    got = run(shim.verify_tree_greedy_cpu, **cpu_names)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # SGLang's own CPU call site (it passes the retrive_* keywords)
    monkeypatch.setattr(spec_tree, "_is_cpu", True)
    monkeypatch.setattr(spec_tree, "sgl_verify_tree_greedy_cpu", shim.verify_tree_greedy_cpu, raising=False)
    via_sglang = run(spec_tree.verify_tree_greedy_func, **triton_names)
    for a, b in zip(via_sglang, want):
        assert torch.equal(a, b)


# ------------------------------------------------------------------- attention
def kv_layout(g, bs, pool_len, num_slots):
    """A req_to_token table of distinct random slots, two rows more than requests, and
    the requests' rows in random order."""
    slots = torch.randperm(num_slots, generator=g)[: (bs + 2) * pool_len]
    req_to_token = slots.to(torch.int32).view(bs + 2, pool_len)
    req_pool_indices = torch.randperm(bs + 2, generator=g)[:bs]
    return req_to_token, req_pool_indices


@pytest.mark.parametrize("heads,kv_heads,logit_cap,with_sinks,scales", [
    (4, 4, 0.0, False, (1.0, 1.0)),
    (4, 2, 0.0, True, (1.0, 1.0)),
    (6, 2, 1.5, False, (0.5, 2.0)),
])
def test_decode_attention_matches_sglangs_triton_kernel(heads, kv_heads, logit_cap, with_sinks, scales):
    g = torch.Generator().manual_seed(heads + kv_heads)
    bs, dim, dim_v, pool_len, num_slots = 3, 16, 8, 24, 128
    seq_lens = torch.tensor([5, 19, 1], dtype=torch.int64)
    req_to_token, req_pool_indices = kv_layout(g, bs, pool_len, num_slots)
    q = torch.randn(bs, heads, dim, generator=g)
    k_cache = torch.randn(num_slots, kv_heads, dim, generator=g)
    v_cache = torch.randn(num_slots, kv_heads, dim_v, generator=g)
    key = torch.randn(bs, kv_heads, dim, generator=g)
    value = torch.randn(bs, kv_heads, dim_v, generator=g)
    loc = torch.stack([req_to_token[int(r), int(s) - 1] for r, s in zip(req_pool_indices, seq_lens)]).long()
    sinks = torch.randn(heads, generator=g) if with_sinks else None
    sm_scale, (k_scale, v_scale) = dim ** -0.5, scales
    # Triton: the new token's K/V stored first (the CPU op stores them itself)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    k_ref[loc], v_ref[loc] = key, value
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    kv_indices = torch.cat([req_to_token[int(r), : int(s)] for r, s in zip(req_pool_indices, seq_lens)]).long()
    splits = 4
    want = torch.empty(bs, heads, dim_v)
    decode_attention_fwd(q, k_ref, v_ref, want, kv_indptr, kv_indices, torch.empty(bs, heads, splits, dim_v),
                         torch.empty(bs, heads, splits), torch.full((bs,), splits, dtype=torch.int32), splits,
                         sm_scale, k_scale, v_scale, logit_cap=logit_cap, sinks=sinks)
    got = torch.empty(bs, heads, dim_v)
    attn_logits = torch.zeros(bs, heads, 8, dim_v + 1)
    # the argument list of IntelAMXAttnBackend.forward_decode
    ops.decode_attention_cpu(q, k_cache, v_cache, k_scale, v_scale, got, key, value, loc, attn_logits, req_to_token,
                             req_pool_indices, seq_lens, sm_scale, logit_cap, False, 0, None, sinks)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)  # K/V stored at loc


def sdpa_reference(q, k, v, allowed, sm_scale, sinks=None):
    """[M, H, D] x [N, H, D] with an explicit [M, N] mask; a sink is one extra key with
    a zero value whose logit is the sink."""
    m, h, _ = q.shape
    mask = allowed
    if sinks is not None:
        k = torch.cat([k, torch.zeros(1, *k.shape[1:])])
        v = torch.cat([v, torch.zeros(1, *v.shape[1:])])
        mask = torch.cat([allowed, torch.ones(m, 1, dtype=torch.bool)], dim=1)
    bias = torch.zeros(h, m, k.shape[0])
    if sinks is not None:  # make q . k_sink * scale == sink
        bias[:, :, -1] = sinks.view(h, 1)
    bias = bias.masked_fill(~mask, float("-inf"))
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                                           attn_mask=bias, scale=sm_scale)
    return out.transpose(0, 1)


@pytest.mark.parametrize("logit_cap", [0.0, 30.0])  # the fused SDPA path, and the explicit one
def test_a_query_with_nothing_to_attend_gives_zeros_and_the_others_their_attention(logit_cap):
    from sglang_cast.sglang_plugin.cpu_standins.kernels import _attend

    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(3, 4, 8, generator=g), torch.randn(5, 2, 8, generator=g), torch.randn(5, 2, 8, generator=g)
    allowed = torch.ones(3, 5, dtype=torch.bool)
    allowed[1] = False
    got = _attend(q, k, v, allowed, 0.3, logit_cap, None)
    assert torch.equal(got[1], torch.zeros(4, 8))
    if logit_cap == 0.0:
        want = sdpa_reference(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), allowed, 0.3)
        torch.testing.assert_close(got[[0, 2]], want[[0, 2]], atol=1e-5, rtol=1e-5)


def test_decode_attention_sliding_window_encoder_offset_and_cross_attention_match_sdpa():
    g = torch.Generator().manual_seed(3)
    bs, heads, dim, pool_len, num_slots = 2, 2, 8, 20, 96
    seq_lens = torch.tensor([9, 4], dtype=torch.int64)
    encoder_lens = torch.tensor([3, 5], dtype=torch.int64)
    req_to_token, req_pool_indices = kv_layout(g, bs, pool_len, num_slots)
    q = torch.randn(bs, heads, dim, generator=g)
    k_cache = torch.randn(num_slots, heads, dim, generator=g)
    v_cache = torch.randn(num_slots, heads, dim, generator=g)
    window = 3
    for cross in (False, True):
        got = torch.empty(bs, heads, dim)
        ops.decode_attention_cpu(q, k_cache, v_cache, 1.0, 1.0, got, None, None, None, torch.empty(0), req_to_token,
                                 req_pool_indices, seq_lens, 0.3, 0.0, cross, window, encoder_lens, None)
        for b in range(bs):
            row = req_to_token[int(req_pool_indices[b])].long()
            if cross:  # the encoder tokens, all of them
                slots = row[: int(encoder_lens[b])]
            else:  # the decoder tokens after the encoder's, last `window` of them
                slots = row[int(encoder_lens[b]): int(encoder_lens[b]) + int(seq_lens[b])][-window:]
            want = sdpa_reference(q[b: b + 1], k_cache[slots], v_cache[slots],
                                  torch.ones(1, slots.numel(), dtype=torch.bool), 0.3)
            torch.testing.assert_close(got[b: b + 1], want, atol=1e-5, rtol=1e-5)


def extend_inputs(g, prefix_lens, extend_lens, heads, kv_heads, dim, dim_v, pool_len=32, num_slots=160):
    bs = len(prefix_lens)
    seq_lens = torch.tensor([p + e for p, e in zip(prefix_lens, extend_lens)], dtype=torch.int64)
    extend_seq_lens = torch.tensor(extend_lens, dtype=torch.int32)
    extend_start_loc = (torch.cumsum(extend_seq_lens, 0) - extend_seq_lens).to(torch.int32)
    req_to_token, req_pool_indices = kv_layout(g, bs, pool_len, num_slots)
    total = int(extend_seq_lens.sum())
    q = torch.randn(total, heads, dim, generator=g)
    k_ext = torch.randn(total, kv_heads, dim, generator=g)
    v_ext = torch.randn(total, kv_heads, dim_v, generator=g)
    k_buf = torch.randn(num_slots, kv_heads, dim, generator=g)
    v_buf = torch.randn(num_slots, kv_heads, dim_v, generator=g)
    return SimpleNamespace(bs=bs, seq_lens=seq_lens, prefix_lens=list(prefix_lens), extend_lens=list(extend_lens),
                           extend_seq_lens=extend_seq_lens, extend_start_loc=extend_start_loc,
                           req_to_token=req_to_token, req_pool_indices=req_pool_indices, q=q, k_ext=k_ext,
                           v_ext=v_ext, k_buf=k_buf, v_buf=v_buf, heads=heads, dim_v=dim_v)


def triton_extend(x, sm_scale, k_scale=1.0, v_scale=1.0, custom_mask=None, is_causal=True, logit_cap=0.0,
                  sliding_window_size=-1, sinks=None):
    """SGLang's Triton extend kernel, fed the same batch: prefix slots as kv_indices, and
    (for a tree) the FULL_MASK layout with the prefix columns all True."""
    qo_indptr = torch.zeros(x.bs + 1, dtype=torch.int32)
    qo_indptr[1:] = torch.cumsum(x.extend_seq_lens, 0)
    kv_indptr = torch.zeros(x.bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(torch.tensor(x.prefix_lens), 0)
    kv_indices = torch.cat([x.req_to_token[int(r), :p].long() for r, p in zip(x.req_pool_indices, x.prefix_lens)]
                           + [torch.empty(0, dtype=torch.long)])
    mask_indptr = None
    if custom_mask is not None:
        rows, offset = [], 0
        for p, e in zip(x.prefix_lens, x.extend_lens):
            block = custom_mask[offset: offset + e * e].view(e, e)
            offset += e * e
            rows.append(torch.cat([torch.ones(e, p, dtype=torch.bool), block], dim=1).flatten())
        mask_indptr = torch.zeros(x.bs + 1, dtype=torch.int64)
        mask_indptr[1:] = torch.cumsum(torch.tensor([r.numel() for r in rows]), 0)
        custom_mask = torch.cat(rows)
    out = torch.empty(x.q.shape[0], x.heads, x.dim_v)
    extend_attention_fwd(x.q, x.k_ext, x.v_ext, out, x.k_buf, x.v_buf, qo_indptr, kv_indptr, kv_indices, custom_mask,
                         is_causal, mask_indptr, max(x.extend_lens), k_scale, v_scale, sm_scale=sm_scale,
                         logit_cap=logit_cap, skip_prefix_custom_mask=True, sliding_window_size=sliding_window_size,
                         sinks=sinks)
    return out


def cpu_extend(x, sm_scale, k_scale=1.0, v_scale=1.0, tree_mask=None, is_causal=True, logit_cap=0.0, window=0,
               sinks=None, k_ext=True):
    out = torch.full((x.q.shape[0], x.heads, x.dim_v), float("nan"))
    # the argument list of IntelAMXAttnBackend.forward_extend
    ops.extend_attention_cpu(x.q, x.k_ext if k_ext else None, x.v_ext if k_ext else None, out, x.k_buf, x.v_buf,
                             k_scale, v_scale, x.req_to_token, x.req_pool_indices, x.seq_lens, x.extend_seq_lens,
                             x.extend_start_loc, max(x.extend_lens), sm_scale, logit_cap, False, window, None, sinks,
                             tree_mask, is_causal)
    return out


@pytest.mark.parametrize("heads,kv_heads,is_causal,logit_cap,window,with_sinks,scales", [
    (2, 2, True, 0.0, 0, False, (1.0, 1.0)),
    (4, 2, True, 0.0, 0, True, (0.5, 2.0)),
    (4, 1, True, 2.0, 4, False, (1.0, 1.0)),
    (2, 2, False, 0.0, 0, False, (1.0, 1.0)),
])
def test_extend_attention_matches_sglangs_triton_kernel(heads, kv_heads, is_causal, logit_cap, window, with_sinks,
                                                        scales):
    g = torch.Generator().manual_seed(heads * 10 + kv_heads)
    x = extend_inputs(g, prefix_lens=[0, 6, 3], extend_lens=[5, 3, 7], heads=heads, kv_heads=kv_heads, dim=16,
                      dim_v=8)
    sinks = torch.randn(heads, generator=g) if with_sinks else None
    k_scale, v_scale = scales
    want = triton_extend(x, 0.25, k_scale, v_scale, is_causal=is_causal, logit_cap=logit_cap,
                         sliding_window_size=window - 1, sinks=sinks)  # SGLang passes window - 1 to Triton
    got = cpu_extend(x, 0.25, k_scale, v_scale, is_causal=is_causal, logit_cap=logit_cap, window=window, sinks=sinks)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("case", [(2, 2, 3, 5), (2, 4, 4, 8), (2, 3, 4, 10)])
def test_extend_attention_tree_mask_matches_sglangs_triton_kernel_in_target_verify(case):
    # TARGET_VERIFY on CPU: each request extends by D draft tokens and the backend hands
    # over spec_info.custom_mask, the QLEN_ONLY [bs * D * D] mask of the tree kernel.
    bs, topk, depth, nd = case
    tree_mask, _, _, _ = build_tree(ops.build_tree_kernel_efficient_cpu, case, 11, spec_tree.TreeMaskMode.QLEN_ONLY)
    assert not tree_mask.view(bs, nd, nd).tril().equal(torch.ones(bs, nd, nd, dtype=torch.bool).tril())  # a tree
    g = torch.Generator().manual_seed(nd)
    x = extend_inputs(g, prefix_lens=[4, 9][:bs], extend_lens=[nd] * bs, heads=4, kv_heads=2, dim=16, dim_v=16)
    want = triton_extend(x, 0.25, custom_mask=tree_mask, is_causal=True)
    # a verify-mask buffer sized for a larger batch: entries past this batch are not read
    buffer = torch.cat([tree_mask, torch.zeros(2 * nd * nd, dtype=torch.bool)])
    got = cpu_extend(x, 0.25, tree_mask=buffer, is_causal=True)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)
    causal = cpu_extend(x, 0.25, is_causal=True)
    assert not torch.allclose(causal, want, atol=1e-3)  # the mask did matter


def test_extend_attention_without_k_extend_reads_the_new_tokens_from_the_pool():
    # Gemma4's KV-shared layers pass k = v = None: the new tokens' K/V are already pooled.
    g = torch.Generator().manual_seed(5)
    x = extend_inputs(g, prefix_lens=[2, 5], extend_lens=[4, 3], heads=2, kv_heads=2, dim=8, dim_v=8)
    for b in range(x.bs):
        row = x.req_to_token[int(x.req_pool_indices[b])].long()
        p, e, s = x.prefix_lens[b], x.extend_lens[b], int(x.extend_start_loc[b])
        x.k_buf[row[p: p + e]] = x.k_ext[s: s + e]
        x.v_buf[row[p: p + e]] = x.v_ext[s: s + e]
    torch.testing.assert_close(cpu_extend(x, 0.3, k_ext=False), cpu_extend(x, 0.3), atol=1e-6, rtol=1e-6)


# ------------------------------------------ SGLang's intel_amx backend, end to end
class FakeKVPool:
    """The two KV buffers of one layer, with the pool methods the backend calls."""

    def __init__(self, k, v):
        self.k, self.v = k, v

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v

    def set_kv_buffer(self, layer, loc, k, v, k_scale=None, v_scale=None):
        slots = loc.loc.long()
        self.k[slots], self.v[slots] = k.view(-1, *self.k.shape[1:]), v.view(-1, *self.v.shape[1:])


def amx_backend_parts(monkeypatch, heads, kv_heads, dim, num_draft_tokens, rows=4, pool_len=32, num_slots=128):
    g = torch.Generator().manual_seed(0)
    if "sgl_kernel" not in sys.modules and importlib.util.find_spec("sgl_kernel") is None:
        monkeypatch.setitem(sys.modules, "sgl_kernel", shim)  # the backend imports it by name
    monkeypatch.setattr(intel_amx_backend, "get_parallel", lambda: SimpleNamespace(attn_tp_size=1))
    monkeypatch.setattr(intel_amx_backend, "get_spec",
                        lambda: SimpleNamespace(speculative_num_draft_tokens=num_draft_tokens))
    pool = FakeKVPool(torch.randn(num_slots, kv_heads, dim, generator=g),
                      torch.randn(num_slots, kv_heads, dim, generator=g))
    req_to_token = torch.randperm(num_slots, generator=g)[: rows * pool_len].to(torch.int32).view(rows, pool_len)
    runner = SimpleNamespace(device="cpu", req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
                             token_to_kv_pool=pool, use_mla_backend=False,
                             model_config=SimpleNamespace(num_attention_heads=heads, context_len=pool_len))
    layer = SimpleNamespace(qk_head_dim=dim, v_head_dim=dim, tp_q_head_num=heads, layer_id=0,
                            is_cross_attention=False, k_scale_float=None, v_scale_float=None,
                            attn_type=AttentionType.DECODER, scaling=dim ** -0.5, logit_cap=0.0,
                            sliding_window_size=-1)
    return g, runner, pool, layer


def test_intel_amx_backend_target_verify_attends_each_draft_token_to_prefix_and_ancestors(monkeypatch):
    case = (2, 2, 3, 5)
    bs, topk, depth, nd = case
    heads, kv_heads, dim = 4, 2, 8
    g, runner, pool, layer = amx_backend_parts(monkeypatch, heads, kv_heads, dim, nd)
    tree_mask, _, _, _ = build_tree(ops.build_tree_kernel_efficient_cpu, case, 3, spec_tree.TreeMaskMode.QLEN_ONLY)
    req_pool_indices = torch.tensor([2, 0])
    seq_lens = torch.tensor([6, 3])  # committed prefix; the verify batch extends it by nd
    req_to_token = runner.req_to_token_pool.req_to_token
    out_cache_loc = torch.cat([req_to_token[int(r), int(s): int(s) + nd] for r, s in zip(req_pool_indices, seq_lens)])
    batch = SimpleNamespace(batch_size=bs, forward_mode=ForwardMode.TARGET_VERIFY, seq_lens=seq_lens,
                            req_pool_indices=req_pool_indices, out_cache_loc=out_cache_loc.long(), encoder_lens=None,
                            spec_info=SimpleNamespace(draft_token_num=nd, tree_topk=topk, custom_mask=tree_mask))
    backend = intel_amx_backend.IntelAMXAttnBackend(runner)
    backend.init_forward_metadata(batch)
    q = torch.randn(bs * nd, heads * dim, generator=g)
    k = torch.randn(bs * nd, kv_heads, dim, generator=g)
    v = torch.randn(bs * nd, kv_heads, dim, generator=g)
    out = backend.forward_extend(q, k, v, layer, batch).view(bs * nd, heads, dim)
    for b in range(bs):
        sl = int(seq_lens[b])
        slots = req_to_token[int(req_pool_indices[b]), : sl + nd].long()
        allowed = torch.cat([torch.ones(nd, sl, dtype=torch.bool), tree_mask.view(bs, nd, nd)[b]], dim=1)
        keys = pool.k[slots].repeat_interleave(heads // kv_heads, dim=1)
        values = pool.v[slots].repeat_interleave(heads // kv_heads, dim=1)
        want = sdpa_reference(q.view(bs * nd, heads, dim)[b * nd: (b + 1) * nd], keys, values, allowed, layer.scaling)
        torch.testing.assert_close(out[b * nd: (b + 1) * nd], want, atol=1e-5, rtol=1e-5)
    assert torch.equal(pool.k[out_cache_loc.long()], k)  # the backend stored the verify tokens' K


def test_intel_amx_multi_step_draft_decode_sees_prefix_plus_its_own_chain(monkeypatch):
    heads, kv_heads, dim, topk, num_steps = 2, 1, 8, 3, 3
    g, runner, pool, layer = amx_backend_parts(monkeypatch, heads, kv_heads, dim, num_draft_tokens=4)
    draft = intel_amx_backend.IntelAMXMultiStepDraftBackend(runner, topk, num_steps)
    req_pool_indices = torch.tensor([3, 1])
    seq_lens = torch.tensor([5, 2])
    bs = 2
    req_to_token = runner.req_to_token_pool.req_to_token
    draft.init_forward_metadata(SimpleNamespace(batch_size=bs, seq_lens=seq_lens, req_pool_indices=req_pool_indices))
    for step in range(num_steps - 1):
        # step `step` writes draft token step+1 of each candidate chain
        out_cache_loc = torch.stack([req_to_token[int(r), int(s) + tk * num_steps + step]
                                     for r, s in zip(req_pool_indices, seq_lens) for tk in range(topk)]).long()
        q = torch.randn(bs * topk, heads * dim, generator=g)
        k = torch.randn(bs * topk, kv_heads, dim, generator=g)
        v = torch.randn(bs * topk, kv_heads, dim, generator=g)
        batch = SimpleNamespace(out_cache_loc=out_cache_loc, encoder_lens=None, req_pool_indices=None, seq_lens=None)
        out = draft.attn_backends[step].forward_decode(q, k, v, layer, batch).view(bs * topk, heads, dim)
        for b in range(bs):
            row, sl = req_to_token[int(req_pool_indices[b])].long(), int(seq_lens[b])
            for tk in range(topk):
                slots = torch.cat([row[:sl], row[sl + tk * num_steps: sl + tk * num_steps + step + 1]])
                keys = pool.k[slots].repeat_interleave(heads, dim=1)
                values = pool.v[slots].repeat_interleave(heads, dim=1)
                flat = b * topk + tk
                want = sdpa_reference(q.view(-1, heads, dim)[flat: flat + 1], keys, values,
                                      torch.ones(1, slots.numel(), dtype=torch.bool), layer.scaling)
                torch.testing.assert_close(out[flat: flat + 1], want, atol=1e-5, rtol=1e-5)
        assert torch.equal(pool.k[out_cache_loc], k)
