"""Marking what an engine keeps on its device, on a CPU: the caches, the draft's root
outputs and every tensor sent through a module's ``to_device`` become `DeviceData`, a
tensor subclass that spreads to every result computed from it.

Reading a `DeviceData` into Python (``int()``, ``.item()``, ``.tolist()``, ``bool()``,
``torch.equal``, boolean-mask indexing, ...) is what synchronises host and device on a
GPU, so each such read is logged in `Ledger.reads`; ``.cpu()`` is the deliberate
crossing (`Ledger.crossings`) and hands back plain host data.  The tests assert the
engine's hot path reads nothing else; `tools/host_work.py` counts the ops on it.
"""

from __future__ import annotations

import torch

from sglang_cast.engine import Engine, draft_expander
from sglang_cast.engine import runner as runner_module
from sglang_cast.models import attention, kv_cache

READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__, torch.Tensor.__bool__,
         torch.Tensor.__float__, torch.Tensor.__index__, torch.equal, torch.Tensor.nonzero, torch.nonzero,
         torch.Tensor.numpy, torch.Tensor.__array__}

# The modules that send host data to the device, each through its own ``to_device`` name.
SENDERS = (kv_cache, attention, runner_module, draft_expander)


class Ledger:
    """Host reads of device data and deliberate crossings since the last reset."""

    reads: list[str] = []
    crossings = 0

    @classmethod
    def reset(cls) -> None:
        cls.reads, cls.crossings = [], 0


def _is_mask_index(args) -> bool:
    index = args[1] if len(args) > 1 else None
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class DeviceData(torch.Tensor):
    """A tensor that stands for data on an accelerator (see the module docstring)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cpu:
            Ledger.crossings += 1
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs).clone()
        if func in READS or (func is torch.Tensor.__getitem__ and _is_mask_index(args)):
            Ledger.reads.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs)


def on_device(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.as_subclass(DeviceData)


def mark_engine(engine: Engine, mark=on_device) -> None:
    """What the engine keeps on its device, marked (``mark``: `on_device` or a subclass's)."""
    runner = engine.runner
    cache = runner.target_cache
    cache.k, cache.v = mark(cache.k), mark(cache.v)
    if runner.draft is not None:
        cache = runner.draft_cache
        cache.k, cache.v = mark(cache.k), mark(cache.v)
        runner.root_hidden, runner.root_logits = mark(runner.root_hidden), mark(runner.root_logits)
