"""cast.greedy_tokens: torch.argmax's answer, read in blocks on the CPU."""

import math

import pytest
import torch

from sglang_cast.cast import greedy_tokens
from sglang_cast.cast.sampling import ARGMAX_BLOCKS, BLOCKED_ARGMAX_MIN_VOCAB


@pytest.mark.parametrize("vocab", [BLOCKED_ARGMAX_MIN_VOCAB, 8192 + 256, 49152, 32001, 48])
def test_greedy_tokens_is_argmax_with_ties_nans_and_odd_vocabularies(vocab):
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(3, 5, vocab, generator=gen)
    logits[0, 0, [7, vocab - 3]] = 50.0  # a tie across blocks: the first index wins
    logits[0, 1, [vocab - 9, vocab - 2]] = 50.0  # a tie inside the last block
    logits[1, 2] = -math.inf  # every entry the maximum
    logits[1, 3, vocab // 2] = math.nan  # argmax answers the NaN's index
    logits[2, 4, -1] = 60.0  # the maximum in the very last entry
    assert torch.equal(greedy_tokens(logits), torch.argmax(logits, dim=-1))
    strided = logits.transpose(0, 1)  # not contiguous: read as it is
    assert torch.equal(greedy_tokens(strided), torch.argmax(strided, dim=-1))
    assert greedy_tokens(logits).dtype == torch.long


def test_the_blocked_path_runs_for_the_vocabularies_it_is_meant_for(monkeypatch):
    """The cases above would pass if every vocabulary fell back to torch.argmax: count the
    calls that see a whole vocabulary row."""
    whole_rows = []
    real_argmax = torch.argmax

    def counting(tensor, *args, **kwargs):
        whole_rows.append(tensor.shape[-1])
        return real_argmax(tensor, *args, **kwargs)

    monkeypatch.setattr(torch, "argmax", counting)
    greedy_tokens(torch.randn(2, 49152))
    assert 49152 % ARGMAX_BLOCKS[0] == 0 and whole_rows == []
    greedy_tokens(torch.randn(2, 32001))  # no block divides it
    greedy_tokens(torch.randn(2, 48))  # too small to pay
    assert whole_rows == [32001, 48]
