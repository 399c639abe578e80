"""Pure-PyTorch stand-ins for the ``sgl_kernel`` CPU ops that SGLang 0.5.23's CPU
path calls with no fallback.  Test infrastructure only (see the package docstring):
each function is written from the op's semantics as SGLang's callers and its Triton
twins use them, for readability and correctness, not speed.

Conventions, shared by every function here:

* ``[B]``-style comments give shapes; ``B`` is the batch (number of requests),
  ``P`` the ``req_to_token`` row length (``pool_len``), ``N`` a KV-pool size.
* Index tensors may be int32 or int64 (the real kernels dispatch on both); outputs
  keep the dtype of the tensor they are written into.
* ``None``-returning functions write their outputs in place, exactly where the real
  op does, and nowhere else (entries the real op leaves alone are left alone).
"""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

__all__ = [
    "assign_req_to_token_pool",
    "assign_extend_cache_locs",
    "assign_draft_cache_locs_contiguous",
    "build_draft_decode_metadata",
    "copy_all_layer_kv_cache",
    "fill_bonus_tokens",
    "fill_accept_out_cache_loc",
    "rotate_input_ids",
    "build_tree_kernel_efficient",
    "verify_tree_greedy",
    "decode_attention",
    "extend_attention",
]

FULL_MASK = 0
QLEN_ONLY = 1


# ----------------------------------------------------------------------- helpers
def _ragged(starts: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flatten the ranges ``[starts[i], starts[i] + lens[i])`` in request order.

    Returns ``(seg, pos)``, both ``[sum(lens)]`` int64: ``seg[t]`` is the request a
    flat entry belongs to and ``pos[t]`` its position (``starts[seg] + offset``)."""
    lens = lens.reshape(-1).to(torch.int64).clamp(min=0)
    starts = starts.reshape(-1).to(torch.int64)
    total = int(lens.sum())
    seg = torch.repeat_interleave(torch.arange(lens.numel(), device=lens.device), lens, output_size=total)
    first = torch.cumsum(lens, 0) - lens  # flat index where each request's range begins
    offset = torch.arange(total, device=lens.device) - first[seg]
    return seg, starts[seg] + offset


def _check_pool(req_to_token: torch.Tensor, pool_len: int, name: str) -> None:
    if req_to_token.dim() != 2 or req_to_token.size(1) != pool_len:
        raise RuntimeError(f"{name}: req_to_token must be [rows, pool_len={pool_len}], got {tuple(req_to_token.shape)}")


def _request_slots(name: str, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                   pool_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, cols)`` [sum(end - start)] int64: every request's ``req_to_token`` cells
    ``[start_offset[i], end_offset[i])`` in request order, checked against the pool's
    width and ``out_cache_loc``'s length."""
    _check_pool(req_to_token, pool_len, name)
    lens = end_offset.reshape(-1).to(torch.int64) - start_offset.reshape(-1).to(torch.int64)
    seg, cols = _ragged(start_offset, lens)
    if seg.numel() > out_cache_loc.numel():
        raise RuntimeError(f"{name}: out_cache_loc has {out_cache_loc.numel()} entries but the offsets need "
                           f"{seg.numel()}")
    return req_pool_indices.reshape(-1).to(torch.int64)[seg], cols


# --------------------------------------------------------- KV-slot bookkeeping
def assign_req_to_token_pool(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                             pool_len: int) -> None:
    """Scatter freshly allocated KV slots into the request-to-token map::

        req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]] =
            out_cache_loc[prefix[i]:prefix[i + 1]],  prefix = exclusive cumsum(end - start)

    req_pool_indices [B]; req_to_token [R, P] (written); start_offset, end_offset [B];
    out_cache_loc [>= sum(end - start)].  Twin: Triton ``assign_req_to_token_pool``
    (``srt/mem_cache/allocation.py``)."""
    rows, cols = _request_slots("assign_req_to_token_pool", req_pool_indices, req_to_token, start_offset,
                                end_offset, out_cache_loc, pool_len)
    req_to_token[rows, cols] = out_cache_loc.reshape(-1)[: rows.numel()].to(req_to_token.dtype)


def assign_extend_cache_locs(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                             pool_len: int) -> None:
    """Gather each request's KV slots ``[start_offset[i], end_offset[i])`` out of
    ``req_to_token`` into a dense vector (the inverse of ``assign_req_to_token_pool``)::

        out_cache_loc[prefix[i] + j] = req_to_token[req_pool_indices[i], start_offset[i] + j]

    req_pool_indices [B]; req_to_token [R, P]; start_offset, end_offset [B];
    out_cache_loc [>= sum(end - start)] (written; the tail is left alone).  Twin: Triton
    ``assign_extend_cache_locs`` (``kernels/ops/speculative/cache_locs.py``)."""
    rows, cols = _request_slots("assign_extend_cache_locs", req_pool_indices, req_to_token, start_offset,
                                end_offset, out_cache_loc, pool_len)
    out_cache_loc.view(-1)[: rows.numel()] = req_to_token[rows, cols].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len: int,
                                       topk: int, num_steps: int) -> None:
    """Read back the draft KV slots reserved after each request's committed prefix::

        out_cache_loc.view(B, topk * num_steps)[i] =
            req_to_token[req_pool_indices[i], seq_lens[i] : seq_lens[i] + topk * num_steps]

    (candidate ``tk``'s chain is the ``num_steps`` slots from ``seq_lens[i] + tk * num_steps``).
    req_pool_indices, seq_lens [B]; req_to_token [R, P]; out_cache_loc [B * topk * num_steps]
    (written).  Twin: Triton ``assign_draft_cache_locs_contiguous`` without positions."""
    _check_pool(req_to_token, pool_len, "assign_draft_cache_locs_contiguous")
    bs = req_pool_indices.numel()
    copy_len = topk * num_steps
    if out_cache_loc.numel() != bs * copy_len:
        raise RuntimeError(f"assign_draft_cache_locs_contiguous: out_cache_loc has {out_cache_loc.numel()} "
                           f"entries, expected {bs} * {topk} * {num_steps}")
    if bs == 0 or copy_len == 0:
        return
    cols = seq_lens.reshape(-1, 1).to(torch.int64) + torch.arange(copy_len, device=seq_lens.device)
    rows = req_pool_indices.reshape(-1, 1).to(torch.int64)
    out_cache_loc.view(bs, copy_len)[:] = req_to_token[rows, cols].to(out_cache_loc.dtype)


def build_draft_decode_metadata(req_to_token, req_pool_indices, seq_lens, topk: int, num_steps: int,
                                pool_len: int) -> torch.Tensor:
    """The ``req_to_token`` each draft candidate sees in multi-step draft decode.

    Returns ``[B * topk, P]`` (dtype of ``req_to_token``): row ``b * topk + tk`` holds
    request ``b``'s committed prefix ``req_to_token[rpi[b], :seq_lens[b]]`` followed by
    candidate ``tk``'s draft slots ``req_to_token[rpi[b], sl + tk * num_steps : sl + (tk + 1)
    * num_steps]`` (the contiguous layout ``assign_draft_cache_locs_contiguous`` reads).
    Only the first ``seq_lens[b] + num_steps`` entries of a row are meaningful (the
    real op leaves the rest uninitialised; here they are 0).  Caller:
    ``IntelAMXMultiStepDraftBackend.init_forward_metadata``."""
    _check_pool(req_to_token, pool_len, "build_draft_decode_metadata")
    num_seqs = req_pool_indices.numel()
    out_rows = num_seqs * topk
    if out_rows == 0:
        return req_to_token.new_zeros((0, pool_len))
    src = req_to_token[req_pool_indices.reshape(-1).to(torch.int64)].repeat_interleave(topk, dim=0)  # [B*topk, P]
    sl = seq_lens.reshape(-1).to(torch.int64).repeat_interleave(topk).unsqueeze(1)  # [B*topk, 1]
    tk = torch.arange(topk, device=req_to_token.device).repeat(num_seqs).unsqueeze(1)  # [B*topk, 1]
    col = torch.arange(pool_len, device=req_to_token.device).unsqueeze(0)  # [1, P]
    in_prefix = col < sl
    in_draft = (col >= sl) & (col < sl + num_steps)
    src_col = torch.where(in_draft, col + tk * num_steps, col).clamp(max=pool_len - 1)
    gathered = torch.gather(src, 1, src_col.expand(out_rows, pool_len))
    return torch.where(in_prefix | in_draft, gathered, torch.zeros_like(gathered))


def copy_all_layer_kv_cache(data_ptrs, strides, tgt_loc, src_loc) -> None:
    """Move KV slot rows inside every KV buffer, addressed by raw pointer::

        for each buffer b:  rows_b[tgt_loc[i]] = rows_b[src_loc[i]]   (all i at once)

    data_ptrs [L] uint64: base address of each (contiguous) K/V buffer; strides [L]
    int64: bytes per slot row (also the copy width); tgt_loc, src_loc [n] slot indices.
    All source rows of a buffer are read before any target row is written, so
    overlapping ``src``/``tgt`` are safe (as in the Triton ``copy_all_layer_kv_cache_tiled``
    and the real CPU op).  Caller: ``copy_all_layer_kv_cache_func``
    (``kernels/ops/kvcache/cache_move.py``), which owns the buffers the pointers name."""
    n = tgt_loc.numel()
    if src_loc.numel() != n:
        raise RuntimeError(f"copy_all_layer_kv_cache: {n} target slots but {src_loc.numel()} source slots")
    if n == 0 or data_ptrs.numel() == 0:
        return
    tgt = tgt_loc.reshape(-1).to(torch.int64)
    src = src_loc.reshape(-1).to(torch.int64)
    rows_needed = int(torch.maximum(tgt.max(), src.max())) + 1
    ptrs = data_ptrs.reshape(-1).view(torch.int64).tolist()  # x86-64 addresses fit in int64
    widths = strides.reshape(-1).to(torch.int64).tolist()
    if len(widths) != len(ptrs):
        raise RuntimeError("copy_all_layer_kv_cache: data_ptrs and strides differ in length")
    for ptr, width in zip(ptrs, widths):
        raw = (ctypes.c_uint8 * (rows_needed * width)).from_address(ptr)
        rows = torch.frombuffer(raw, dtype=torch.uint8).view(rows_needed, width)
        rows[tgt] = rows[src]  # advanced indexing on the right copies first: gather, then scatter


# ------------------------------------------------------------- EAGLE helpers
def fill_bonus_tokens(accept_tokens, accept_lens, bonus_tokens, accept_stride: int) -> None:
    """The last accepted token of each request (``accept_lens`` counts the bonus)::

        bonus_tokens[i] = accept_tokens.view(-1)[accept_stride * i + accept_lens[i] - 1]

    accept_tokens [B, accept_stride]; accept_lens [B]; bonus_tokens [B] (written).
    Twin: Triton ``fill_bonus_tokens`` (``kernels/ops/speculative/eagle.py``)."""
    bs = accept_lens.numel()
    if bs == 0:
        return
    flat = torch.arange(bs, device=accept_lens.device) * accept_stride + accept_lens.reshape(-1).to(torch.int64) - 1
    bonus_tokens.view(-1)[:bs] = accept_tokens.reshape(-1)[flat].to(bonus_tokens.dtype)


def fill_accept_out_cache_loc(accept_index, out_cache_loc, accept_out_cache_loc) -> None:
    """Compact the accepted tokens' KV slots, in order, skipping rejected (-1) entries::

        accept_out_cache_loc[:k] = out_cache_loc[accept_index[accept_index > -1]]

    accept_index [B, S] or flat (-1 = rejected); out_cache_loc [B * D]; accept_out_cache_loc
    [>= k] (written; entries past k are left alone).  Twin: Triton
    ``fill_accept_out_cache_loc``."""
    idx = accept_index.reshape(-1).to(torch.int64)
    kept = idx[idx > -1]
    if kept.numel() == 0:
        return
    accept_out_cache_loc.view(-1)[: kept.numel()] = out_cache_loc.reshape(-1)[kept].to(accept_out_cache_loc.dtype)


def rotate_input_ids(input_ids, extend_start_loc, extend_seq_lens, topk_index, select_index=None) -> None:
    """Shift each request's extend segment left by one token and put the new token in::

        ids[s : s + n - 1] = ids[s + 1 : s + n]          (s = extend_start_loc[i], n = extend_seq_lens[i])
        ids[select_index[i] if given else s + n - 1] = topk_index[i]      (when n > 0)

    input_ids [T] (written); extend_start_loc, extend_seq_lens [B]; topk_index [B] (or
    [B, 1]); select_index [B] absolute positions or None.  Twin: Triton
    ``rotate_input_ids_kernel`` (``kernels/ops/speculative/multi_layer_eagle.py``)."""
    bs = extend_seq_lens.numel()
    if bs == 0:
        return
    ids = input_ids.view(-1)
    lens = extend_seq_lens.reshape(-1).to(torch.int64)
    starts = extend_start_loc.reshape(-1).to(torch.int64)
    _, pos = _ragged(starts, (lens - 1).clamp(min=0))
    if pos.numel():
        ids[pos] = ids[pos + 1].clone()
    live = lens > 0
    if select_index is not None:
        last = select_index.reshape(-1).to(torch.int64)[:bs]
    else:
        last = starts + lens - 1
    ids[last[live]] = topk_index.reshape(-1)[:bs][live].to(ids.dtype)


def _parent_slot(sel: list[int], par: list[int], node: int, topk: int) -> Optional[int]:
    """Tree slot (0 = root, k = ``sel[k - 1]``) of the parent of draft ``node`` (0-based in
    ``sel``); None when the parent's token is missing from ``sel`` (a malformed tree)."""
    parent_tb = sel[node] // topk
    if parent_tb == 0:
        return 0
    parent_token = par[parent_tb]
    for k, token in enumerate(sel):
        if token == parent_token:
            return k + 1
    return None


def build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                                retrive_next_token, retrive_next_sibling, topk: int, depth: int,
                                draft_token_num: int, tree_mask_mode: int) -> None:
    """Build the EAGLE draft tree that target verify consumes (``D = draft_token_num``).

    Inputs: parent_list [B, topk * (depth - 1) + 1] (or [B, 0] when depth == 1): the
    flat score index each step's parents came from; selected_index [B, D - 1]: the
    (sorted) flat score indices of the kept draft tokens; verified_seq_len [B].
    Outputs, written in place:

    * tree slot 0 is the root (the bonus token), slot k >= 1 is ``selected_index[:, k-1]``;
      a node's parent is the slot whose selected index equals
      ``parent_list[b, selected_index[b, k-1] // topk]`` (the root when that quotient is 0);
    * ``positions`` [B * D]: ``verified_seq_len[b] + depth of the slot`` (root depth 0);
    * ``retrive_index`` [B, D] = ``b * D + k``; ``retrive_next_token`` [B, D]: first
      child, ``retrive_next_sibling`` [B, D]: next sibling (-1 = none), so a node's
      children chain in increasing slot order.  Both must arrive filled with -1: only
      linked entries are written;
    * ``tree_mask``: slot k attends to the root and to its ancestors and itself.  QLEN_ONLY
      (1): [B * D * D] bool, row ``(b * D + k)`` fully written.  FULL_MASK (0):
      [sum(seq_len * D) + B * D * D], row k of request b starts at
      ``b * D * D + D * sum(seq_len[:b]) + (seq_len[b] + D) * k`` and only its last D
      entries are written (the caller pre-fills the prefix columns with True).

    Ancestor walks stop after ``depth`` steps or at a missing parent, as the Triton and C++
    kernels do.  Twin: ``sgl_build_tree_kernel_efficient_triton``
    (``kernels/ops/speculative/spec_tree.py``)."""
    if tree_mask_mode not in (FULL_MASK, QLEN_ONLY):
        raise RuntimeError(f"build_tree_kernel_efficient: only FULL_MASK (0) and QLEN_ONLY (1) are supported, "
                           f"got {tree_mask_mode}")
    bs = verified_seq_len.numel()
    nd = draft_token_num
    seq_lens = verified_seq_len.reshape(-1).to(torch.int64).tolist()
    sels = selected_index.reshape(bs, nd - 1).tolist() if bs else []
    width = parent_list.numel() // bs if bs else 0  # 0 when depth == 1 (no non-root parents)
    pars = parent_list.reshape(bs, width).tolist() if bs else []
    next_token = retrive_next_token.reshape(bs, nd).tolist()
    next_sibling = retrive_next_sibling.reshape(bs, nd).tolist()
    pos_out: list[int] = []
    mask_index: list[int] = []
    mask_value: list[bool] = []
    prefix_sum = 0
    for b in range(bs):
        sel, par, seq_len = sels[b], pars[b], seq_lens[b]
        nt, ns = next_token[b], next_sibling[b]
        # first-child / next-sibling links; walking the slots downwards leaves each chain in slot order
        for i in range(nd - 1, 0, -1):
            slot = _parent_slot(sel, par, i - 1, topk)
            if slot is None:
                continue
            if nt[slot] != -1:
                ns[i] = nt[slot]
            nt[slot] = i
        # mask rows and positions
        if tree_mask_mode == QLEN_ONLY:
            base = b * nd * nd
            row_stride = nd
        else:
            base = b * nd * nd + prefix_sum * nd + seq_len
            row_stride = seq_len + nd
        prefix_sum += seq_len
        for k in range(nd):
            row = [False] * nd
            row[0] = True
            steps = 0
            if k > 0:
                cur = k - 1
                while steps < depth:
                    steps += 1
                    row[cur + 1] = True
                    slot = _parent_slot(sel, par, cur, topk)
                    if slot is None or slot == 0:
                        break
                    cur = slot - 1
            pos_out.append(seq_len + steps)
            start = base + row_stride * k
            mask_index.extend(range(start, start + nd))
            mask_value.extend(row)
    if bs == 0:
        return
    dev = positions.device
    positions.view(-1)[: bs * nd] = torch.tensor(pos_out, dtype=positions.dtype, device=dev)
    retrive_index.view(bs, nd)[:] = (torch.arange(bs * nd, device=dev).view(bs, nd)).to(retrive_index.dtype)
    retrive_next_token.view(bs, nd)[:] = torch.tensor(next_token, dtype=retrive_next_token.dtype, device=dev)
    retrive_next_sibling.view(bs, nd)[:] = torch.tensor(next_sibling, dtype=retrive_next_sibling.dtype, device=dev)
    tree_mask.view(-1)[torch.tensor(mask_index, dtype=torch.int64, device=dev)] = torch.tensor(
        mask_value, dtype=torch.bool, device=dev).to(tree_mask.dtype)


def verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                       retrive_next_sibling, target_predict) -> None:
    """Greedy tree verification: per request, walk down from the root, at each level
    taking the first child (in sibling order) whose draft token equals the target
    model's argmax at the last accepted node; stop at the first level with no match.

    candidates, retrive_index, retrive_next_token, retrive_next_sibling, target_predict
    [B, D] (``retrive_index`` holds flat indices ``b * D + k``; ``target_predict`` is read
    at those flat indices).  Outputs: ``accept_index`` [B, S]: flat indices of the
    accepted path, root first (unwritten entries keep the caller's -1);
    ``accept_token_num`` [B]: accepted drafts, bonus excluded; ``predicts`` [B * D]: at
    each accepted node's flat index, the target token that follows it (the last one is
    the bonus).  Twin: ``verify_tree_greedy_kernel_triton``
    (``kernels/ops/speculative/spec_tree.py``)."""
    bs, nd = candidates.shape
    steps = accept_index.shape[1]
    cand = candidates.tolist()
    ridx = retrive_index.tolist()
    rnt = retrive_next_token.tolist()
    rns = retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    pred_idx: list[int] = []
    pred_val: list[int] = []
    acc_idx: list[tuple[int, int]] = []
    acc_val: list[int] = []
    num_accepted: list[int] = []
    for b in range(bs):
        last = ridx[b][0]
        acc_idx.append((b, 0))
        acc_val.append(last)
        accepted = 0
        cur = 0
        for _ in range(1, steps):
            cur = rnt[b][cur]
            while cur != -1:
                if cand[b][cur] == target[last]:
                    pred_idx.append(last)
                    pred_val.append(target[last])
                    accepted += 1
                    acc_idx.append((b, accepted))
                    acc_val.append(ridx[b][cur])
                    last = ridx[b][cur]
                    break
                cur = rns[b][cur]
            if cur == -1:
                break
        num_accepted.append(accepted)
        pred_idx.append(last)
        pred_val.append(target[last])
    if bs == 0:
        return
    dev = predicts.device
    predicts.view(-1)[torch.tensor(pred_idx, dtype=torch.int64, device=dev)] = torch.tensor(
        pred_val, dtype=predicts.dtype, device=dev)
    rows, cols = zip(*acc_idx)
    accept_index[torch.tensor(rows, device=dev), torch.tensor(cols, device=dev)] = torch.tensor(
        acc_val, dtype=accept_index.dtype, device=dev)
    accept_token_num.view(-1)[:bs] = torch.tensor(num_accepted, dtype=accept_token_num.dtype, device=dev)


# ----------------------------------------------------------------- attention
def _attend(q, k, v, allowed, sm_scale: float, logit_cap: float, sinks) -> torch.Tensor:
    """Masked softmax attention for one request, in float32.

    q [M, Hq, Dk]; k [N, Hkv, Dk]; v [N, Hkv, Dv]; allowed [M, N] bool.  Query head h
    reads KV head ``h // (Hq // Hkv)``.  Scores are ``sm_scale * q.k``, then
    ``logit_cap * tanh(s / logit_cap)`` when ``logit_cap > 0``; ``sinks`` [Hq] add
    ``exp(sink)`` to each head's softmax denominator.  Rows with nothing to attend give 0.
    Returns [M, Hq, Dv] float32.  Without a logit cap or sinks (the embedded model's
    case) torch's fused SDPA runs it: the explicit path below costs most of a CPU verify
    forward in copies (py-spy, torch profiler: docs/gpu.md)."""
    m, hq, _ = q.shape
    n, hkv, dv = v.shape
    if n == 0 or m == 0:
        return q.new_zeros((m, hq, dv), dtype=torch.float32)
    group = hq // hkv
    if group * hkv != hq:
        raise RuntimeError(f"attention: {hq} query heads are not a multiple of {hkv} KV heads")
    if logit_cap <= 0 and sinks is None:
        out = torch.nn.functional.scaled_dot_product_attention(
            q.float().transpose(0, 1), k.float().transpose(0, 1), v.float().transpose(0, 1),
            attn_mask=allowed, scale=sm_scale, enable_gqa=group > 1).transpose(0, 1)  # [M, Hq, Dv]
        empty = ~allowed.any(dim=1)
        return out.masked_fill(empty.view(m, 1, 1), 0.0) if bool(empty.any()) else out
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    s = torch.einsum("mhd,nhd->hmn", q.float(), k) * sm_scale
    if logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    s = s.masked_fill(~allowed.unsqueeze(0), float("-inf"))
    if sinks is not None:
        sink_col = sinks.float().reshape(hq, 1, 1).expand(hq, m, 1)
        p = torch.softmax(torch.cat([s, sink_col], dim=-1), dim=-1)[..., :n]
    else:
        p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # fully masked rows: softmax of all -inf
    return torch.einsum("hmn,nhd->mhd", p, v)


def _dequantised(pool: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    """``pool[slots]`` as float32 times ``scale`` (no extra copy when neither changes it)."""
    values = pool[slots].float()
    return values if scale == 1.0 else values * scale


def _window(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, causal: bool) -> torch.Tensor:
    """Sliding-window visibility [M, N]: ``q - k < window`` (and ``k - q < window`` when
    not causal); everything when ``window <= 0``.  ``window`` is SGLang's
    ``layer.sliding_window_size + 1`` (the number of most recent tokens kept)."""
    if window <= 0:
        return torch.ones(q_pos.numel(), k_pos.numel(), dtype=torch.bool, device=q_pos.device)
    diff = q_pos.view(-1, 1) - k_pos.view(1, -1)
    keep = diff < window
    if not causal:
        keep &= -diff < window
    return keep


def decode_attention(query, k_cache, v_cache, k_scale: float, v_scale: float, output, key, value, loc,
                     attn_logits, req_to_token, req_pool_indices, seq_lens, sm_scale: float, logit_cap: float,
                     is_cross_attention: bool, sliding_window_size: int, encoder_lens, sinks) -> None:
    """One new query token per sequence against its cached KV (the ``intel_amx`` backend's
    ``forward_decode``, including EAGLE's multi-step draft decode).

    query [B, Hq, Dk]; k_cache [N, Hkv, Dk], v_cache [N, Hkv, Dv] (the layer's KV pool);
    output [B, Hq, Dv] (written).  When ``key``/``value`` ([B, Hkv, Dk] / [B, Hkv, Dv]) are
    given they are first stored at ``k_cache[loc]`` / ``v_cache[loc]`` (loc [B]) -- the
    backend relies on this, it does not call ``set_kv_buffer`` itself for bf16/fp32 pools.
    Sequence b attends to slots ``req_to_token[req_pool_indices[b], off : off + L]`` with
    ``L = seq_lens[b]`` (``encoder_lens[b]`` for cross-attention) and ``off =
    encoder_lens[b]`` for decoder self-attention of an encoder-decoder model, else 0; the
    cached values are dequantised as ``k * k_scale``, ``v * v_scale``.
    ``sliding_window_size > 0`` keeps only the last that many slots.  ``attn_logits``
    [B, Hq, splits, Dv + 1] is the real kernel's split-KV scratch; it is not used here.
    Twin: Triton ``decode_attention_fwd`` (``kernels/ops/attention/decode_attention.py``)."""
    if key is not None:
        if value is None:
            raise RuntimeError("decode_attention: key and value must be given together")
        slots = loc.reshape(-1).to(torch.int64)
        k_cache[slots] = key.reshape(slots.numel(), *k_cache.shape[1:]).to(k_cache.dtype)
        v_cache[slots] = value.reshape(slots.numel(), *v_cache.shape[1:]).to(v_cache.dtype)
    rows = req_pool_indices.reshape(-1).tolist()
    lens = seq_lens.reshape(-1).tolist()
    enc = encoder_lens.reshape(-1).tolist() if encoder_lens is not None else None
    for b in range(len(lens)):
        kv_len = enc[b] if is_cross_attention else lens[b]
        offset = enc[b] if (enc is not None and not is_cross_attention) else 0
        slots = req_to_token[rows[b], offset: offset + kv_len].to(torch.int64)
        k_pos = torch.arange(kv_len, device=query.device)
        q_pos = torch.tensor([kv_len - 1], device=query.device)
        allowed = _window(q_pos, k_pos, 0 if is_cross_attention else sliding_window_size, True)
        k = _dequantised(k_cache, slots, k_scale)
        v = _dequantised(v_cache, slots, v_scale)
        out = _attend(query[b: b + 1], k, v, allowed, sm_scale, logit_cap, sinks)
        output[b: b + 1] = out.to(output.dtype)


def extend_attention(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale: float, v_scale: float,
                     req_to_token, req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc,
                     max_len_extend: int, sm_scale: float, logit_cap: float, is_cross_attention: bool,
                     sliding_window_size: int, encoder_lens, sinks, tree_mask, is_causal: bool) -> None:
    """Prefill / extend attention: each sequence's new tokens against its cached prefix
    and against each other (the ``intel_amx`` backend's ``forward_extend``: prefill,
    EAGLE draft extend, and target verify).

    q_extend [T, Hq, Dk]; k_extend [T, Hkv, Dk], v_extend [T, Hkv, Dv] (the new tokens'
    K/V, already stored in the pool by the backend; when None they are read back from
    the pool); o_extend [T, Hq, Dv] (written); k_buffer, v_buffer: the layer's KV pool.
    Sequence b owns rows ``[extend_start_loc[b], + extend_seq_lens[b])`` of the extend
    tensors; its prefix is ``P = seq_lens[b] - extend_seq_lens[b]`` tokens at slots
    ``req_to_token[req_pool_indices[b], off : off + P]`` (``off`` as in
    ``decode_attention``), dequantised with ``k_scale`` / ``v_scale``.

    Visibility of extend token i (absolute position ``P + i``):

    * prefix tokens: all of them;
    * extend token j: ``tree_mask`` given -> ``tree_mask[b][i, j]``, where the mask is
      the QLEN_ONLY layout: request b's ``[E_b, E_b]`` bool block starts at
      ``sum(E_c ** 2 for c < b)`` (``b * D * D`` in target verify, ``D`` draft tokens;
      entries past the batch are ignored).  It replaces the causal rule, as a custom
      mask does in the Triton kernel; otherwise ``j <= i`` when ``is_causal``, else all;
    * ``sliding_window_size > 0`` also drops keys ``sliding_window_size`` or more
      positions back (and ahead, when not causal);
    * cross-attention: the ``encoder_lens[b]`` encoder slots only.

    ``max_len_extend`` is the real kernel's tiling bound and is not needed here.  The
    backend passes ``tree_mask`` only in TARGET_VERIFY with ``tree_topk != 1``
    (``IntelAMXAttnBackend._build_extend_metadata``).  Twin: Triton
    ``extend_attention_fwd`` (``kernels/ops/attention/extend_attention.py``) with
    ``custom_mask`` and ``skip_prefix_custom_mask=True``."""
    rows = req_pool_indices.reshape(-1).tolist()
    lens = seq_lens.reshape(-1).tolist()
    ext_lens = extend_seq_lens.reshape(-1).tolist()
    starts = extend_start_loc.reshape(-1).tolist()
    enc = encoder_lens.reshape(-1).tolist() if encoder_lens is not None else None
    flat_mask = tree_mask.reshape(-1) if tree_mask is not None else None
    mask_offset = 0
    dev = q_extend.device
    for b in range(len(ext_lens)):
        e, start = ext_lens[b], starts[b]
        prefix = lens[b] - e
        if prefix < 0:
            raise RuntimeError(f"extend_attention: sequence {b} has seq_len {lens[b]} < extend_len {e}")
        q = q_extend[start: start + e]
        offset = enc[b] if (enc is not None and not is_cross_attention) else 0
        if is_cross_attention:
            slots = req_to_token[rows[b], : enc[b]].to(torch.int64)
            k = _dequantised(k_buffer, slots, k_scale)
            v = _dequantised(v_buffer, slots, v_scale)
            allowed = torch.ones(e, slots.numel(), dtype=torch.bool, device=dev)
        else:
            slots = req_to_token[rows[b], offset: offset + lens[b]].to(torch.int64)
            k_pre = _dequantised(k_buffer, slots[:prefix], k_scale)
            v_pre = _dequantised(v_buffer, slots[:prefix], v_scale)
            if k_extend is not None:
                k_new = k_extend[start: start + e].float()
                v_new = v_extend[start: start + e].float()
            else:
                k_new = _dequantised(k_buffer, slots[prefix:], k_scale)
                v_new = _dequantised(v_buffer, slots[prefix:], v_scale)
            k = torch.cat([k_pre, k_new])
            v = torch.cat([v_pre, v_new])
            i = torch.arange(e, device=dev).view(-1, 1)
            j = torch.arange(e, device=dev).view(1, -1)
            if flat_mask is not None:
                block = flat_mask[mask_offset: mask_offset + e * e]
                if block.numel() != e * e:
                    raise RuntimeError(f"extend_attention: tree_mask has {flat_mask.numel()} entries, too few for "
                                       f"sequence {b} (needs {mask_offset + e * e})")
                among_new = block.view(e, e) != 0
            elif is_causal:
                among_new = j <= i
            else:
                among_new = torch.ones(e, e, dtype=torch.bool, device=dev)
            allowed = torch.cat([torch.ones(e, prefix, dtype=torch.bool, device=dev), among_new], dim=1)
            q_pos = prefix + torch.arange(e, device=dev)
            allowed &= _window(q_pos, torch.arange(lens[b], device=dev), sliding_window_size, is_causal)
        mask_offset += e * e
        out = _attend(q, k, v, allowed, sm_scale, logit_cap, sinks)
        o_extend[start: start + e] = out.to(o_extend.dtype)
