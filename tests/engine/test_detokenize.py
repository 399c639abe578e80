"""Incremental detokenisation (`engine.requests.IncrementalText`): the text of a
growing output equals decoding it whole, at every step, while each step decodes
only the new tokens and a few of context."""

import random

import pytest

from sglang_cast.cast import RequestSampler, SamplingParams
from sglang_cast.engine.requests import IncrementalText, Request
from sglang_cast.models.loader import resolve_model_dir


class SentencePieceLike:
    """Pieces with a '▁' word marker; the first piece of a decode loses its leading
    space, as SentencePiece decoders do."""

    def __init__(self) -> None:
        self.pieces = ["▁the", "▁cat", "s", "▁sat", ".", "▁on", "▁a", "▁mat", "!", "ing"]
        self.decoded_tokens = 0

    def decode(self, ids):
        self.decoded_tokens += len(ids)
        return "".join(self.pieces[i] for i in ids).replace("▁", " ").removeprefix(" ")


def grow(decode, ids, rng):
    """Feed ``ids`` in random chunks; yield (incremental text, whole decode) per step."""
    text, done = IncrementalText(decode), 0
    while done < len(ids):
        done = min(len(ids), done + rng.randint(1, 5))
        yield text.update(ids[:done]), ids[:done]


@pytest.mark.parametrize("seed", range(5))
def test_sentencepiece_like_text_equals_whole_decode_and_decodes_a_bounded_tail(seed):
    tokenizer, rng = SentencePieceLike(), random.Random(seed)
    ids = [rng.randrange(len(tokenizer.pieces)) for _ in range(300)]
    steps = 0
    for text, prefix in grow(tokenizer.decode, ids, rng):
        assert text == SentencePieceLike().decode(prefix)
        steps += 1
    # Each step decodes its new tokens twice-over at most plus 2 * CONTEXT: linear, not quadratic.
    assert tokenizer.decoded_tokens <= 2 * len(ids) + 2 * IncrementalText.CONTEXT * steps


@pytest.mark.parametrize("seed", range(3))
def test_byte_level_text_equals_whole_decode_with_split_characters(seed):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(None))  # converted here on a fresh machine
    sample = "Zürich 東京 naïve café — emoji 🎉🧪 and plain words, numbers 12345. <|im_end|> done"
    ids = tokenizer.encode(sample) * 3
    for text, prefix in grow(tokenizer.decode, ids, random.Random(seed)):
        assert text == tokenizer.decode(prefix)
    assert text == tokenizer.decode(ids)


def test_stop_string_spanning_two_appends_is_cut():
    tokenizer = SentencePieceLike()
    params = SamplingParams(max_new_tokens=50, stop=("sat on",))
    request = Request(0, [0], params, RequestSampler.create(params), frozenset())
    request.append([0, 1, 3], tokenizer.decode)  # "the cat sat"
    assert request.finish_reason is None
    request.append([5, 6], tokenizer.decode)  # " on a"
    assert request.finish_reason == "stop" and request.text == "the cat "
