"""No per-token host reads of device data in the engine's hot path: what an engine
keeps on its device is marked (`tools.device_marking`) and every host read of it is
logged.  The draft tree lives on the host, so an iteration may cross once per drafted
layer (its children, for that layer's ``keep``) and once to read the target's greedy
tokens for verification.
"""

import pytest
import torch

from sglang_cast.cast import SamplingParams, make_policy
from sglang_cast.engine import Engine
from support.random_pair import SETTINGS
from tools.device_marking import SENDERS, Ledger, mark_engine, on_device
from tools.tiny_models import CharTokenizer, random_pair


@pytest.fixture
def device_marked(monkeypatch):
    """Every host-to-device transfer of the engine hands back `DeviceData`."""
    marked = lambda host, device: on_device(host)  # noqa: E731
    for module in SENDERS:
        monkeypatch.setattr(module, "to_device", marked)
    Ledger.reset()


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
        Ledger.reset()
        output = engine.runner.iterate(list(engine.running))
        assert Ledger.reads == [], f"host reads of device data: {Ledger.reads}"
        speculated = output.record.verified > 0 or policy != "vanilla"
        # the children of each drafted layer, the read-back of the outcome
        assert Ledger.crossings <= (layers + 1 if speculated else 1)
        assert Ledger.crossings >= 1
