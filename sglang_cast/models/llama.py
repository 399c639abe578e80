"""Llama-family decoder (Llama, SmolLM2, Qwen2) running on the slot KV cache.

Module and parameter names mirror Hugging Face's ``LlamaModel`` (minus the ``model.``
prefix), so checkpoints load by a trivial key mapping (`loader.hf_to_internal`) and the
numerics can be checked against ``transformers`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import AttentionBatch, causal_tree_mask
from .config import ModelConfig
from .kv_cache import KVCache
from .weights import DenseFromRows, PackedLinear, WeightFormat



class LayerStack(Protocol):
    """What `LlamaModel.forward` calls instead of the eager `run_layers` when a model
    carries one: `compiled.CompiledLayers` or `cpu_layer.FusedLayers` (which build on this
    module, so this module names only the call it needs)."""

    def run_layers(self, model: LlamaModel, h: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch,
                   capture: tuple[int, ...]) -> tuple[Tensor, dict[int, Tensor]]: ...


@dataclass
class ModelOutput:
    """Final-norm hidden states ``[B, n, hidden]`` plus requested residual-stream features."""

    hidden: Tensor
    captured: list[Tensor] = field(default_factory=list)

    def draft_features(self) -> Tensor:
        """What a draft head reads ``[B, n, F]``: the captured layers side by side
        (EAGLE-3), else the final hidden states (EAGLE-1/2)."""
        return torch.cat(self.captured, dim=-1) if self.captured else self.hidden


def eagle3_feature_layers(num_layers: int) -> tuple[int, int, int]:
    """Low/mid/high feature layers for EAGLE-3: ``(2, num_layers // 2, num_layers - 3)``.

    Convention (SGLang ``set_eagle3_layers_to_capture`` and the EAGLE-3 training code):
    capturing layer ``i`` means taking the residual stream *entering* decoder layer
    ``i``, i.e. the output of layer ``i - 1`` (Hugging Face ``output_hidden_states[i]``).
    `LlamaModel.forward` uses the same convention, so these ids reproduce the features
    the public EAGLE-3 checkpoints were trained on.
    """
    if num_layers < 4:
        raise ValueError(f"EAGLE-3 needs at least 4 target layers, got num_layers={num_layers}")
    return (2, num_layers // 2, num_layers - 3)


class RMSNorm(nn.Module):
    """RMSNorm computed in float32, as Hugging Face does, so low-precision runs match it."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        # A 0-d CPU tensor, created explicitly on the CPU: models are built on the meta
        # device, and a buffer would follow them there.  Only the CPU path uses it.
        self._eps = torch.tensor(eps, dtype=torch.float32, device="cpu")

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32:
            normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
            return self.weight * normed.to(x.dtype)
        if x.is_cpu:  # the batch-1 decode hot path
            # x·w / sqrt(|x|²/D + eps) in five small kernels; on CPU ``F.rms_norm`` is a
            # composite of about eight (with a dtype copy), ~8 µs slower per call.
            norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
            denominator = torch.addcmul(self._eps, norm, norm, value=1 / x.shape[-1]).sqrt_()
            return torch.mul(x, self.weight).div_(denominator)
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)  # one fused kernel


def rope_cos_sin(
    positions: Tensor, config: ModelConfig, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """``cos``/``sin`` of shape ``[B, 1, n, head_dim]`` for per-token positions ``[B, n]``.

    Positions are per token (not per cache index) so tree tokens at equal depth share
    a rotation, exactly as if each root-to-leaf path were a separate sequence.

    ``sin`` comes sign-folded, ``[-sin, sin]`` over the two halves, so `apply_rope` needs
    no negation per layer (a batch-1 decode step is dominated by per-op overhead).
    """
    head_dim = config.head_dim
    exponent = torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim
    inv_freq = 1.0 / (config.rope_theta**exponent)
    angles = positions.float()[..., None] * inv_freq  # [B, n, D/2]
    angles = torch.cat((angles, angles), dim=-1)[:, None]
    sin = angles.sin()
    sin[..., : head_dim // 2].neg_()
    return angles.cos().to(dtype), sin.to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``[..., D]`` in the half-split (Hugging Face) layout.

    ``sin`` is sign-folded (see `rope_cos_sin`), so Hugging Face's
    ``x * cos + cat(-x2, x1) * sin`` is ``x * cos + roll(x, D/2) * sin_folded``:
    three kernels instead of seven.
    """
    return torch.addcmul(x * cos, torch.roll(x, x.shape[-1] // 2, -1), sin)


def linear(layer: nn.Linear | PackedLinear | DenseFromRows, x: Tensor) -> Tensor:
    """``layer(x)`` without ``nn.Module.__call__``, whose hook bookkeeping (~4 µs a call
    here) adds up to milliseconds per batch-1 decode step over all layers' projections.

    The one dispatch point for weight formats (`weights.py`): a plain ``nn.Linear`` is
    the fp32 reference path, anything else is a `PackedLinear` (or a `DenseFromRows`
    around one).
    """
    if type(layer) is nn.Linear:
        return F.linear(x, layer.weight, layer.bias)
    return layer.forward(x)


class Attention(nn.Module):
    """Grouped-query self-attention whose K/V live in slot ``layer_idx`` of a `KVCache`.

    ``in_features`` defaults to ``hidden_size``; EAGLE-3 widens it to ``2 * hidden_size``.
    """

    def __init__(self, config: ModelConfig, layer_idx: int, in_features: int | None = None):
        super().__init__()
        width = in_features or config.hidden_size
        q_out = config.num_heads * config.head_dim
        kv_out = config.num_kv_heads * config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(width, q_out, bias=bias)
        self.k_proj = nn.Linear(width, kv_out, bias=bias)
        self.v_proj = nn.Linear(width, kv_out, bias=bias)
        self.o_proj = nn.Linear(q_out, config.hidden_size, bias=False)
        # q, k and v as one linear [q_out + 2·kv_out], set by `stack` (packed formats only).
        self.qkv_proj: nn.Module | None = None
        self.layer_idx = layer_idx
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch) -> Tensor:
        """``x`` is ``[B, n, width]`` or flattened ``[B·n, width]``; the output has its shape."""
        q, k, v = self.project(x, cos, sin)
        return self.output(batch.attend(self.layer_idx, q, k, v), x.shape)

    def project(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Rotated ``q`` ``[B, H, n, D]`` and ``k``, ``v`` ``[B, kv_heads, n, D]`` of ``x``:
        the attention's input side, which touches no cache (so a compiled graph can hold it,
        `compiled.py`).  ``B`` and ``n`` are read off ``cos`` ``[B, 1, n, D]``.

        q and k sit side by side before RoPE so one rotation (three kernels) covers both.
        """
        b, n = cos.shape[0], cos.shape[2]
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        if self.qkv_proj is None:  # dense: three GEMVs (one larger one was slower, docs/native_engine.md)
            qk = torch.cat((linear(self.q_proj, x), linear(self.k_proj, x)), dim=-1)
            v = linear(self.v_proj, x)
        else:  # packed: one kernel call over the stacked weights
            qk, v = linear(self.qkv_proj, x).split(((heads + kv_heads) * dim, kv_heads * dim), dim=-1)
        qk = apply_rope(qk.view(b, n, heads + kv_heads, dim).transpose(1, 2), cos, sin)
        return qk[:, :heads], qk[:, heads:], v.view(b, n, kv_heads, dim).transpose(1, 2)

    STACKED = "qkv_proj"

    def stacked_parts(self) -> tuple[str, ...]:
        """The linears `stack` replaces, in the stacked linear's output order."""
        return ("q_proj", "k_proj", "v_proj")

    def stack(self, qkv: nn.Module) -> None:
        """Project with ``qkv``, the q, k and v weights stacked along outputs
        (`weights.StacksLinears`: what a packed format does), instead of the three."""
        self.qkv_proj = qkv
        self.q_proj = self.k_proj = self.v_proj = None

    def output(self, attended: Tensor, shape: torch.Size) -> Tensor:
        """``o_proj`` of the attention output ``[B, H, n, D]``, shaped like the input ``shape``."""
        flat = attended.transpose(1, 2).reshape(*shape[:-1], self.num_heads * self.head_dim)
        return linear(self.o_proj, flat)


class MLP(nn.Module):
    """SwiGLU feed-forward block."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        # gate and up as one linear [2·intermediate], set by `stack` (packed formats only).
        self.gate_up_proj: nn.Module | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.gate_up_proj is None:  # dense: two GEMVs, as `Attention.project`
            gate = F.silu(linear(self.gate_proj, x), inplace=True)
            return linear(self.down_proj, gate.mul_(linear(self.up_proj, x)))
        gate, up = linear(self.gate_up_proj, x).chunk(2, dim=-1)
        return linear(self.down_proj, F.silu(gate).mul_(up))

    STACKED = "gate_up_proj"

    def stacked_parts(self) -> tuple[str, ...]:
        """The linears `stack` replaces, in the stacked linear's output order."""
        return ("gate_proj", "up_proj")

    def stack(self, gate_up: nn.Module) -> None:
        """Run ``gate_up``, the gate and up weights stacked along outputs
        (`weights.StacksLinears`), instead of the two."""
        self.gate_up_proj = gate_up
        self.gate_proj = self.up_proj = None


class DecoderLayer(nn.Module):
    """Pre-norm transformer block.

    ``input_norm=False`` drops ``input_layernorm`` (an identity, with no weight), which is
    how the public EAGLE-1/2 draft checkpoints lay out their single layer.
    """

    def __init__(self, config: ModelConfig, layer_idx: int, input_norm: bool = True) -> None:
        super().__init__()
        self.input_layernorm: nn.Module = (
            RMSNorm(config.hidden_size, config.rms_norm_eps) if input_norm else nn.Identity()
        )
        self.self_attn = Attention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch) -> Tensor:
        """``x`` is ``[B, n, hidden]`` or ``[B·n, hidden]``; it is not modified.

        Sub-modules are run through ``.forward``, skipping ``nn.Module.__call__`` (see
        `linear`): at batch-1 decoding per-call overhead rivals the GEMVs.
        """
        q, k, v = self.attention_inputs(x, cos, sin)
        return self.finish(x, batch.attend(self.self_attn.layer_idx, q, k, v))

    def attention_inputs(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Norm, q/k/v projections and RoPE of ``x``: everything before the cache."""
        return self.self_attn.project(self.input_layernorm.forward(x), cos, sin)

    def finish(self, x: Tensor, attended: Tensor) -> Tensor:
        """The layer's output from its input ``x`` and the attention output ``[B, H, n, D]``:
        ``o_proj``, the residual adds and the MLP (everything after the cache)."""
        h = x + self.self_attn.output(attended, x.shape)
        return h.add_(self.mlp.forward(self.post_attention_layernorm.forward(h)))  # h is ours


def rows_at(x: Tensor, last: Tensor) -> Tensor:
    """``x`` ``[B, n, D]`` at one position of each row, ``last`` ``[B]``: ``[B, 1, D]``."""
    return x.gather(1, last.view(-1, 1, 1).expand(-1, 1, x.shape[-1]))


def check_step_shapes(
    input_ids: Tensor, positions: Tensor, slots: Tensor, tree_mask: Tensor
) -> None:
    """Fail fast, with the shapes, on inconsistent step inputs (cheap: no device sync)."""
    b, n = input_ids.shape
    mask_ok = tree_mask.ndim == 3 and tree_mask.shape[:2] == (b, n) and tree_mask.shape[2] >= n
    if positions.shape != (b, n) or slots.shape != (b,) or not mask_ok:
        raise ValueError(
            f"inconsistent step shapes: input_ids {tuple(input_ids.shape)}, positions "
            f"{tuple(positions.shape)}, slots {tuple(slots.shape)}, tree_mask "
            f"{tuple(tree_mask.shape)}; expected [B, n], [B, n], [B], [B, n, s >= n]"
        )


def run_layers(
    model: LlamaModel, h: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch,
    capture: tuple[int, ...],
) -> tuple[Tensor, dict[int, Tensor]]:
    """The eager decoder stack: final-norm hidden states ``[B·n, hidden]`` from the
    embeddings ``h`` ``[B·n, hidden]``, and the residual stream entering each layer in
    ``capture`` (see `eagle3_feature_layers` for why this convention)."""
    features: dict[int, Tensor] = {}
    for i, layer in enumerate(model.layers):
        if i in capture:
            features[i] = h
        h = layer(h, cos, sin, batch)
    return model.norm(h), features


class LlamaModel(nn.Module):
    """Target model: embeddings, decoder stack, final norm and (possibly tied) LM head."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head: nn.Linear | None = (
            None
            if config.tie_word_embeddings
            else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )
        # Set by `weights.apply_weight_format`; None / fp32 is the dense reference path.
        self.packed_head: PackedLinear | DenseFromRows | None = None
        self.weight_format = WeightFormat()
        # Set by `loader.apply_target_format` (a format's fused CPU layers, `cpu_layer.py`) or
        # `compiled.compile_models`; None runs the layers eagerly (the reference).
        self.layer_stack: LayerStack | None = None

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor,
        cache: KVCache,
        slots: Tensor,
        tree_mask: Tensor,
        layer_ids_to_capture: tuple[int, ...] = (),
    ) -> ModelOutput:
        """Run ``n`` new tokens per slot; their K/V go to the scratch region of ``cache``.

        ``tree_mask`` is ``[B, n, s]``: usually ``s == n``; ``s > n`` appends to scratch
        entries written by earlier uncommitted forwards (see `attention.py`).

        ``captured[k]`` is the residual stream entering layer ``layer_ids_to_capture[k]``
        (see `eagle3_feature_layers` for why this convention).
        """
        check_step_shapes(input_ids, positions, slots, tree_mask)
        for layer_id in layer_ids_to_capture:
            if not 0 <= layer_id < self.config.num_layers:
                raise ValueError(
                    f"layer_ids_to_capture: {layer_id} not in [0, {self.config.num_layers})"
                )
        return self.run(input_ids, positions, AttentionBatch.build(cache, slots, tree_mask), layer_ids_to_capture)

    def run(self, input_ids: Tensor, positions: Tensor, batch: AttentionBatch,
            layer_ids_to_capture: tuple[int, ...] = ()) -> ModelOutput:
        """`forward` over an already built `AttentionBatch` (the CUDA-graph runner builds
        a fixed-shape one, engine/cuda_graphs.py); ``input_ids``/``positions`` ``[B, n]``."""
        b, n = input_ids.shape
        # Layers run on [B·n, hidden]: a 2-D Linear input is a single GEMM call, while a
        # 3-D one goes through extra reshapes (measurable per op at batch-1 decode).
        h = self.embed_tokens(input_ids.reshape(-1))
        cos, sin = rope_cos_sin(positions, self.config, h.dtype)
        stack = self.layer_stack.run_layers if self.layer_stack is not None else run_layers
        hidden, features = stack(self, h, cos, sin, batch, layer_ids_to_capture)
        return ModelOutput(
            hidden=hidden.view(b, n, -1),
            captured=[features[i].view(b, n, -1) for i in layer_ids_to_capture],
        )

    @property
    def lm_head_weight(self) -> Tensor:
        """``[vocab, hidden]`` output projection (the embedding matrix when tied)."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    @torch.inference_mode()
    def causal_hidden(self, token_ids: list[int]) -> Tensor:
        """Final-norm hidden states ``[n, hidden]`` of one plain causal forward over
        ``token_ids``, in a scratch KV cache of its own (no engine state is touched):
        for rescoring a sequence, e.g. logprobs or judging a greedy divergence."""
        n = len(token_ids)
        device = self.embed_tokens.weight.device
        cache = KVCache.for_model(self.config, 1, n, device, self.embed_tokens.weight.dtype)
        ids = torch.tensor([token_ids], device=device)
        positions = torch.arange(n, device=device).view(1, n)
        slots = torch.zeros(1, dtype=torch.long, device=device)
        return self(ids, positions, cache, slots, causal_tree_mask(1, n, device)).hidden[0]

    def logits(self, hidden: Tensor) -> Tensor:
        """Project final-norm hidden states ``[..., hidden]`` to ``[..., vocab]``."""
        if self.packed_head is not None:
            return self.packed_head.forward(hidden)
        return F.linear(hidden, self.lm_head_weight)
