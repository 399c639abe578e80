"""Every tensor-parallel rank builds the same tree, and reloads at the same iteration.

With ``--tp-size N`` SGLang runs one scheduler, hence one ``CastWorker``, per
GPU, and every draft, verify and draft-extend forward is a collective: if two
ranks chose different depths, widths or nodes in one iteration, their
collectives would no longer pair up (a hang) or their KV caches would diverge.

What the decisions read, and why it is the same on every rank:

* the batch (sizes, sequence lengths): SGLang's schedulers replicate it;
* the draft's candidate values: computed from logits that SGLang all-gathers
  across the TP group (vocabulary-parallel LM head), so every rank holds the
  same numbers; SGLang's own greedy verify relies on the same property on CUDA
  and broadcasts only on ROCm, where it does not hold
  (``srt/speculative/eagle_utils.py:644-672``);
* the policy's FIFOs and the profile's tables: fed only with the above.

What is rank-local, and therefore decided by rank 0 alone: the profile file.  Each
rank polling it would switch at whatever iteration its thread noticed the change.  So
only rank 0 watches the file; :class:`ProfileBroadcast` sends, once per decode
iteration (``CastWorker.activate_step_by_batch``, which SGLang calls on every rank,
``srt/speculative/eagle_worker_v2.py:1445``), one ``int64[2]`` tensor over SGLang's
TP group (reload sequence number, byte count), and when the sequence number moves,
the new file's bytes; every rank then applies that exact version before the
iteration's first decision.  Timers and live measurements never feed a decision.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

Broadcast = Callable[[torch.Tensor], None]  # in place, from the group's rank 0 (GroupCoordinator.broadcast)


class ProfileBroadcast:
    """Rank 0's accepted profile versions, applied on every rank at the same iteration.

    ``offer`` (rank 0's watcher thread) stages a validated file's bytes; ``step``
    (every rank, once per iteration, at the same point) broadcasts the header and,
    on a new version, the bytes, and calls ``apply(raw)`` on every rank."""

    def __init__(self, rank: int, broadcast: Broadcast, apply: Callable[[bytes], None],
                 device: torch.device | str = "cpu") -> None:
        self.rank = rank
        self.broadcast = broadcast
        self.apply = apply
        self.device = torch.device(device)
        self.applied = 0  # sequence number of the version in force (0: the startup profile)
        self._staged: tuple[int, bytes] | None = None
        self._lock = threading.Lock()

    def offer(self, raw: bytes) -> None:
        """Rank 0 only: a new validated version, to be applied at the next ``step``."""
        if self.rank != 0:
            raise RuntimeError("only TP rank 0 watches the profile file")
        with self._lock:
            latest = self._staged[0] if self._staged else self.applied
            self._staged = (latest + 1, raw)

    def step(self) -> bool:
        """Once per iteration on every rank; True when a new version was applied."""
        header = torch.tensor([self.applied, 0], dtype=torch.int64)  # [sequence number, bytes]
        staged = None
        if self.rank == 0:
            with self._lock:
                staged = self._staged
            if staged is not None:
                header = torch.tensor([staged[0], len(staged[1])], dtype=torch.int64)
        header = header.to(self.device)
        self.broadcast(header)
        sequence, size = (int(v) for v in header.cpu())
        if sequence == self.applied:
            return False
        payload = (torch.frombuffer(bytearray(staged[1]), dtype=torch.uint8) if self.rank == 0
                   else torch.empty(size, dtype=torch.uint8)).to(self.device)
        self.broadcast(payload)
        self.apply(payload.cpu().numpy().tobytes())
        self.applied = sequence
        if self.rank == 0:
            with self._lock:
                if self._staged is staged:
                    self._staged = None
        return True
