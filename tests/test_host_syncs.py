"""No per-token host reads of device data in the engine's hot path.

The CPU has no device to wait for, so this test marks what would live on one: the
caches, the draft's root outputs and every tensor sent through
`models.kv_cache.to_device` become `DeviceData`, a tensor subclass that spreads to
every result computed from it.  Reading a `DeviceData` into Python (``int()``,
``.item()``, ``.tolist()``, ``bool()``, ``torch.equal``, boolean-mask indexing, ...)
is what synchronises host and device on a GPU; ``.cpu()`` is the deliberate crossing
and hands back plain host data (``.numpy()`` of device data is a read).  The draft
tree lives on the host, so an iteration may cross once per drafted layer (its
children, for that layer's ``keep``) and once to read the target's greedy tokens for
verification.
"""

import pytest
import torch

from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.engine import Engine, draft_expander
from sglang_cast.engine import runner as runner_module
from sglang_cast.models import attention, kv_cache

from test_device_paths import SETTINGS, CharTokenizer, random_pair

READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__, torch.Tensor.__bool__,
         torch.Tensor.__float__, torch.Tensor.__index__, torch.equal, torch.Tensor.nonzero, torch.nonzero,
         torch.Tensor.numpy, torch.Tensor.__array__,
}


class Ledger:
    reads: list[str] = []
    crossings = 0


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


# The modules that send host data to the device, each through its own ``to_device`` name.
SENDERS = (kv_cache, attention, runner_module, draft_expander)


def mark_engine(engine: Engine, mark=on_device) -> None:
    """What the engine keeps on its device, marked (``mark``: `on_device` or a subclass's)."""
    runner = engine.runner
    cache = runner.target_cache
    cache.k, cache.v = mark(cache.k), mark(cache.v)
    if runner.draft is not None:
        cache = runner.draft_cache
        cache.k, cache.v = mark(cache.k), mark(cache.v)
        runner.root_hidden, runner.root_logits = mark(runner.root_hidden), mark(runner.root_logits)


@pytest.fixture
def device_marked(monkeypatch):
    """Every host-to-device transfer of the engine hands back `DeviceData`."""
    marked = lambda host, device: on_device(host)  # noqa: E731
    for module in SENDERS:
        monkeypatch.setattr(module, "to_device", marked)
    Ledger.reads, Ledger.crossings = [], 0


@pytest.mark.parametrize("policy", ["vanilla", "eagle2", "cast", "goodput"])
@pytest.mark.parametrize("batch", [1, 3])
def test_an_iteration_reads_the_device_once_per_decision(device_marked, policy, batch):
    target, draft = random_pair("cpu", torch.float32)
    engine = Engine(target, CharTokenizer(), draft, make_policy(policy, SETTINGS), max_batch_size=batch,
                    context_length=96)
    mark_engine(engine)
    for prompt in ["hello world", "trees", "speculative decoding"][:batch]:
        engine.add_request(prompt, SamplingParams(max_new_tokens=40))
    engine.step()  # admission (one read of the first token per prefill) and a first iteration
    layers = SETTINGS.buckets[0].shape.max_depth
    for _ in range(4):
        Ledger.reads, Ledger.crossings = [], 0
        output = engine.runner.iterate(list(engine.running))
        assert Ledger.reads == [], f"host reads of device data: {Ledger.reads}"
        speculated = output.record.verified > 0 or policy != "vanilla"
        # the children of each drafted layer, the read-back of the outcome
        assert Ledger.crossings <= (layers + 1 if speculated else 1)
        assert Ledger.crossings >= 1
