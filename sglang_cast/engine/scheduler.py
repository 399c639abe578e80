"""Which requests run: a first-come queue of waiting requests, the running batch and
the cache slots they hold.  It moves requests between those; it runs no model."""

from __future__ import annotations

from .requests import Request


class Scheduler:
    def __init__(self, max_batch_size: int) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.free_slots = list(range(max_batch_size))
        self.running: list[Request] = []
        self.waiting: list[Request] = []

    def queue(self, request: Request) -> None:
        self.waiting.append(request)

    def admit_next(self) -> Request | None:
        """The oldest waiting request, given a free slot; ``None`` if none waits or
        every slot is taken.  The caller prefills it, then `run`s or `retire`s it."""
        if not (self.waiting and self.free_slots):
            return None
        request = self.waiting.pop(0)
        request.slot = self.free_slots.pop(0)
        return request

    def run(self, request: Request) -> None:
        self.running.append(request)

    def retire(self, request: Request) -> None:
        """Take a request that holds a slot out of the batch and free its slot (the
        caller resets the slot's caches)."""
        if request in self.running:
            self.running.remove(request)
        self.free_slots.append(request.slot)

    def drop_waiting(self, request: Request) -> bool:
        """Remove a request that never got a slot; False if it was not waiting."""
        if request not in self.waiting:
            return False
        self.waiting.remove(request)
        return True
