"""Decoder layers (the target's, an EAGLE-3 head's) with their work between the linears
fused into four CPU ops (csrc/cpu_layer.cpp): RMSNorm, the residual add with the next
RMSNorm, SwiGLU's product, and RoPE + the KV-cache write + tree attention.  Two more
read a step's logits (`step_op`): the target's greedy tokens (`greedy_tokens_for`) and
a draft layer's top-k children (engine/draft_expander.py's `child_reader_for`).

Why: at batch 1 a layer's eager torch ops between its linears (norms, RoPE, views, cache
copies, SDPA, casts: ~35 small kernels) cost more than the linears themselves on a 2-core
CPU; a one-token int4vnni forward spent ~6 of its ~12 ms there
(docs/results/2026-12-04_cpu_layer_avx512.md).  With these ops a layer is nine calls.

`FusedLayers` is a `llama.LayerStack` and an `eagle.DraftStack`: `loader.apply_target_format`
installs it on a CPU fp32 target whose linears are in a format that asks for it
(`Format.fused_layers`: the VNNI formats, whose cost tables were measured with it), and
`eagle.load_draft` on that target's EAGLE-3 head.  The same math as the eager
layers, computed in another order: within fp32 rounding of them (the VNNI linears round
their inputs to bf16, which absorbs most of it; one-token logits came out identical), and
row-independent like the VNNI kernels (a verify row equals the one-token step of its path,
bit for bit: attention sums over a row's visible keys only, in cache order).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..cast import sampling
from .attention import AttentionBatch
from .cpu_kernel import OPENMP, CpuKernel
from .llama import rows_at

if TYPE_CHECKING:  # eagle.py builds on this module: its heads are typed as modules here
    from .llama import DecoderLayer, LlamaModel

log = logging.getLogger(__name__)

KERNEL = CpuKernel(
    namespace="sglang_cast_layer", source="cpu_layer.cpp",
    required_flags=frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    # ATen's Vectorized<float> at its AVX-512 width (its exp is torch's own, Sleef)
    compile_flags=("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
                   "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512", *OPENMP),
    link_flags=OPENMP)


# The ops' vector width (csrc: kLanes, floats per AVX-512 register): every row width a
# multiple of it; a head 2, 4 or 8 of them (RoPE rotates its halves a vector at a time,
# attention keeps a head's sums in registers).
VECTOR = 16


def fits(config) -> bool:
    """Whether the ops hold a model of this `ModelConfig`'s widths."""
    return all(width % VECTOR == 0 for width in (config.hidden_size, config.intermediate_size)) \
        and config.head_dim in (2 * VECTOR, 4 * VECTOR, 8 * VECTOR)


def unavailable_reason(flags: frozenset[str] | None = None) -> str | None:
    """Why the fused ops cannot run on this machine (``None``: they can)."""
    return KERNEL.unavailable_reason(flags)


def _ops():
    return torch.ops.sglang_cast_layer


# The two ops that read a step's logits, called through their overloads (`step_op`): in a
# B = 1 step the read right after a forward took ~62 µs through the op's packet and a checking
# wrapper, ~33 µs through the overload alone; cold Python costs that much there
# (docs/results/2026-12-04_host_work_avx512.md).
#   greedy_tokens(logits [..., V] fp32) -> [...] int64: each row's first maximum (`cast.greedy_tokens`)
#   top_children(logits [..., V] fp32, k, offsets [V] int64 or empty) -> [..., 2k] float64: each
#     row's k likeliest tokens under its softmax, best first (the lower id first among equal
#     logits): their probabilities, then their ids (exact in float64) moved by ``offsets[id]``


@functools.cache
def step_op(name: str):
    """The overload of one of the step ops above (the library loaded: `unavailable_reason`)."""
    return getattr(_ops(), name).default


NO_OFFSETS = torch.empty(0, dtype=torch.long)  # top_children's ``offsets`` when the ids are kept


def greedy_tokens_for(device: torch.device, dtype: torch.dtype) -> Callable[[Tensor], Tensor]:
    """How an engine on ``device`` whose logits are ``dtype`` reads their greedy tokens:
    the ``greedy_tokens`` op for fp32 on a CPU that builds these ops (loaded here, the
    first time), else `cast.greedy_tokens`."""
    if device.type == "cpu" and dtype == torch.float32 and unavailable_reason() is None:
        return step_op("greedy_tokens")
    return sampling.greedy_tokens


def rms_norm(x: Tensor, norm) -> Tensor:
    """``norm`` (a `llama.RMSNorm`) of ``x`` ``[T, D]`` fp32."""
    return _ops().rms_norm(x, norm.weight, norm.eps)


def attention_and_mlp(layer: nn.Module, x: Tensor, residual: Tensor, cos: Tensor, sin: Tensor,
                      batch: AttentionBatch, tree_mask: Tensor) -> Tensor:
    """A layer's work after its input norm, shared by a target's layer and an EAGLE-3 head's:
    its stacked q/k/v projection of ``x`` ``[B·n, in]``, attention on its cache layer, ``o_proj``
    added to ``residual`` ``[B·n, hidden]`` (not modified), the MLP on the normed sum;
    ``tree_mask`` is ``batch.tree_mask``, contiguous."""
    attention, mlp, norm, ops = layer.self_attn, layer.mlp, layer.post_attention_layernorm, _ops()
    qkv = attention.qkv_proj.forward(x)  # [B·n, (H + 2 KV)·D]
    attended = ops.rope_attention(qkv, cos, sin, batch.cache.k, batch.cache.v, attention.layer_idx, batch.slots,
                                  batch.starts, tree_mask, attention.num_heads, attention.num_kv_heads)
    h, normed = ops.add_rms_norm(residual, attention.o_proj.forward(attended), norm.weight, norm.eps)
    return h.add_(mlp.down_proj.forward(ops.silu_mul(mlp.gate_up_proj.forward(normed))))


def fused_layer(layer: DecoderLayer, x: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch,
                tree_mask: Tensor) -> Tensor:
    """One decoder layer on ``x`` ``[B·n, hidden]`` (not modified): what `DecoderLayer.forward`
    computes, with its stacked q/k/v and gate/up linears (`weights.StacksLinears`)."""
    return attention_and_mlp(layer, rms_norm(x, layer.input_layernorm), x, cos, sin, batch, tree_mask)


def fused_draft_layer(draft: nn.Module, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor,
                      batch: AttentionBatch, last: Tensor | None) -> tuple[Tensor, Tensor]:
    """An EAGLE-3 head's (`eagle.Eagle3Draft`) step (`eagle.run_draft`): its layer reads ``[norm(embeds),
    norm(residual)]`` (``[B·n, 2 hidden]``), the residual is ``fc(features)`` for target
    features; hidden ``[B, n, hidden]`` and logits ``[B, n or 1, draft vocab]``."""
    layer = draft.midlayer
    b, n = input_ids.shape
    width = draft.config.layer.hidden_size
    residual = (features if features.shape[-1] == width else draft.fc.forward(features)).reshape(b * n, width)
    x = torch.cat((rms_norm(draft.embed(input_ids).view(b * n, width), layer.input_layernorm),
                   rms_norm(residual, layer.hidden_norm)), dim=-1)
    hidden = attention_and_mlp(layer, x, residual, cos, sin, batch, batch.tree_mask.contiguous()).view(b, n, width)
    rows = hidden if last is None else rows_at(hidden, last)
    logits = draft.lm_head.forward(rms_norm(rows.reshape(-1, width), draft.norm))
    return hidden, logits.view(*rows.shape[:-1], -1)


class FusedLayers:
    """The decoder stack (`llama.LayerStack`) and an EAGLE-3 head's layer
    (`eagle.DraftStack`) on the fused ops."""

    def run_draft(self, draft: nn.Module, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor,
                  batch: AttentionBatch, last: Tensor | None) -> tuple[Tensor, Tensor]:
        return fused_draft_layer(draft, input_ids, features, cos, sin, batch, last)

    def run_layers(self, model: LlamaModel, h: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch,
                   capture: tuple[int, ...]) -> tuple[Tensor, dict[int, Tensor]]:
        features: dict[int, Tensor] = {}
        tree_mask = batch.tree_mask.contiguous()  # a chain's mask is an expanded view
        for i, layer in enumerate(model.layers):
            if i in capture:
                features[i] = h
            h = fused_layer(layer, h, cos, sin, batch, tree_mask)
        return rms_norm(h, model.norm), features


def fused_layers_for(model: LlamaModel) -> FusedLayers | None:
    """The fused stack for ``model`` where its weight format asks for one
    (`weights.Format.fused_layers`) and it can run one: fp32 on the CPU, its q/k/v and
    gate/up stacked, widths the ops hold (`fits`), this CPU able to build the ops (loaded
    here).  Else ``None``: the eager layers, with a warning where only the CPU or toolchain
    stood in the way."""
    weight, layer = model.embed_tokens.weight, model.layers[0]
    if not model.weight_format.linears.fused_layers or weight.device.type != "cpu" \
            or weight.dtype != torch.float32 or layer.self_attn.qkv_proj is None or layer.mlp.gate_up_proj is None \
            or not fits(model.config):
        return None
    reason = unavailable_reason()
    if reason is not None:
        log.warning("fused CPU layers unavailable (%s); running the eager layers", reason)
        return None
    return FusedLayers()


def fused_draft_for(draft: nn.Module, target: LlamaModel) -> FusedLayers | None:
    """The target's fused stack for its draft head too where the target runs one (the
    pair's tables were measured so): an EAGLE-3 head with stacked q/k/v and gate/up
    (a packed draft format) and widths the ops hold; else ``None`` (its eager layer)."""
    stack = target.layer_stack
    layer = getattr(draft, "midlayer", None)  # EAGLE-1/2 heads have no EAGLE-3 layer
    if not isinstance(stack, FusedLayers) or layer is None or layer.self_attn.qkv_proj is None \
            or layer.mlp.gate_up_proj is None or not fits(draft.config.layer):
        return None
    return stack
