"""Server building blocks without HTTP: stable streaming text, the tree-shape
override, the throughput window and the KV room check of profile reloads."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_cast.cast import CostModel, PolicySettings, TreeShape
from sglang_cast.server.build_thread import run_on_passing_thread
from sglang_cast.server.config import ShapeOverride
from sglang_cast.server.metrics import Throughput
from sglang_cast.server.text_stream import TextStream, held_back, stable_text


@pytest.mark.parametrize("text,stop,finished,expected", [
    ("hello wor", ("world",), False, "hello "),  # "wor" may still become the stop string
    ("hello wor", ("world",), True, "hello wor"),
    ("hello w", ("xw",), False, "hello w"),  # "w" ends a stop string but cannot start one
    ("abc\ufffd", (), False, "abc"),  # an incomplete UTF-8 sequence
    ("abc\ufffd\ufffd", (), True, "abc\ufffd\ufffd"),
    ("abab", ("abc",), False, "ab"),
])
def test_stable_text_holds_back_what_may_still_change(text, stop, finished, expected):
    assert stable_text(text, stop, finished) == expected


@given(st.text("ab\u00e9", max_size=12), st.text("ab\u00e9", min_size=1, max_size=8))
def test_held_back_is_the_longest_proper_prefix_of_the_stop_string_the_text_ends_with(text, stop):
    longest = max((k for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0)
    assert held_back(text, stop) == longest


def test_text_stream_deltas_add_up_to_the_final_text():
    stream = TextStream(("END",))
    decodes = ["The", "The E", "The EN", "The ENd", "The ENd caf\ufffd", "The ENd café", "The ENd café!"]
    deltas = [stream.advance(text, finished=False) for text in decodes]
    deltas.append(stream.advance("The ENd café!", finished=True))
    assert deltas == ["The", " ", "", "ENd", " caf", "é", "!", ""]
    assert "".join(deltas) == "The ENd café!"


def test_text_stream_waits_when_a_decode_rewrites_sent_text():
    stream = TextStream(())
    assert stream.advance("ab", False) == "ab"
    assert stream.advance("xb c", False) == ""  # inconsistent: send nothing
    assert stream.advance("ab cd", False) == " cd"


def test_shape_override_replaces_only_given_knobs_in_every_bucket():
    settings = PolicySettings.single(CostModel.linear(1.0, 1.0), shape=TreeShape(top_k=8, max_depth=5,
                                                                                  num_verify_tokens=40))
    assert ShapeOverride().apply(settings) is settings
    shape = ShapeOverride(top_k=2, num_verify_tokens=6).apply(settings).buckets[0].shape
    assert shape == TreeShape(top_k=2, max_depth=5, num_verify_tokens=6)
    with pytest.raises(ValueError, match="num_verify_tokens"):
        ShapeOverride(num_verify_tokens=1).apply(settings)


def test_tree_room_matches_the_engine_reservation():
    from support.server import tiny_engine

    engine = tiny_engine("cast")
    assert engine.policy.settings.kv_room == engine.tree_room


def test_throughput_is_a_sliding_window():
    meter = Throughput(window_seconds=10.0)
    meter.add(50, now=100.0)
    meter.add(30, now=105.0)
    assert meter.rate(now=106.0) == 8.0
    assert meter.rate(now=112.0) == 3.0
    assert meter.rate(now=200.0) == 0.0


def test_a_passing_thread_returns_the_build_and_has_ended():
    import threading
    import time

    ran_on = []

    def build():
        ran_on.append(threading.current_thread())
        time.sleep(0.05)  # still running unless the caller waits for it
        return 7

    assert run_on_passing_thread(build) == 7
    assert ran_on[0] is not threading.current_thread() and not ran_on[0].is_alive()


@pytest.mark.parametrize("error", [ValueError("model_path: no such file"), SystemExit(2)])
def test_a_passing_thread_hands_what_the_build_raised_to_the_caller(error):
    def build():
        raise error

    with pytest.raises(type(error)) as raised:
        run_on_passing_thread(build)
    assert raised.value is error
