"""EAGLE-1/2 and EAGLE-3 draft heads on the same tree attention and KV cache as the target.

Each head is a single decoder layer with its own one-layer `KVCache`, so drafting a
tree uses exactly the ``[prefix | scratch]`` masking and `KVCache.commit` compaction
that verification uses.  Parameter names follow the public checkpoints
(``yuhuili/EAGLE-LLaMA3-Instruct-8B``, ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``) so
`load_draft`/`save_draft` are plain key-for-key reads and writes.

Which feature goes with which token is the caller's business: EAGLE pairs the
embedding of token ``t + 1`` with the target feature computed at token ``t``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from .attention import AttentionBatch
from .config import ModelConfig
from .kv_cache import KVCache
from .llama import (
    MLP,
    Attention,
    DecoderLayer,
    LlamaModel,
    RMSNorm,
    check_step_shapes,
    eagle3_feature_layers,
    rope_cos_sin,
    rows_at,
)
from .cpu_layer import fused_draft_for
from .loader import check_state_dict, read_json
from .weights import DraftFormat, apply_draft_format

EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"
Layout = Literal["eagle", "eagle3"]


@dataclass(frozen=True)
class DraftConfig:
    """A draft head: its checkpoint layout, its decoder layer's shapes and output vocab."""

    layout: Layout
    layer: ModelConfig  # single decoder layer (num_layers == 1); vocab = target vocab
    fc_bias: bool
    draft_vocab_size: int  # == layer.vocab_size for EAGLE-1/2

    def to_hf(self) -> dict[str, Any]:
        """``config.json`` in the public layout of ``layout``."""
        cfg = self.layer.to_hf()
        cfg["bias"] = self.fc_bias
        if self.layout == "eagle3":
            cfg["architectures"] = [EAGLE3_ARCHITECTURE]
            cfg["draft_vocab_size"] = self.draft_vocab_size
            # The head's own lm_head [draft_vocab, hidden]: SGLang's LlamaForCausalLMEagle3 reads
            # this flag and, when true, drafts through the target's embedding instead of loading it.
            cfg["tie_word_embeddings"] = False
        return cfg


class DraftOutput(NamedTuple):
    """``hidden`` feeds the next draft step as its feature; ``logits`` rank candidates."""

    hidden: Tensor
    logits: Tensor


class DraftStack(Protocol):
    """What a draft head calls instead of its eager layer when it carries one:
    `compiled.CompiledLayers` or `cpu_layer.FusedLayers` (which build on this module, so
    this module names only the call it needs).  Returns ``(hidden, logits)`` as `run_draft`
    does (logits at ``last`` only when given)."""

    def run_draft(self, draft: DraftModel, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor,
                  batch: AttentionBatch, last: Tensor | None) -> tuple[Tensor, Tensor]: ...


@dataclass(frozen=True)
class _TargetRef:
    """Holds the target outside nn.Module registration.

    The draft reuses the target's embedding/LM head by reference: wrapping it keeps
    those weights out of the draft's ``parameters()``, ``state_dict()`` and ``.to()``.
    """

    model: LlamaModel


def run_draft(draft: DraftModel, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor,
              batch: AttentionBatch, last: Tensor | None = None) -> DraftOutput:
    """One draft step: its layer's input side, attention on the head's cache, output side;
    through ``draft.layer_stack`` when the head carries one (`DraftStack`).  ``last`` ``[B]``
    asks for logits ``[B, 1, V]`` at that position of each row only: a catch-up reads no
    others, and on a CPU the LM head over every position was the largest part of a
    prompt's catch-up (204 ms timed alone at 16 x 108 tokens, int8 head, against 379-426 ms
    for the whole catch-up; AMX Xeon)."""
    if draft.layer_stack is not None:
        return DraftOutput(*draft.layer_stack.run_draft(draft, input_ids, features, cos, sin, batch, last))
    residual, q, k, v = draft.attention_inputs(input_ids, features, cos, sin)
    return draft.finish(residual, batch.attend(0, q, k, v), last)


def _step_batch(
    input_ids: Tensor, positions: Tensor, cache: KVCache, slots: Tensor, tree_mask: Tensor
) -> AttentionBatch:
    check_step_shapes(input_ids, positions, slots, tree_mask)
    return AttentionBatch.build(cache, slots, tree_mask)


class DraftHead(nn.Module):
    """What both head layouts share: one forward over a prepared `AttentionBatch`.
    A subclass sets ``config`` (`DraftConfig`) and ``fc`` and implements
    ``attention_inputs``, ``layer_output`` and ``logits_of`` (see `run_draft`)."""

    config: DraftConfig
    fc: nn.Linear

    def feature_layers(self, num_target_layers: int) -> tuple[int, ...]:
        """Target layers whose hidden states this head reads; ``()``: the last hidden state."""
        return ()

    def run(self, input_ids: Tensor, features: Tensor, positions: Tensor, batch: AttentionBatch,
            last: Tensor | None = None) -> DraftOutput:
        """`forward` over an already built `AttentionBatch` (engine/cuda_graphs.py)."""
        # The model dtype (the target's; the head is loaded in it): ``fc`` may be packed.
        cos, sin = rope_cos_sin(positions, self.config.layer, self.target.model.embed_tokens.weight.dtype)
        return run_draft(self, input_ids, features, cos, sin, batch, last)

    def layer_output(self, x: Tensor, attended: Tensor) -> Tensor:
        """The layer's output side: its hidden states from the residual ``x`` and attention."""
        raise NotImplementedError

    def logits_of(self, h: Tensor) -> Tensor:
        """The head's logits for its output hidden states ``h`` ``[..., hidden]``."""
        raise NotImplementedError

    def finish(self, x: Tensor, attended: Tensor, last: Tensor | None = None) -> DraftOutput:
        """The layer's output side, then logits at every position, or at ``last`` only
        (`run_draft`)."""
        h = self.layer_output(x, attended)
        return DraftOutput(hidden=h, logits=self.logits_of(h if last is None else rows_at(h, last)))


class EagleDraft(DraftHead):
    """EAGLE-1/2: ``fc(concat[embed(token), feature])`` -> one decoder layer -> target LM head.

    Features are the target's final-norm hidden states (`ModelOutput.hidden`), and the
    draft predicts the next such feature, which is why its output goes straight into the
    target's LM head without a norm and why its layer has no ``input_layernorm``.
    """

    def __init__(self, config: DraftConfig, target: LlamaModel) -> None:
        super().__init__()
        hidden = config.layer.hidden_size
        self.config = config
        self.fc = nn.Linear(2 * hidden, hidden, bias=config.fc_bias)
        self.layers = nn.ModuleList([DecoderLayer(config.layer, 0, input_norm=False)])
        self.target = _TargetRef(target)
        # Set by `load_draft` (the target's fused CPU layers, `cpu_layer.py`) or
        # `compiled.compile_models`; None runs the layer eagerly.
        self.layer_stack: DraftStack | None = None

    def forward(
        self,
        input_ids: Tensor,
        features: Tensor,
        positions: Tensor,
        cache: KVCache,
        slots: Tensor,
        tree_mask: Tensor,
        last: Tensor | None = None,
    ) -> DraftOutput:
        """``features`` ``[B, n, hidden]``: target features, or this head's previous ``hidden``;
        ``last``: as `run_draft`."""
        batch = _step_batch(input_ids, positions, cache, slots, tree_mask)
        return self.run(input_ids, features, positions, batch, last)

    def attention_inputs(
        self, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The layer's residual input ``fc(concat[embed, features])`` and its q, k, v."""
        x = self.fc(torch.cat((self.target.model.embed_tokens(input_ids), features), dim=-1))
        return (x, *self.layers[0].attention_inputs(x, cos, sin))

    def layer_output(self, x: Tensor, attended: Tensor) -> Tensor:
        return self.layers[0].finish(x, attended)

    def logits_of(self, h: Tensor) -> Tensor:
        """The target's LM head (no norm: ``h`` predicts a final-norm feature)."""
        return self.target.model.logits(h)

    @property
    def output_vocab_size(self) -> int:
        """Width of ``logits``: the target vocab."""
        return self.config.draft_vocab_size

    def draft_to_target(self, ids: Tensor) -> Tensor:
        """Identity: EAGLE-1/2 heads already predict target-vocab ids."""
        return ids

    @property
    def target_offsets(self) -> Tensor | None:
        """``draft_to_target`` as per-id offsets: none, the ids are the target's."""
        return None


class Eagle3Layer(nn.Module):
    """EAGLE-3 decoder layer: attention reads ``concat[norm(embeds), norm(hidden)]``.

    The residual stream is the fused feature ``hidden`` alone, so q/k/v take
    ``2 * hidden_size`` inputs while the output projection stays ``hidden_size`` wide.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, 0, in_features=2 * config.hidden_size)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self, embeds: Tensor, hidden: Tensor, cos: Tensor, sin: Tensor, batch: AttentionBatch
    ) -> Tensor:
        q, k, v = self.attention_inputs(embeds, hidden, cos, sin)
        return self.finish(hidden, batch.attend(0, q, k, v))

    def attention_inputs(
        self, embeds: Tensor, hidden: Tensor, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v of ``concat[norm(embeds), norm(hidden)]``: everything before the cache."""
        x = torch.cat((self.input_layernorm(embeds), self.hidden_norm(hidden)), dim=-1)
        return self.self_attn.project(x, cos, sin)

    def finish(self, hidden: Tensor, attended: Tensor) -> Tensor:
        """``o_proj``, residual adds and MLP: everything after the cache."""
        h = hidden + self.self_attn.output(attended, hidden.shape)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Draft(DraftHead):
    """EAGLE-3: fused low/mid/high target features, own norm and reduced-vocab LM head.

    ``d2t[i]`` is the offset that maps draft token ``i`` to target token ``i + d2t[i]``;
    ``t2d`` marks which target tokens exist in the draft vocab.  The embedding is the
    target's unless the checkpoint ships its own (``own_embedding=True``).
    """

    def __init__(self, config: DraftConfig, target: LlamaModel, own_embedding: bool = False):
        super().__init__()
        hidden = config.layer.hidden_size
        vocab = config.layer.vocab_size
        self.config = config
        self.embed_tokens = nn.Embedding(vocab, hidden) if own_embedding else None
        self.fc = nn.Linear(3 * hidden, hidden, bias=config.fc_bias)
        self.midlayer = Eagle3Layer(config.layer)
        self.norm = RMSNorm(hidden, config.layer.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        # Default mapping: draft ids are the first draft_vocab_size target ids.
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.arange(vocab) < config.draft_vocab_size)
        self.target = _TargetRef(target)
        # Set by `load_draft` (the target's fused CPU layers, `cpu_layer.py`) or
        # `compiled.compile_models`; None runs the layer eagerly.
        self.layer_stack: DraftStack | None = None

    def feature_layers(self, num_target_layers: int) -> tuple[int, int, int]:
        """Three target layers, fixed by the target's depth (`eagle3_feature_layers`)."""
        return eagle3_feature_layers(num_target_layers)

    def embed(self, input_ids: Tensor) -> Tensor:
        if self.embed_tokens is not None:
            return self.embed_tokens(input_ids)
        return self.target.model.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: Tensor,
        features: Tensor,
        positions: Tensor,
        cache: KVCache,
        slots: Tensor,
        tree_mask: Tensor,
        last: Tensor | None = None,
    ) -> DraftOutput:
        """``features``: ``[B, n, 3*hidden]`` target features, or ``[B, n, hidden]``;
        ``last``: as `run_draft`.

        Only target features pass through ``fc``; later draft steps feed back the
        (pre-norm) ``hidden`` of the previous step, as SGLang and the EAGLE-3 code do.
        Logits are over the draft vocab; map ids with `draft_to_target`.
        """
        hidden_size = self.config.layer.hidden_size
        if features.shape[-1] not in (hidden_size, 3 * hidden_size):
            raise ValueError(
                f"features width {features.shape[-1]} is neither 3*hidden ({3 * hidden_size}) "
                f"nor hidden ({hidden_size})"
            )
        batch = _step_batch(input_ids, positions, cache, slots, tree_mask)
        return self.run(input_ids, features, positions, batch, last)

    def attention_inputs(
        self, input_ids: Tensor, features: Tensor, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The residual input (``fc(features)`` for target features) and its q, k, v."""
        if features.shape[-1] != self.config.layer.hidden_size:
            features = self.fc(features)
        return (features, *self.midlayer.attention_inputs(self.embed(input_ids), features, cos, sin))

    def layer_output(self, x: Tensor, attended: Tensor) -> Tensor:
        return self.midlayer.finish(x, attended)

    def logits_of(self, h: Tensor) -> Tensor:
        """The head's own norm and reduced-vocab LM head."""
        return self.lm_head(self.norm(h))

    @property
    def output_vocab_size(self) -> int:
        """Width of ``logits``: the reduced draft vocab."""
        return self.config.draft_vocab_size

    def draft_to_target(self, ids: Tensor) -> Tensor:
        """Map draft-vocab token ids to target-vocab ids."""
        return ids + self.d2t[ids]

    @property
    def target_offsets(self) -> Tensor | None:
        """``draft_to_target`` as per-id offsets ``[draft vocab]``: ``d2t``."""
        return self.d2t


DraftModel = EagleDraft | Eagle3Draft


def _read_weights(path: Path, device: torch.device | str) -> dict[str, Tensor]:
    safetensors = path / "model.safetensors"
    if safetensors.is_file():
        return load_file(safetensors, device=str(device))
    pickle = path / "pytorch_model.bin"
    if pickle.is_file():
        return torch.load(pickle, map_location=device, weights_only=True)
    raise FileNotFoundError(
        f"no draft weights in {path} (expected model.safetensors or pytorch_model.bin)"
    )


def _detect_layout(cfg: dict[str, Any], state: dict[str, Tensor], path: Path) -> Layout:
    architectures = cfg.get("architectures") or []
    if EAGLE3_ARCHITECTURE in architectures or any(k.startswith("midlayer.") for k in state):
        return "eagle3"
    if "fc.weight" in state and "layers.0.self_attn.q_proj.weight" in state:
        return "eagle"
    raise ValueError(
        f"{path}: unknown draft layout; expected EAGLE keys (fc.weight, layers.0.*) or "
        f"EAGLE-3 keys (midlayer.*, architectures [{EAGLE3_ARCHITECTURE!r}])"
    )


def _check_match(name: str, draft: int, target: int, path: Path) -> None:
    if draft != target:
        raise ValueError(f"{path}: draft {name} {draft} does not match target {name} {target}")


def _draft_config(
    cfg: dict[str, Any], state: dict[str, Tensor], layout: Layout, target: ModelConfig, path: Path
) -> DraftConfig:
    layer_prefix = "midlayer." if layout == "eagle3" else "layers.0."
    # The draft layer is Llama-style whatever the architecture tag says; whether q/k/v
    # carry biases (Qwen2 targets) is read off the weights themselves.
    layer = ModelConfig.from_hf(
        {**cfg, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1}
    )
    layer = replace(layer, attention_bias=f"{layer_prefix}self_attn.q_proj.bias" in state)
    _check_match("hidden_size", layer.hidden_size, target.hidden_size, path)
    _check_match("vocab_size", layer.vocab_size, target.vocab_size, path)
    draft_vocab = layer.vocab_size
    if layout == "eagle3" and cfg.get("draft_vocab_size"):
        draft_vocab = cfg["draft_vocab_size"]
    return DraftConfig(
        layout=layout, layer=layer, fc_bias="fc.bias" in state, draft_vocab_size=draft_vocab
    )


def load_draft(
    path: str | Path, target: LlamaModel, device: torch.device | str, dtype: torch.dtype,
    weight_format: DraftFormat = DraftFormat(),
) -> DraftModel:
    """Load a public-layout EAGLE or EAGLE-3 checkpoint directory for ``target``, its
    linears in ``weight_format`` (``WeightFormat.draft``; CPU formats, models/weights.py).

    The target model (not just its config) is required because the heads share its
    embedding and LM head by reference.  Raises ``FileNotFoundError`` for missing files
    and ``ValueError`` naming both numbers on hidden/vocab mismatches.
    """
    path = Path(path)
    cfg = read_json(path / "config.json")
    state = _read_weights(path, device)
    layout = _detect_layout(cfg, state, path)
    config = _draft_config(cfg, state, layout, target.config, path)
    if layout == "eagle":
        embed = state.pop("embed_tokens.weight", None)
        if embed is not None:  # a frozen copy of the target's; the shared one is used
            _check_match("vocab_size", embed.shape[0], target.config.vocab_size, path)
        with torch.device("meta"):
            draft: DraftModel = EagleDraft(config, target)
    else:
        if "t2d" in state:
            _check_match("vocab_size", state["t2d"].shape[0], target.config.vocab_size, path)
        with torch.device("meta"):
            draft = Eagle3Draft(config, target, own_embedding="embed_tokens.weight" in state)
    check_state_dict(draft, state, path)
    draft.load_state_dict(state, strict=True, assign=True)
    draft = apply_draft_format(draft.to(device=device, dtype=dtype).eval(), weight_format)
    draft.layer_stack = fused_draft_for(draft, target)
    return draft


def save_draft(model: DraftModel, path: str | Path) -> None:
    """Write ``config.json`` + ``model.safetensors`` in the public layout `load_draft` reads."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {key: value.detach().contiguous() for key, value in model.state_dict().items()}
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    dtypes = {value.dtype for value in state.values() if value.is_floating_point()}
    if len(dtypes) != 1:
        raise ValueError(f"save_draft: one floating dtype per checkpoint expected, got {sorted(map(str, dtypes))}")
    config = {**model.config.to_hf(), "torch_dtype": str(dtypes.pop()).removeprefix("torch.")}
    (path / "config.json").write_text(json.dumps(config, indent=2))
