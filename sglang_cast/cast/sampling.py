"""Per-request sampling parameters and the target distribution they define.

Speculative sampling is lossless only with respect to *the distribution the
request asked for*, so temperature, top-k and top-p are applied to the target
logits before verification, exactly as a plain sampler would.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass

import torch


# Temperatures below this decode greedily, as SGLang's and vLLM's samplers do: dividing
# logits by a temperature near 0 overflows (1e-308 gives inf, then NaN probabilities).
GREEDY_BELOW_TEMPERATURE = 1e-6


class InvalidSamplingParam(ValueError):
    """A `SamplingParams` field out of its range; ``field`` names it, so a server
    can answer a 400 naming the request's own field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field


@dataclass(frozen=True)
class SamplingParams:
    """What one request asks for.  ``temperature`` 0 (or below
    ``GREEDY_BELOW_TEMPERATURE``) means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and 0.0 <= self.temperature <= 100.0):
            raise InvalidSamplingParam("temperature", f"must be in [0, 100], got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0.0 < self.top_p <= 1.0):
            raise InvalidSamplingParam("top_p", f"must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidSamplingParam("top_k", f"must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise InvalidSamplingParam("max_new_tokens", f"must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise InvalidSamplingParam("seed", f"must be an integer or null, got {self.seed!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidSamplingParam("stop", "must be a list of non-empty strings")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW_TEMPERATURE


@dataclass(frozen=True)
class RequestSampler:
    """A request's parameters and the seed of its draws: the token at output position
    ``k`` is drawn from the target's distribution there by the uniform
    ``position_uniform(seed, k)``.  Keyed by position rather than read from a stream, a
    seeded request samples the same tokens whatever tree each iteration verified (or
    none): how many draws an iteration makes no longer shifts the later ones."""

    params: SamplingParams
    seed: int

    @classmethod
    def create(cls, params: SamplingParams) -> RequestSampler:
        return cls(params, secrets.randbits(64) if params.seed is None else params.seed)

    def draw(self, probs: torch.Tensor, position: int) -> int:
        """The token at output ``position`` from ``probs`` ``[V]``."""
        return inverse_cdf(probs, position_uniform(self.seed, position))


def position_uniform(seed: int, position: int) -> float:
    """A uniform in (0, 1) fixed by ``(seed, position)``: 53 bits of a hash, so it is the
    same on every machine and independent between positions."""
    digest = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest()
    return ((int.from_bytes(digest, "little") >> 11) + 0.5) / (1 << 53)


def inverse_cdf(probs: torch.Tensor, u: float) -> int:
    """The token whose slice of the cumulative distribution of ``probs`` ``[V]`` holds
    ``u`` in (0, 1): the first index whose running sum passes ``u`` times the total.
    Scaling by the total keeps the answer inside the vocabulary when the sum rounds
    below 1, and a token of probability 0 adds nothing to the sum, so it is never drawn."""
    cdf = probs.double().cpu().cumsum(0)
    point = torch.tensor([u * float(cdf[-1])], dtype=torch.float64)
    return int(torch.searchsorted(cdf, point, right=True))


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a plain sampler would draw from (float64, on the CPU)."""
    logits = logits.double().cpu() / params.temperature
    if params.top_k and params.top_k < logits.numel():
        cutoff = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < cutoff, -math.inf)
    probs = torch.softmax(logits, dim=-1)
    return nucleus(probs, params.top_p) if params.top_p < 1.0 else probs


# `nucleus` looks at this many likeliest tokens first: a top-k of them costs a fraction of
# sorting the whole vocabulary (SmolLM2's 49,152 entries: 9.3 ms a row sorted on a 2-core
# AVX2 EPYC, the bulk of drawing one sampled token), and a peaked distribution reaches top_p
# inside them; when it does not, the whole vocabulary is sorted as before.
NUCLEUS_PREFIX = 256


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` ``[V]`` cut to the smallest set of likeliest tokens whose mass reaches
    ``top_p``, renormalised.  Tokens past a prefix of the likeliest ``k`` all have at least
    the prefix's mass before them, so when that mass reaches ``top_p`` none of them is kept
    and the prefix decides alone."""
    top, order = torch.topk(probs, min(NUCLEUS_PREFIX, probs.numel()))  # descending
    if float(top.sum()) < top_p:  # a flat row: the cut lies past the prefix
        top, order = torch.sort(probs, descending=True)
    before = top.cumsum(0) - top
    top[before >= top_p] = 0.0  # keep the smallest prefix reaching top_p
    kept = torch.zeros_like(probs).scatter_(0, order, top)
    return kept / kept.sum()


# `greedy_tokens` reads a CPU row in blocks of one of these sizes (the largest that
# divides the vocabulary), when the vocabulary has at least this many entries.
ARGMAX_BLOCKS = (1024, 512, 256)
BLOCKED_ARGMAX_MIN_VOCAB = 4096


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """``torch.argmax(logits, dim=-1)``: the greedy token of each row ``[..., V]``,
    the first index on ties (and a NaN's index, as argmax has it).

    On the CPU, torch's ``argmax`` is not vectorised while ``amax`` is: over the
    SmolLM2 vocabulary (49,152) an ``argmax`` takes ~60 µs per row, ``amax`` ~6 µs
    (AMX Xeon, 1 thread).  So a CPU row is read in blocks: the blocks' maxima, the
    first block holding the row's maximum, and the argmax inside that block alone,
    which is the row's first maximum: 0.024 ms for one row and 0.103 ms for 9 against
    0.068 and 0.657 (``tools/bench_kernels.py``, docs/results/kernels_amx_greedy_t1.json).
    On a GPU ``argmax`` is one kernel and the blocks would cost launches: torch's is
    used there, as for small vocabularies."""
    vocab = logits.shape[-1]
    block = next((b for b in ARGMAX_BLOCKS if vocab % b == 0), None)
    if logits.device.type != "cpu" or vocab < BLOCKED_ARGMAX_MIN_VOCAB or block is None:
        return torch.argmax(logits, dim=-1)
    blocks = logits.reshape(-1, vocab // block, block)  # [rows, blocks, block]
    first = blocks.amax(dim=2).argmax(dim=1, keepdim=True)  # [rows, 1]
    inner = blocks.gather(1, first.unsqueeze(-1).expand(-1, 1, block)).squeeze(1).argmax(dim=1)  # [rows]
    return (first.squeeze(1) * block + inner).view(logits.shape[:-1])
