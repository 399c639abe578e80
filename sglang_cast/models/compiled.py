"""The decoder layers' math compiled by inductor, with the KV cache kept eager.

Why the graphs are cut at the cache
-----------------------------------
A forward's shapes that change every decode step (the cache slice length, the mask)
live only in `AttentionBatch` and its ``attend``, which reads host values and writes
the cache.  Everything else in a layer (norms, q/k/v projections, RoPE, ``o_proj``,
residual adds, SwiGLU MLP) depends only on the ``[B·n, hidden]`` rows.  So each layer
is cut at the cache: three compiled functions (`_enter`: layer 0's norm, q/k/v and
RoPE; `_between`: one layer's output side fused with the next layer's input side;
`_leave`: the last layer's output side and the final norm) run around an eager
``attend`` per layer.  No graph sees the cache length, so decoding never recompiles as
the context grows, and with dynamo's module inlining all 30 layers share one graph
(their weights are graph inputs).  dynamo specialises ``n = 1`` (decoding) and
compiles one graph with a symbolic row count for every other ``n`` (verification,
prefill) and batch size; `warm_up` triggers exactly those compilations at start-up,
after which the stance ``eager_on_recompile`` makes any unforeseen shape run eagerly
instead of compiling inside a request.  A ``:dense<N>`` weight format's row switch
(`weights.DenseFromRows`) becomes a guard on the row count: warm-up compiles the packed
side, and forwards of N rows or more fail that guard and run eagerly on the dense weights.

Numerics: inductor fuses the norms' reductions and the elementwise chains, so fp32
results differ from eager in the last bits (not bitwise equal), which would break
fp32's token identity with the eager reference; ``auto`` therefore compiles only
packed weight formats, whose bf16 activations already put them under the near-tie
rule (`numerics.py`).  Measured on a 2-core AMX Xeon (docs/precision.md) this cut of
the graphs is no faster than eager: 31 compiled calls per forward cost about what the
fused elementwise work saves, so engines default to ``off``.

Inductor's on-disk caches (FX graph and generated C++) live in
``$TORCHINDUCTOR_CACHE_DIR``, by default ``<cache_root>/inductor`` (`cache.cache_root`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor, nn

from .attention import AttentionBatch, causal_tree_mask
from .kv_cache import KVCache
from .cache import cache_root
from .llama import rows_at
from .weights import Format

if TYPE_CHECKING:
    from .eagle import DraftModel
    from .llama import DecoderLayer, LlamaModel

CompileMode = Literal["auto", "on", "off"]
COMPILE_MODES: tuple[str, ...] = ("auto", "on", "off")
# (batch, new tokens) shapes run at start-up: n = 1 is dynamo's specialised decode graph,
# n = 2 then 3 make the row count symbolic, batch 2 makes the batch symbolic too.
_WARM_UP_SHAPES = ((1, 1), (1, 2), (1, 3))
_BATCHED_WARM_UP_SHAPES = ((2, 1), (2, 2), (3, 2))


def compile_wanted(mode: str, model: LlamaModel) -> bool:
    """Whether ``mode`` compiles ``model``: ``auto`` compiles packed CPU weight formats
    (fp32 stays eager, the bitwise reference), ``on`` always, ``off`` never."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile: {mode!r} is not one of {', '.join(COMPILE_MODES)}")
    if mode == "auto":
        return model.embed_tokens.weight.is_cpu and model.weight_format.linears != Format.FP32
    return mode == "on"


def inductor_cache_dir() -> str:
    """Where inductor keeps its on-disk caches: ``$TORCHINDUCTOR_CACHE_DIR`` if set,
    else ``<cache_root>/inductor``, set process-wide so a restart finds the graphs."""
    return os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))


def _enter(layer: DecoderLayer, h: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return layer.attention_inputs(h, cos, sin)


def _between(
    layer: DecoderLayer, following: DecoderLayer, h: Tensor, attended: Tensor, cos: Tensor, sin: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    h = layer.finish(h, attended)
    return (h, *following.attention_inputs(h, cos, sin))


def _leave(layer: DecoderLayer, norm: nn.Module, h: Tensor, attended: Tensor) -> Tensor:
    return norm.forward(layer.finish(h, attended))


def _draft_enter(draft: DraftModel, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor):
    return draft.attention_inputs(input_ids, features, cos, sin)


def _draft_leave(draft: DraftModel, residual: Tensor, attended: Tensor):
    return draft.finish(residual, attended)


class CompiledLayers:
    """A target's decoder stack (and optionally its draft head's layer) as compiled
    functions around eager attention; `LlamaModel.forward` and the draft heads call
    `run_layers` / `run_draft` when a model carries one (``model.layer_stack``, ``draft.layer_stack``)."""

    def __init__(self, cpp_wrapper: bool = False) -> None:
        inductor_cache_dir()
        options = {"cpp_wrapper": cpp_wrapper}

        def compiled(fn: Callable) -> Callable:
            return torch.compile(fn, options=options)

        self.enter, self.between, self.leave = compiled(_enter), compiled(_between), compiled(_leave)
        self.draft_enter, self.draft_leave = compiled(_draft_enter), compiled(_draft_leave)
        self.stance = "default"  # "eager_on_recompile" once warmed up

    def run_layers(
        self, model: LlamaModel, h: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch,
        capture: tuple[int, ...],
    ) -> tuple[Tensor, dict[int, Tensor]]:
        """The final-norm hidden states ``[B·n, hidden]`` and the residual stream entering
        each layer in ``capture`` (`LlamaModel.forward`'s contract), from the embeddings
        ``h`` ``[B·n, hidden]``."""
        layers = model.layers
        features = {0: h} if 0 in capture else {}
        with torch.compiler.set_stance(self.stance):
            q, k, v = self.enter(layers[0], h, cos, sin)
            for i in range(len(layers) - 1):
                attended = batch.attend(i, q, k, v)
                h, q, k, v = self.between(layers[i], layers[i + 1], h, attended, cos, sin)
                if i + 1 in capture:
                    features[i + 1] = h
            attended = batch.attend(len(layers) - 1, q, k, v)
            return self.leave(layers[-1], model.norm, h, attended), features

    def run_draft(
        self, draft: DraftModel, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor,
        batch: AttentionBatch, last: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The draft head's hidden states and logits (at ``last`` only when given, gathered
        from all rows'), its single layer compiled around eager attention."""
        with torch.compiler.set_stance(self.stance):
            residual, q, k, v = self.draft_enter(draft, input_ids, features, cos, sin)
            hidden, logits = self.draft_leave(draft, residual, batch.attend(0, q, k, v))
        return hidden, logits if last is None else rows_at(logits, last)


def compile_models(
    target: LlamaModel, draft: DraftModel | None, max_batch_size: int, cpp_wrapper: bool = False
) -> CompiledLayers:
    """Attach one `CompiledLayers` to ``target`` (and ``draft``) and compile every graph
    a run can need now (`warm_up`), so no request ever waits on the compiler."""
    compiled = CompiledLayers(cpp_wrapper)
    target.layer_stack = compiled
    if draft is not None:
        draft.layer_stack = compiled
    warm_up(target, draft, max_batch_size)
    compiled.stance = "eager_on_recompile"
    return compiled


@torch.inference_mode()
def warm_up(target: LlamaModel, draft: DraftModel | None, max_batch_size: int) -> None:
    """Run the target (and the draft) once per shape of `_WARM_UP_SHAPES` (plus the
    batched ones when ``max_batch_size > 1``) on scratch caches, compiling each graph."""
    shapes = _WARM_UP_SHAPES + (_BATCHED_WARM_UP_SHAPES if max_batch_size > 1 else ())
    weight = target.embed_tokens.weight
    config, device, dtype = target.config, weight.device, weight.dtype
    width = max(n for _, n in shapes)
    rows = max(b for b, _ in shapes)
    target_cache = KVCache.for_model(config, rows, width, device, dtype)
    draft_cache = KVCache.for_model(config, rows, width, device, dtype, num_layers=1)
    for batch, n in shapes:
        ids = torch.zeros(batch, n, dtype=torch.long, device=device)
        positions = torch.arange(n, device=device).expand(batch, n)
        slots = torch.arange(batch, device=device)
        mask = causal_tree_mask(batch, n, device)
        hidden = target(ids, positions, target_cache, slots, mask).hidden
        if draft is not None:
            # The first draft step takes target features (three layers' for EAGLE-3),
            # later ones its own hidden state: two input widths, two graphs.
            wide = hidden.repeat(1, 1, max(1, len(draft.feature_layers(target.config.num_layers))))
            draft(ids, wide, positions, draft_cache, slots, mask)
            draft(ids, hidden, positions, draft_cache, slots, mask)
