"""The profile times forwards the way the pair's engines run them: with CUDA graphs on a
GPU (autotune/profiler.forward_timer → engine/timing.GraphedForwardTimer).  Checked on
the CPU through `EagerReplay`, which keeps a recorded graph's keys, buffers and
replay counts; the CUDA case is skipped without a GPU."""

import pytest
import torch

from autotune.models import ModelPair
from autotune.profiler import forward_timer
from sglang_cast.engine.cuda_graphs import GraphedForward
from sglang_cast.engine.timing import ForwardTimer, GraphedForwardTimer
from tools.tiny_models import CharTokenizer, random_pair


class ReplayPair(ModelPair):
    """A pair whose engines would run the fixed-shape graph path eagerly (CPU tests)."""

    @property
    def graph_backend(self) -> str | None:
        return "eager-replay"


def pair(graphs: bool) -> ModelPair:
    target, draft = random_pair("cpu", torch.float32)
    cls = ReplayPair if graphs else ModelPair
    return cls(target, draft, CharTokenizer(), target_id="tiny", draft_id="head", dtype="float32", chat_template=False)


def test_without_graphs_the_profile_times_the_eager_forward():
    timer = forward_timer(pair(graphs=False), "target", 2, 64)
    assert type(timer) is ForwardTimer and timer.cache.max_batch == 2


@pytest.mark.parametrize("role", ["target", "draft"])
def test_each_point_is_recorded_once_and_every_timed_call_replays_it(role):
    timer = forward_timer(pair(graphs=True), role, 2, 64)
    assert isinstance(timer, GraphedForwardTimer)
    assert timer.cache.max_batch == 3  # one more slot: the graphs' pad slot
    for b, n in [(1, 1), (1, 4), (2, 4), (1, 4)]:
        timer.time(b, 32, n, warmup=1, repeats=2)
    assert sorted(timer.graphs) == [(1, 1), (1, 4), (2, 4)]  # (1, 4) was not recorded again
    for (b, n), graphed in timer.graphs.items():
        key = graphed.keys[0]
        assert (key.rows, key.tokens, key.columns) == (b, n, n)
        assert key.feature_width == (0 if role == "target" else timer.features_width)
    assert timer.graphs[(1, 4)].stats.replays == 6 and timer.graphs[(2, 4)].stats.replays == 3
    assert all(g.stats.eager_calls == 0 for g in timer.graphs.values())
    assert timer.cache.lens.eq(0).all()  # nothing committed


def test_a_point_whose_capture_failed_is_timed_on_the_eager_forward():
    timer = forward_timer(pair(graphs=True), "target", 2, 64)
    eager_calls = []
    eager = timer.forward
    timer.forward = lambda *a: (eager_calls.append(a[0].shape), eager(*a))[1]

    def failing_step(inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    timer.step = failing_step
    timer.time(1, 16, 2, warmup=0, repeats=3)
    assert timer.graphs[(1, 2)].keys == [] and timer.graphs[(1, 2)].stats.failed == 1
    assert eager_calls == [torch.Size([1, 2])] * 3


def test_the_pad_slot_is_never_timed():
    timer = forward_timer(pair(graphs=True), "target", 2, 64)
    with pytest.raises(ValueError, match="pads graph rows"):
        timer.time(3, 16, 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_on_cuda_the_profile_replays_captured_graphs():
    target, draft = random_pair("cuda", torch.bfloat16)
    cuda_pair = ModelPair(target, draft, CharTokenizer(), target_id="tiny", draft_id="head", dtype="bfloat16", chat_template=False)
    assert cuda_pair.graph_backend == "cuda"
    timer = forward_timer(cuda_pair, "target", 2, 64)
    timing = timer.time(2, 32, 4, warmup=1, repeats=3)
    graphed: GraphedForward = timer.graphs[(2, 4)]
    assert graphed.stats.captured == 1 and graphed.stats.replays == 4 and timing.median_ms > 0
