"""``analytic``: roofline cost tables for GPUs nobody here can measure.

For a forward of ``B`` sequences with context ``c`` and ``n`` new tokens each,

    f(B, c, n) = max(bytes(B, c, n) / BW, flops(B, c, n) / FLOPS)        [ms]

    bytes = s · (W + B·c·KV + B·n·KV + B·n·V_out)
    flops = 2·B·n·W + 4·B·n·(c + n)·A

with ``s`` bytes per element (BF16: 2), ``W`` the weights a forward reads (every
layer's projections and MLP, plus the LM head; the embedding lookup reads only
``B·n`` rows), ``KV = layers · 2 · kv_heads · head_dim`` cache elements per token
(the whole context is read, the ``n`` new entries written), ``V_out`` the logits
width written per token, and ``A = layers · heads · head_dim`` (QKᵀ and AV).
``BW`` and ``FLOPS`` are the card's published peak memory bandwidth and dense
BF16 tensor rate.  The EAGLE draft is one decoder layer plus its ``fc`` and LM
head on the same formula.

What it leaves out, and why the profile says ``source: analytic``: kernel launch
and framework overhead (for a model as small as SmolLM2-135M they dominate real
batch-1 latency on these cards), achievable fractions of peak, and attention
kernel efficiency.  It is right about the *shape* CAST cares about — flat cost in
``n`` until ``B·n`` reaches the ridge point, then linear — and should be replaced by
``cast-autotune profile`` on the real card.

Thresholds: C1 = C2 = C3 = 1, break-even with plain decoding (a node must bring
at least one expected accepted token per decode-step of extra cost).  By
Theorem 4.1 breadth then keeps the top K candidates with ``v(K) ≥ λ`` (``λ`` the
normalised marginal cost per node).  A forward is memory-bound until ``B·n``
reaches ``s·FLOPS / (2·BW)`` tokens (H100 ≈ 295, RTX 4090 ≈ 164, A800 ≈ 153,
H20 ≈ 37); below that ``λ ≈ 0`` and CAST keeps EAGLE-2's full top-K, so at batch 1
the tree is bounded by the shape caps (the paper's A800 settings).  Past the ridge
``λ = 2·BW / (s·FLOPS)`` per token (H20: 0.027, H100: 0.0034), so only nodes whose
value is below that are dropped — and at large batch, where every extra token is
compute-bound, CAST prunes in proportion.

Tensor parallelism (``--tp-size N``, SGLang's layout): each GPU holds ``1/N`` of
every projection, of the KV heads and of the vocabulary (``srt/models/llama.py``:
column-/row-parallel projections, ``VocabParallelEmbedding`` and ``ParallelLMHead``
at lines 432 and 573), so a rank's bytes and flops are the ones above over ``N``,
plus what the GPUs exchange, carried by the interconnect after the compute
(assumed not overlapped with it: each all-reduce of a Llama layer sits between
a matmul and the next one that needs its result):

    comm = s · B·n · (2(N-1)/N · R + (N-1)/N · V_out) / IB

``R = (2·layers + 1)·h`` elements are all-reduced per token: the attention output
and the MLP output of every layer (``RowParallelLinear`` ``o_proj`` and
``down_proj``, llama.py:106-112 and 216-221, reduced in ``srt/layers/linear.py:1824``)
and the embedding lookup (``vocab_parallel_embedding.py:533``); a ring all-reduce
sends ``2(N-1)/N`` of the data per GPU, an all-gather of the logits ``(N-1)/N``.
``IB`` is the card's published per-direction GPU-to-GPU bandwidth (NVLink, or PCIe
where the card has none).  Each collective's latency, the part that dominates at
batch 1, is not charged, like kernel launch overhead.  A KV head count below
``N`` is replicated (llama.py:186-193): its cache bytes are not divided then.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from sglang_cast.cast import BucketSettings, CostModel, CostTable, PolicySettings, Thresholds, TreeShape
from sglang_cast.engine.build import default_draft_path
from sglang_cast.models.loader import EMBEDDED_NAME, model_config_json, read_json
from sglang_cast.profile import Profile
from sglang_cast.sglang_plugin.memory_plan import ModelShape, tp_size_problem

from .errors import AutotuneError
from .store import package_version

BYTES_PER_ELEMENT = 2  # BF16 weights, cache and logits


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bandwidth_tb_s: float  # peak, TB/s
    dense_bf16_tflops: float  # peak dense tensor-core BF16 (no sparsity)
    interconnect_gb_s: float  # peak GPU-to-GPU bandwidth per direction (what tensor-parallel collectives use)
    source: str


GPUS: dict[str, GpuSpec] = {
    "h100": GpuSpec("NVIDIA H100 SXM5 80GB", 3.35, 989.4, 450.0,
                    "NVIDIA H100 Tensor Core GPU datasheet (SXM5: HBM3 3.35 TB/s; BF16 1,979 TFLOPS with sparsity; "
                    "NVLink 900 GB/s, both directions)"),
    "a800": GpuSpec("NVIDIA A800 SXM4 80GB", 2.039, 312.0, 200.0,
                    "NVIDIA A800 datasheet (SXM4 80GB: HBM2e 2,039 GB/s; BF16 312 TFLOPS dense, as A100; NVLink "
                    "400 GB/s, both directions)"),
    "h20": GpuSpec("NVIDIA H20 96GB", 4.0, 148.0, 450.0,
                   "NVIDIA H20 product brief (HBM3 4.0 TB/s; BF16 148 TFLOPS dense; NVLink 900 GB/s, both "
                   "directions)"),
    "rtx4090": GpuSpec("NVIDIA GeForce RTX 4090", 1.008, 165.2, 32.0,
                       "NVIDIA Ada Lovelace architecture whitepaper (GDDR6X 1,008 GB/s; BF16 tensor with FP32 "
                       "accumulate 165.2 TFLOPS dense); no NVLink: PCIe 4.0 x16, 32 GB/s per direction"),
}
# GPUs only the SGLang plugin ships profiles for (the native server picks among ``GPUS``).
PLUGIN_GPUS: dict[str, GpuSpec] = {
    "h200": GpuSpec("NVIDIA H200 SXM 141GB", 4.8, 989.4, 450.0,
                    "NVIDIA H200 Tensor Core GPU datasheet (SXM: HBM3e 4.8 TB/s; BF16 1,979 TFLOPS with sparsity; "
                    "NVLink 900 GB/s, both directions)"),
}
ANALYTIC_GPUS: dict[str, GpuSpec] = {**GPUS, **PLUGIN_GPUS}  # every label `analytic --gpu` accepts

# Paper settings (docs/design/cast.md §7, A800): batch 1 — depth 13, top-k 12, 72 tokens;
# batch 8 — depth 9, top-k 12, 72 tokens.  The last bucket also covers larger batches.
DEFAULT_BUCKETS = (
    BucketSettings(1, TreeShape(top_k=12, max_depth=13, num_verify_tokens=72), Thresholds(1.0, 1.0, 1.0)),
    BucketSettings(8, TreeShape(top_k=12, max_depth=9, num_verify_tokens=72), Thresholds(1.0, 1.0, 1.0)),
)


@dataclass(frozen=True)
class ForwardShape:
    """What one forward of a model reads and computes, per the formula above."""

    weights: int  # elements read once per forward
    kv_per_token: int  # cache elements per context token (all layers, K and V)
    attention_width: int  # layers · heads · head_dim
    logits_width: int  # logits written per new token
    allreduce_width: int = 0  # R: elements all-reduced per token under tensor parallelism
    kv_heads: int = 1  # KV heads: fewer than the TP size are replicated, not divided

    def ms(self, gpu: GpuSpec, batch: int, context: int, n: int, tp_size: int = 1) -> float:
        """One forward on one of ``tp_size`` tensor-parallel GPUs (module docstring)."""
        tokens = batch * n
        kv_share = max(1, self.kv_heads // tp_size) / self.kv_heads
        moved = BYTES_PER_ELEMENT * ((self.weights + tokens * self.logits_width) / tp_size
                                     + (batch * context + tokens) * self.kv_per_token * kv_share)
        flops = (2 * tokens * self.weights + 4 * tokens * (context + n) * self.attention_width) / tp_size
        compute = max(moved / (gpu.memory_bandwidth_tb_s * 1e12), flops / (gpu.dense_bf16_tflops * 1e12))
        return 1000.0 * (compute + self.exchange_s(gpu, tokens, tp_size))

    def exchange_s(self, gpu: GpuSpec, tokens: int, tp_size: int) -> float:
        """Seconds the ``tp_size`` GPUs spend exchanging one forward's activations:
        ring all-reduces of ``R`` per token and the all-gather of the logits."""
        if tp_size == 1:
            return 0.0
        share = (tp_size - 1) / tp_size
        sent = BYTES_PER_ELEMENT * tokens * (2 * share * self.allreduce_width + share * self.logits_width)
        return sent / (gpu.interconnect_gb_s * 1e9)


def _layer_weights(config: ModelShape, qkv_in: int) -> int:
    h, d = config.hidden, config.head_dim
    attention = qkv_in * (config.heads + 2 * config.kv_heads) * d + config.heads * d * h
    return attention + 3 * h * config.intermediate


def target_shape(config: ModelShape) -> ForwardShape:
    h = config.hidden
    return ForwardShape(weights=config.layers * _layer_weights(config, h) + config.vocab * h,
                        kv_per_token=config.layers * 2 * config.kv_heads * config.head_dim,
                        attention_width=config.layers * config.heads * config.head_dim,
                        logits_width=config.vocab, allreduce_width=(2 * config.layers + 1) * h,
                        kv_heads=config.kv_heads)


def draft_shape(config: ModelShape, layout: str, draft_vocab: int) -> ForwardShape:
    """EAGLE-1/2: fc(2h→h) + one layer + the target's LM head.  EAGLE-3: fc(3h→h),
    q/k/v read 2h, LM head over the reduced draft vocab."""
    h = config.hidden
    fc_in, qkv_in = (3 * h, 2 * h) if layout == "eagle3" else (2 * h, h)
    return ForwardShape(weights=fc_in * h + _layer_weights(config, qkv_in) + draft_vocab * h,
                        kv_per_token=2 * config.kv_heads * config.head_dim,
                        attention_width=config.heads * config.head_dim, logits_width=draft_vocab,
                        allreduce_width=3 * h, kv_heads=config.kv_heads)


@dataclass(frozen=True)
class AnalyticGrid:
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    ctx_bucket: int = 512
    ctx_buckets: int = 8
    max_n: int = 80  # target: the paper's largest budget, 72 tokens, fits with room
    draft_max_n: int = 32


def _table(shape: ForwardShape, gpu: GpuSpec, grid: AnalyticGrid, max_n: int, tp_size: int) -> CostTable:
    ms = [[[shape.ms(gpu, b, (m + 1) * grid.ctx_bucket, n, tp_size) for n in range(1, max_n + 1)]
           for m in range(grid.ctx_buckets)] for b in grid.batch_sizes]
    return CostTable(grid.ctx_bucket, grid.ctx_buckets, grid.batch_sizes, torch.tensor(ms, dtype=torch.float64))


def _draft_description(model_path: str | None, draft_path: str | None, config: ModelShape) -> tuple[str, str, int]:
    """``(draft id, layout, draft vocab)`` from the head's config.json, or the
    EAGLE-1/2 assumption when no head exists yet."""
    path = Path(draft_path).expanduser() if draft_path else default_draft_path(model_path)
    if path is None:
        return "assumed: EAGLE-1/2 head of the target's layer shape (no head shipped yet)", "eagle", config.vocab
    try:
        cfg = read_json(path / "config.json")
    except FileNotFoundError as err:
        raise AutotuneError(f"--draft-path: {err}") from None
    eagle3 = "LlamaForCausalLMEagle3" in (cfg.get("architectures") or [])
    return str(path.resolve()), "eagle3" if eagle3 else "eagle", int(cfg.get("draft_vocab_size") or config.vocab)


def analytic_profile(label: str, model_path: str | None = None, draft_path: str | None = None,
                     grid: AnalyticGrid = AnalyticGrid(), *, gpu: GpuSpec | None = None, tp_size: int = 1) -> Profile:
    """``gpu`` defaults to ``ANALYTIC_GPUS[label]``; ``tp_size`` > 1 estimates one GPU
    of a tensor-parallel group and records the layout where the SGLang plugin reads
    it (``provenance.sglang.parallel``: a profile serves only the layout it describes)."""
    if gpu is None:
        if label not in ANALYTIC_GPUS:
            raise AutotuneError(f"--gpu/--label: analytic profiles exist for {', '.join(sorted(ANALYTIC_GPUS))}, "
                                f"got {label!r}")
        gpu = ANALYTIC_GPUS[label]
    try:
        # The sizes alone: the roofline does not depend on RoPE scaling or other details the native engine checks.
        config = ModelShape.from_config(model_config_json(model_path))
    except (FileNotFoundError, ValueError) as err:
        raise AutotuneError(f"--model-path: {err}") from None
    unshardable = tp_size_problem(config.heads, config.kv_heads, tp_size)
    if unshardable:
        raise AutotuneError(f"--tp-size: {unshardable} (SGLang shards attention by heads); use a --tp-size that "
                            f"divides {config.heads}")
    draft_id, layout, draft_vocab = _draft_description(model_path, draft_path, config)
    target, draft = target_shape(config), draft_shape(config, layout, draft_vocab)
    costs = CostModel(target=_table(target, gpu, grid, grid.max_n, tp_size),
                      draft=_table(draft, gpu, grid, grid.draft_max_n, tp_size))
    ridge = BYTES_PER_ELEMENT * gpu.dense_bf16_tflops / (2 * gpu.memory_bandwidth_tb_s)
    target_id = f"embedded:{EMBEDDED_NAME}" if model_path is None else str(Path(model_path).expanduser().resolve())
    provenance = {
        "tool": "cast-autotune analytic",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sglang_cast": package_version(),
        "formula": ("f(B,c,n) = max(bytes/BW, flops/FLOPS); bytes = s*(W + B*c*KV + B*n*KV + B*n*V_out); "
                    "flops = 2*B*n*W + 4*B*n*(c+n)*A  (see docs/autotune.md)"
                    + ("; per GPU of --tp-size N: W, V_out, A and the KV heads over N, plus "
                       "s*B*n*(2(N-1)/N*R + (N-1)/N*V_out)/IB exchanged" if tp_size > 1 else "")),
        "gpu": asdict(gpu),
        "bytes_per_element": BYTES_PER_ELEMENT,
        "target": {"weights_W": target.weights, "kv_elements_per_token": target.kv_per_token,
                   "attention_width_A": target.attention_width, "logits_width": target.logits_width,
                   "allreduce_width_R": target.allreduce_width},
        "draft": {"layout": layout, "weights_W": draft.weights, "kv_elements_per_token": draft.kv_per_token,
                  "attention_width_A": draft.attention_width, "logits_width": draft.logits_width,
                  "allreduce_width_R": draft.allreduce_width},
        "grid": asdict(grid),
        "ignored": "kernel launch / framework overhead, achievable fraction of peak, attention kernel efficiency"
                   + (", the latency of each tensor-parallel collective" if tp_size > 1 else ""),
        "thresholds": ("C1=C2=C3=1: break-even with plain decoding; by Theorem 4.1 breadth keeps the top K with "
                       "v(K) >= lambda (normalised marginal cost per node); lambda ~ 0 while B*n is below the ridge "
                       f"s*FLOPS/(2*BW) = {ridge:.0f} tokens, so batch 1 keeps EAGLE-2's full top-K; shapes are the "
                       "paper's A800 settings (batch 1: top-k 12, depth 13, 72 tokens; batch 8: 12, 9, 72)"),
    }
    if tp_size > 1:
        provenance["sglang"] = {"parallel": {"tp_size": tp_size, "pp_size": 1}}
    return Profile(label=label, device=gpu.name, source="analytic",
                   settings=PolicySettings(buckets=DEFAULT_BUCKETS, costs=costs),
                   model={"target": target_id, "draft": draft_id, "dtype": "bfloat16"}, provenance=provenance)
