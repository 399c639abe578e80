"""Exact tree attention of new tokens over ``[committed prefix | scratch]`` cache slices.

Why one masked SDPA call over a padded slice is exact
-----------------------------------------------------
For slot ``b`` the cache holds its committed prefix at indices ``0 .. lens[b]-1`` and
the ``n`` new (tree) tokens at ``lens[b] .. lens[b]+n-1`` (see `kv_cache.py`).  All rows
of a batch are cut to the same length ``max(lens) + n``; indices past a row's own
``lens[b] + n`` hold stale data and are masked.  New token ``i`` may see

* every committed index ``p < lens[b]`` (the prefix is entirely in its past), and
* scratch index ``lens[b] + j`` iff ``tree_mask[b, i, j]`` (``j`` is ``i`` or an ancestor).

That is exactly the key set the root-to-``i`` path would attend to if it were fed as
a plain causal sequence after the prefix.  The keys and values themselves are
identical too: RoPE uses each token's *position* (prefix length + depth), not its
cache index, and by induction over layers each token's hidden state depends only on
its own visible set.  Softmax is invariant to the order of its keys and a masked key
receives weight ``exp(-inf) = 0`` exactly, so siblings and padding contribute
nothing.  The result therefore equals per-path attention up to floating-point
summation order, which is what lets a whole draft tree be verified in one forward.

Growing scratch (multi-step drafting)
-------------------------------------
A draft tree is built one level per forward without committing in between.  So
``tree_mask`` may be ``[B, n, s]`` (``s``: the scratch width, not the verify budget ``m``
of docs/design/cast.md) with ``s >= n``: the scratch region then holds ``s``
uncommitted entries, the first ``s - n`` written by earlier forwards since the last
commit and the ``n`` new tokens last, at ``lens[b] + s - n .. lens[b] + s - 1``.  Column
``j`` of ``tree_mask`` refers to scratch entry ``j``; the argument above is unchanged.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from .kv_cache import KVCache, to_device


# Chains up to this long (a draft's catch-up, decoding) share one read-only mask per
# length and device: building it was two ops a step, ~8 % of a B = 1 CAST step's host
# work right after a forward (docs/results/2026-12-04_host_work_avx512.md).  Prefill
# lengths vary and their masks are large: built per call.
SHARED_CHAIN_MASK_MAX = 64


def _chain_mask(n: int, device: torch.device) -> Tensor:
    """``[n, n]``: each position sees itself and the positions before it."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


_shared_chain_mask = functools.lru_cache(maxsize=None)(_chain_mask)


def causal_tree_mask(batch: int, n: int, device: torch.device | str) -> Tensor:
    """The ``[batch, n, n]`` ancestor mask of a chain: ordinary prefill / decoding.  A
    view: read it, never write it (short chains share one tensor)."""
    device = torch.device(device)
    mask = _shared_chain_mask(n, device) if n <= SHARED_CHAIN_MASK_MAX else _chain_mask(n, device)
    return mask.expand(batch, n, n)


def build_attention_mask(starts: Tensor, tree_mask: Tensor, length: int) -> Tensor:
    """Visibility ``[B, 1, n, length]`` of cache indices for each new token.

    ``starts`` are the committed lengths ``lens[slots]``; ``tree_mask`` ``[B, n, s]``
    says which of the ``s`` scratch entries each new token sees (itself and its
    ancestors; every row must include the token itself, otherwise the row has no
    visible key and softmax is undefined).
    """
    n, s = tree_mask.shape[1:]
    index = torch.arange(length, device=starts.device)
    rel = index[None, :] - starts[:, None]  # [B, L]: offset into the scratch region
    in_prefix = rel < 0
    in_scratch = (rel >= 0) & (rel < s)
    scratch_col = rel.clamp(0, s - 1)[:, None, :].expand(-1, n, -1)  # [B, n, L]
    visible_tree = torch.gather(tree_mask, 2, scratch_col) & in_scratch[:, None, :]
    return (in_prefix[:, None, :] | visible_tree)[:, None]


@dataclass(frozen=True)
class AttentionBatch:
    """Per-forward attention metadata shared by all layers of one model call."""

    cache: KVCache
    slots: Tensor  # [B] cache slot of each row
    starts: Tensor  # [B] committed length of each row's slot, on the cache's device
    tree_mask: Tensor  # [B, n, s] the scratch entries each new token sees (as given)
    write_positions: Tensor  # [B, n] cache index of each new token: lens + s - n + j
    mask: Tensor  # [B, 1, n, length] bool
    length: int  # padded slice length max(lens) + s
    # Consecutive slots: `KVCache.window` views [layers, B, kv_heads, length, D] of K and V.
    windows: tuple[Tensor, Tensor] | None
    # Consecutive slots that all write at length - n: the windows' last n positions.
    new_entries: tuple[Tensor, Tensor] | None
    all_visible: bool  # every new token sees the whole slice: attention needs no mask
    _biases: dict[int, Tensor] = field(default_factory=dict)  # grouped additive masks by group count

    @classmethod
    def build(cls, cache: KVCache, slots: Tensor, tree_mask: Tensor) -> AttentionBatch:
        """Validate capacity and build the shared mask; ``tree_mask`` is ``[B, n, s]`` bool.

        ``slots`` ``[B]`` may live on the host or on the cache's device; a host tensor
        spares a device-to-host read.  Everything this decides (slice length, the fast
        paths) is decided from host values, `KVCache.lens` and ``slots``, so building a
        batch never waits for the device.
        """
        if tree_mask.dtype != torch.bool or tree_mask.ndim != 3:
            raise ValueError(
                f"tree_mask must be a [B, n, s] bool tensor, got {tree_mask.dtype} "
                f"{tuple(tree_mask.shape)}"
            )
        n, s = tree_mask.shape[1:]
        host_slots = slots.cpu()
        host_starts, length = cache.scratch_start(host_slots, s)
        device = cache.device
        device_slots = slots if slots.device == device else to_device(host_slots, device)
        starts = to_device(host_starts, device)
        mask = build_attention_mask(starts, tree_mask, length)
        first, count, lowest = int(host_slots[0]), host_slots.shape[0], int(host_starts.min())
        consecutive = torch.equal(host_slots, torch.arange(first, first + count))
        positions = (starts + (s - n))[:, None] + torch.arange(n, device=device)
        # Per-forward views and host-side facts that spare every layer some kernels at
        # batch-1 decoding (where per-op overhead rivals the GEMVs): K/V reads and writes
        # become a `select` and a `copy_` instead of multi-axis indexing / index_put, and
        # a fully visible slice (decoding) needs no mask at all.
        windows = new_entries = None
        if consecutive:
            windows = cache.window(first, count, length)
            if lowest + s == length:  # every row's scratch ends at `length`
                new_entries = (windows[0][..., length - n :, :], windows[1][..., length - n :, :])
        # One new token per row and no key past any row's own: the whole slice is visible.
        all_visible = n == s == 1 and lowest + 1 == length
        return cls(cache, device_slots, starts, tree_mask, write_positions=positions, mask=mask, length=length,
                   windows=windows, new_entries=new_entries, all_visible=all_visible)

    @classmethod
    def fixed(cls, cache: KVCache, slots: Tensor, starts: Tensor, write_positions: Tensor,
              tree_mask: Tensor) -> AttentionBatch:
        """A batch whose every shape is fixed by its inputs' shapes, for CUDA graphs
        (engine/cuda_graphs.py): the slice is the whole cache (``length = capacity``),
        K/V are read and written by index, and nothing is read on the host, so the
        same tensors can be refilled and the recorded kernels replayed.

        ``slots``, ``starts`` ``[B]`` and ``write_positions`` ``[B, n]`` are device tensors
        (the caller checked they fit the cache); ``tree_mask`` is ``[B, n, s]`` with every
        row seeing at least itself, padding included.
        """
        length = cache.capacity
        return cls(cache, slots, starts, tree_mask, write_positions=write_positions,
                   mask=build_attention_mask(starts, tree_mask, length),
                   length=length, windows=None, new_entries=None, all_visible=False)

    def attend(self, layer: int, q: Tensor, k_new: Tensor, v_new: Tensor) -> Tensor:
        """Write the new K/V into the scratch region, then attend ``q`` over the slice.

        ``q`` is ``[B, H, n, D]``, ``k_new``/``v_new`` are ``[B, kv_heads, n, D]``
        (already rotated); returns ``[B, H, n, D]``.  The grouped mask is built once
        per forward and shared by every layer.
        """
        if self.new_entries is not None:
            self.new_entries[0][layer].copy_(k_new)
            self.new_entries[1][layer].copy_(v_new)
        else:
            self.cache.write(layer, self.slots, self.write_positions, k_new, v_new)
        if self.windows is not None:
            k, v = self.windows[0][layer], self.windows[1][layer]
        else:
            k, v = self.cache.read(layer, self.slots, self.length)
        if self.all_visible:
            return grouped_attention(q, k, v, None)
        groups = q.shape[1] // k.shape[1]
        if groups not in self._biases:
            self._biases[groups] = grouped_bias(self.mask, groups, q.dtype)
        return grouped_attention(q, k, v, self._biases[groups])


# On a GPU, masked attention over at most this many grouped query rows (decode steps, draft
# layers, small verifies) runs as three plain kernels (`three_kernel_attention`), the path the
# H200 measurements of docs/native_gpu.md ran.  On a CPU the fused SDPA kernel runs at every
# size.  It computes each query row over its visible keys as a one-token step does (masked
# keys add exact zeros): on the AMX Xeon a short verify's rows are plain decoding's bit for
# bit, so greedy speculation flips fewer near-ties (on the AVX-512 EPYC without AMX they
# differ by fp32 rounding, 1-2e-7, 2026-12-01); and it is no slower (torch 2.13, 2-core AMX
# Xeon: 0.53-0.94x the three kernels' time alone at B = 1-16, a whole B = 1 verify forward
# 0.94-0.99x, engine tokens/s a wash; docs/results/2026-11-30_sdpa_cpu_amx.md).
SMALL_QUERY_ROWS = 64


def grouped_bias(mask: Tensor, groups: int, dtype: torch.dtype) -> Tensor:
    """Additive ``0 / -inf`` mask ``[B, 1, groups·n, L]`` for grouped queries (see below)."""
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return bias if groups == 1 else bias.repeat(1, 1, groups, 1)


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    """Attention with grouped-query heads and an additive mask from `grouped_bias`.

    Instead of copying each K/V head ``groups`` times, the ``groups`` query heads
    that share a K/V head are stacked along the query axis: ``[B, H, n, D]`` becomes
    ``[B, kv_heads, groups·n, D]`` (query head ``j·groups + g`` reads K/V head ``j``,
    the ``repeat_interleave`` convention).  No K/V is copied.  ``bias=None`` means every
    query sees every key (decoding): one unmasked SDPA call, the fewest kernels.
    """
    batch, heads, n, dim = q.shape
    kv_heads = k.shape[1]
    grouped = q.reshape(batch, kv_heads, (heads // kv_heads) * n, dim)
    if bias is None:
        out = F.scaled_dot_product_attention(grouped, k, v)
    elif not grouped.is_cpu and grouped.shape[2] <= SMALL_QUERY_ROWS:
        out = three_kernel_attention(grouped, k, v, bias)
    else:
        out = F.scaled_dot_product_attention(grouped, k, v, attn_mask=bias)
    # SDPA may hand back a non-contiguous layout (CUDA's fp32 kernels do): reshape, not view.
    return out.reshape(batch, heads, n, dim)


def three_kernel_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """``softmax(q·kᵀ/√D + bias)·v`` as two matmuls and a softmax, for ``q`` ``[B, h, r, D]``
    over ``k``, ``v`` ``[B, h, L, D]``: what a GPU runs for few query rows (`SMALL_QUERY_ROWS`)."""
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5).add_(bias)
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def tree_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """One-call attention for a boolean visibility mask ``[B, 1, n, L]`` and
    grouped-query heads (training code and tests; the models use `AttentionBatch`)."""
    return grouped_attention(q, k, v, grouped_bias(mask, q.shape[1] // k.shape[1], q.dtype))
