"""Slot-based KV cache with a scratch region for speculative (tree) tokens.

Layout per slot (one sequence per slot)::

    index:  0 ........ lens-1 | lens ...... lens+s-1 | ... capacity-1
            committed prefix   | scratch (uncommitted) | stale / free

A forward writes the K/V of its ``n`` new tokens into the scratch region without
moving ``lens`` (usually ``s == n``; a multi-step draft appends to the scratch of
earlier uncommitted forwards, ``s > n``); verification then calls `commit` to
compact the accepted tokens into place.  Rejected tokens are never copied or erased:
they are simply beyond ``lens`` and are masked out (and later overwritten) by the
next forward.  Keeping the
committed prefix contiguous from index 0 is what lets attention use one padded
``[prefix | scratch]`` slice per slot (see `attention.py`).

Where the lengths live: ``lens`` is a host tensor, the one truth about each slot's
committed length.  Every forward needs the slice length on the host before it can
launch anything, and every commit knows the accepted counts on the host already (the
runner decides them there), so keeping ``lens`` on the device would cost a
device-to-host read per forward; the device gets each forward's ``lens[slots]`` by an
asynchronous host-to-device copy instead (`to_device`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .config import ModelConfig

# Slice lengths on a GPU are rounded up to a multiple of this, so a forward's shapes
# change once per this many committed tokens, not every step (what CUDA graphs and
# the caching allocator want).  On the CPU every extra key costs attention work and
# the exact length lets decoding skip the mask, so the step there is 1.
GPU_LENGTH_STEP = 64


def to_device(host: Tensor, device: torch.device) -> Tensor:
    """``host`` (a CPU tensor) on ``device`` without making the host wait for the
    device: staged through pinned memory and copied asynchronously on a GPU, the
    tensor itself on the CPU."""
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


class KVCache:
    """Preallocated ``k``/``v`` of shape ``[layers, max_batch, kv_heads, capacity, head_dim]``.

    ``lens[slot]`` is the committed length of each slot, a host tensor (see above).
    The buffers start zeroed so masked-out (never written) entries are finite: SDPA
    multiplies them by an exact zero weight, and ``0 * NaN`` would poison the output.
    """

    def __init__(
        self,
        num_layers: int,
        max_batch: int,
        num_kv_heads: int,
        capacity: int,
        head_dim: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        shape = (num_layers, max_batch, num_kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.lens = torch.zeros(max_batch, dtype=torch.long)  # on the host, always
        self.length_step = 1 if self.k.device.type == "cpu" else GPU_LENGTH_STEP

    @classmethod
    def for_model(
        cls,
        config: ModelConfig,
        max_batch: int,
        capacity: int,
        device: torch.device | str,
        dtype: torch.dtype,
        num_layers: int | None = None,
    ) -> KVCache:
        """A cache sized for ``config`` (``num_layers`` overrides it, e.g. 1 for a draft head)."""
        return cls(
            num_layers if num_layers is not None else config.num_layers,
            max_batch,
            config.num_kv_heads,
            capacity,
            config.head_dim,
            device,
            dtype,
        )

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    @property
    def max_batch(self) -> int:
        return self.k.shape[1]

    @property
    def device(self) -> torch.device:
        return self.k.device

    def scratch_start(self, slots: Tensor, width: int) -> tuple[Tensor, int]:
        """Return ``lens[slots]`` (host) and the slice length: ``max(lens[slots]) + width``
        rounded up to ``length_step``, within the capacity.  ``slots`` is a host tensor.

        Raises ``ValueError`` if some slot has no room for a ``width``-entry scratch
        region.  Host work only: nothing is read back from the device.
        """
        starts = self.lens[slots]
        needed = starts + width
        max_len = int(needed.max())
        if max_len > self.capacity:
            bad = int(torch.argmax(needed))
            raise ValueError(
                f"KV cache overflow: slot {int(slots[bad])} needs {int(needed[bad])} "
                f"positions but capacity is {self.capacity}"
            )
        step = self.length_step
        return starts, min(self.capacity, -(-max_len // step) * step)

    def write(self, layer: int, slots: Tensor, positions: Tensor, k: Tensor, v: Tensor) -> None:
        """Store ``k``/``v`` ``[B, kv_heads, n, D]`` at cache indices ``positions`` ``[B, n]``
        (``slots`` and ``positions`` on the cache's device).

        Unchecked: callers size the write with `scratch_start` first.
        """
        rows = slots[:, None]
        # Advanced indices (rows, positions) separated by a slice put their [B, n] dims first.
        self.k[layer][rows, :, positions] = k.transpose(1, 2)
        self.v[layer][rows, :, positions] = v.transpose(1, 2)

    def window(self, first_slot: int, count: int, length: int) -> tuple[Tensor, Tensor]:
        """Views ``[layers, count, kv_heads, length, D]`` of the first ``length`` positions
        of slots ``first_slot .. first_slot+count-1``, all layers at once.

        Taken once per forward, so each layer reaches its K/V with one ``select`` instead
        of a multi-axis index (per-op overhead dominates batch-1 decoding on CPU).
        """
        rows = slice(first_slot, first_slot + count)
        return self.k[:, rows, :, :length], self.v[:, rows, :, :length]

    def read(self, layer: int, slots: Tensor, length: int) -> tuple[Tensor, Tensor]:
        """The first ``length`` positions of each slot: two ``[B, kv_heads, length, D]`` tensors
        (a copy; consecutive slots are read through `window` views instead)."""
        k = self.k[layer, :, :, :length].index_select(0, slots)
        v = self.v[layer, :, :, :length].index_select(0, slots)
        return k, v

    def commit(self, slots: Tensor, keep: Tensor, counts: Tensor) -> None:
        """Compact accepted scratch entries into the committed prefix and advance ``lens``.

        For each row ``b``, scratch offsets ``keep[b, :counts[b]]`` (relative to the old
        ``lens``, so ``0 .. s-1`` for an ``s``-entry scratch region) move, in order, to
        ``lens .. lens+counts-1`` across all layers at once.  Entries of ``keep`` past
        ``counts[b]`` are ignored (use any padding value).  The tensors are read on the
        host (hand host tensors, and nothing is read back from the device), then
        `commit_lists` does the work.
        """
        slots, keep, counts = slots.cpu(), keep.cpu(), counts.cpu()
        if keep.ndim != 2 or keep.shape[0] != slots.shape[0] or counts.shape != slots.shape:
            raise ValueError(
                f"commit: expected keep [B, a] and counts [B] for B={slots.shape[0]} slots, "
                f"got keep {tuple(keep.shape)} and counts {tuple(counts.shape)}"
            )
        self.commit_lists(slots.tolist(), keep.tolist(), counts.tolist())

    def commit_lists(self, slots: list[int], keep: list[list[int]], counts: list[int]) -> None:
        """`commit` on host lists (the engine's accepted paths are lists already).

        Walked as Python lists: a handful of entries per row, where a dozen tensor ops
        on tiny host tensors took ~45 µs per commit and the walk takes ~10 µs at B <= 4,
        about as long at B = 32 (AMX Xeon).  The entries that move go to the device as
        index lists."""
        new_lens = self._grown_lens(slots, counts)  # refused before anything moves
        lens = self.lens.tolist()
        rows, src, dst = [], [], []
        for slot, offsets, count in zip(slots, keep, counts, strict=True):
            start = lens[slot]
            kept = offsets[:count]
            if not 0 <= count <= len(offsets) or (kept and (min(kept) < 0 or max(kept) >= self.capacity - start)):
                raise ValueError(
                    f"commit: invalid keep/counts (counts must be in [0, {len(offsets)}], kept offsets "
                    f"in [0, capacity - lens) with capacity {self.capacity})"
                )
            # Entries already in place (plain decoding; a draft chain accepted in order) need
            # no copy: skipping them spares four index kernels over all layers per step.
            for j, k in enumerate(kept):
                if k != j:
                    rows.append(slot)
                    src.append(start + k)
                    dst.append(start + j)
        if rows:
            rows, src, dst = (to_device(torch.tensor(t), self.device) for t in (rows, src, dst))
            # Gathering copies first, so overlapping source/destination ranges are safe.
            self.k[:, rows, :, dst] = self.k[:, rows, :, src]
            self.v[:, rows, :, dst] = self.v[:, rows, :, src]
        self.lens.numpy()[slots] = new_lens

    def advance(self, slots: list[int], counts: list[int]) -> None:
        """Commit the first ``counts[b]`` scratch entries of each slot, already in place
        (the draft's catch-up writes its tokens where they stay): ``lens`` grows, nothing moves."""
        self.lens.numpy()[slots] = self._grown_lens(slots, counts)

    def _grown_lens(self, slots: list[int], counts: list[int]) -> np.ndarray:
        """The slots' lengths after committing ``counts`` more entries each, checked against
        the capacity.  Read (and written by the callers) through numpy's view of the host
        tensor: one tensor op here cost ~90 µs of a B = 1 step right after a forward
        (docs/results/2026-12-04_host_work_avx512.md)."""
        lens = self.lens.numpy()[slots]
        grown = lens + counts
        if min(counts, default=0) < 0 or grown.max(initial=0) > self.capacity:
            raise ValueError(f"commit: counts must be >= 0 and keep lens within capacity {self.capacity}, "
                             f"got counts {counts} at lens {lens.tolist()}")
        return grown

    def reset(self, slot: int) -> None:
        """Forget a slot's sequence; its stale K/V are masked until overwritten."""
        if not 0 <= slot < self.max_batch:
            raise ValueError(f"reset: slot {slot} out of range [0, {self.max_batch})")
        self.lens[slot] = 0
