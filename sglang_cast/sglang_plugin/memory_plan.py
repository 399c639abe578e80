"""Will a CAST launch fit in GPU memory?  SGLang 0.5.23's sizing, re-stated.

SGLang splits a GPU in two (``mem_fraction_static``, ``mfs``):

* the *static* part, ``mfs`` of the memory free before loading: weights
  (target + draft head) and the KV pool, which takes all of it that the weights
  leave (``kv_cache_configurator._profile_available_bytes``: pool bytes =
  free after load - free before load · (1 - mfs); tokens = bytes // cell, the
  cell being every layer's K and V for one token, target plus draft head,
  ``pool_configurator._compute_cell_size``);
* the *slack*, the rest, sized by SGLang for its own activations and CUDA-graph
  buffers (``memory_hook.handle_gpu_memory_settings``: reserve =
  512 MiB + 1.5 MiB per chunked-prefill token + 2 MiB per decode graph batch
  size + 128 MiB for one GPU, at least 10 GiB on GPUs above 60 GiB).

Everything the CAST worker builds beyond SGLang's own startup shape is allocated
after the KV pool, so it must fit in what the slack has beyond SGLang's reserve:
per extra runtime state, its CUDA-graph output buffers (estimated as the verify
graph's float32 logits and captured hidden states, and the draft-extend graph's,
at the largest graph batch).  The states' attention backends reuse SGLang's one
FlashInfer workspace (``worker.shared_attention_workspace``), so they add no
workspace of their own.  No state has a draft-decode graph (the worker drafts
eagerly: ``CastDraftWorker._capture_cuda_graphs``), so none is charged.

The numbers are an estimate built from SGLang's formulas and the model's
config.json; they have never been compared with a real GPU's allocator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30
CUDA_CONTEXT = 512 * MIB  # the CUDA context and allocator overhead present before SGLang loads weights


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer's config.json that size it."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool

    @classmethod
    def from_config(cls, config: dict, source: str = "config.json") -> ModelShape:
        """Read a Hugging Face config; a missing field is named in a ``ValueError``."""
        def field(name: str, default=None):
            value = config.get(name, default)
            if value is None:
                raise ValueError(f"{source} has no {name!r}: cannot size the model")
            return value
        heads = int(field("num_attention_heads"))
        hidden = int(field("hidden_size"))
        return cls(layers=int(field("num_hidden_layers")), hidden=hidden, intermediate=int(field("intermediate_size")),
                   heads=heads, kv_heads=int(field("num_key_value_heads", heads)),
                   head_dim=int(config.get("head_dim") or hidden // heads), vocab=int(field("vocab_size")),
                   tied_embeddings=bool(config.get("tie_word_embeddings", False)))

    def layer_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)  # q, o; k, v
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden  # gate/up/down, two norms

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params() + embeddings + self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """SGLang's MHA KV cell: K and V heads of every layer."""
        return self.kv_heads * 2 * self.head_dim * self.layers * dtype_bytes

    def eagle_head(self) -> ModelShape:
        """An EAGLE-3 head for this target, sized conservatively: one decoder layer of
        the target's shape, its own embedding and LM head at the target's vocabulary
        (the fuse layer, ``3·hidden × hidden``, is added by ``draft_params``)."""
        return ModelShape(1, self.hidden, self.intermediate, self.heads, self.kv_heads, self.head_dim, self.vocab,
                          False)


def draft_params(draft: ModelShape, eagle3: bool = True) -> int:
    """A draft head's parameters: its layers, embedding and head, plus EAGLE's fuse
    layer (``3·hidden`` inputs for EAGLE-3, ``2·hidden`` for EAGLE-1/2)."""
    return draft.params() + (3 if eagle3 else 2) * draft.hidden * draft.hidden


@dataclass(frozen=True)
class LaunchSettings:
    """SGLang flags that size memory; ``None`` means SGLang's default."""

    gpu_memory_gib: float
    context_length: int
    max_running_requests: int = 48  # CastSpecAlgo.handle_server_args' default
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    dtype_bytes: int = 2  # bfloat16 weights and KV


def default_chunked_prefill(gpu_mib: float) -> int:
    """SGLang's default ``--chunked-prefill-size`` by GPU memory (memory_hook, lines 94-165)."""
    if gpu_mib < 20 * 1024:
        return 2048
    if gpu_mib < 60 * 1024:
        return 4096
    return 8192 if gpu_mib < 160 * 1024 else 16384


def decode_graph_max_bs(gpu_mib: float, max_running_requests: int) -> int:
    """SGLang's largest captured decode batch for one GPU (tp 1), capped by the running limit."""
    if gpu_mib < 20 * 1024:
        default = 8
    elif gpu_mib < 35 * 1024:
        default = 48
    elif gpu_mib < 60 * 1024:
        default = 32
    elif gpu_mib < 160 * 1024:
        default = 256
    else:
        default = 512
    return min(default, max_running_requests)


def sglang_reserve_mib(gpu_mib: float, chunked_prefill_size: int, graph_max_bs: int) -> float:
    """What SGLang plans to keep outside the static part for itself (memory_hook,
    lines 306-315, for one GPU: tp·pp/8 GiB = 128 MiB; prefill CUDA graphs are off
    by default)."""
    reserve = 512 + max(chunked_prefill_size, 2048) * 1.5 + 128 + graph_max_bs * 2
    return max(reserve, 10 * 1024) if gpu_mib > 60 * 1024 else reserve


def default_mem_fraction_static(gpu_mib: float, chunked_prefill_size: int, graph_max_bs: int) -> float:
    """SGLang's ``mem_fraction_static`` when the flag is not given (memory_hook, lines 324-328)."""
    return round((gpu_mib - sglang_reserve_mib(gpu_mib, chunked_prefill_size, graph_max_bs)) / gpu_mib, 3)


@dataclass(frozen=True)
class StateMemory:
    depth: int
    width: int
    graph_buffers: int  # bytes


@dataclass(frozen=True)
class MemoryPlan:
    gpu_bytes: int
    mem_fraction_static: float
    target_weights: int
    draft_weights: int
    kv_cell: int  # bytes per token, target + draft
    kv_pool: int  # bytes
    kv_tokens: int
    sglang_reserve: int  # bytes of slack SGLang leaves itself at its default mem_fraction_static
    default_fraction: float  # SGLang's default mem_fraction_static for this GPU and these flags
    slack: int  # bytes outside the static part
    states: tuple[StateMemory, ...]
    context_length: int
    max_running_requests: int

    @property
    def extra_states(self) -> int:
        return sum(s.graph_buffers for s in self.states)

    @property
    def slack_left(self) -> int:
        return self.slack - self.sglang_reserve - self.extra_states

    def problems(self) -> list[str]:
        """Why the launch would not fit (empty when it fits), each with its fix."""
        found = []
        if self.kv_pool <= 0:
            found.append(f"the weights ({_gib(self.target_weights + self.draft_weights)}) leave no KV pool in the "
                         f"static {self.mem_fraction_static:.3f} of {_gib(self.gpu_bytes)}: use a larger GPU or raise "
                         "--mem-fraction-static")
        elif self.kv_tokens < self.context_length:
            found.append(f"the KV pool holds {self.kv_tokens} tokens, less than one --context-length "
                         f"{self.context_length} request: pass --context-length {self.kv_tokens} or less")
        if self.slack_left < 0:
            found.append(f"the {len(self.states)} extra runtime states need {_gib(self.extra_states)} on top of "
                         f"SGLang's own {_gib(self.sglang_reserve)}, but --mem-fraction-static "
                         f"{self.mem_fraction_static:.3f} leaves {_gib(self.slack)}: pass --mem-fraction-static "
                         f"{self.fitting_fraction():.3f} (or re-make the profile with fewer depths/widths)")
        return found

    def fitting_fraction(self) -> float:
        """The largest ``mem_fraction_static`` (3 decimals) whose slack holds SGLang's
        own reserve and the states."""
        before_load = self.gpu_bytes - CUDA_CONTEXT
        return int((1 - (self.sglang_reserve + self.extra_states) / before_load) * 1000) / 1000

    def report(self) -> str:
        lines = [
            f"GPU memory               {_gib(self.gpu_bytes)}",
            f"mem_fraction_static      {self.mem_fraction_static:.3f} (SGLang's default here: "
            f"{self.default_fraction:.3f}; fits up to {self.fitting_fraction():.3f})",
            f"target weights           {_gib(self.target_weights)}",
            f"draft head weights       {_gib(self.draft_weights)}",
            f"KV pool                  {_gib(self.kv_pool)} = {self.kv_tokens} tokens x {self.kv_cell} B "
            f"(--context-length {self.context_length}: {max(self.kv_tokens, 0) // self.context_length} full-length "
            f"requests; --max-running-requests {self.max_running_requests})",
            f"slack outside static     {_gib(self.slack)}, SGLang's own reserve {_gib(self.sglang_reserve)}",
            f"runtime states           {len(self.states)} (depth x width) beyond SGLang's startup state, on "
            "SGLang's one FlashInfer workspace:",
        ]
        for s in self.states:
            lines.append(f"  {s.depth:>3} x {s.width:<4} graph buffers {_mib(s.graph_buffers):>9}")
        lines.append(f"states total             {_gib(self.extra_states)}")
        lines.append(f"slack left               {_gib(self.slack_left)}")
        problems = self.problems()
        lines.append("FITS" if not problems else "DOES NOT FIT: " + "; ".join(problems))
        return "\n".join(lines)


def _gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def _mib(value: int) -> str:
    return f"{value / MIB:.0f} MiB"


def state_graph_buffers(target: ModelShape, draft: ModelShape, width: int, graph_bs: int) -> int:
    """A state's CUDA-graph output buffers at its largest captured batch: the
    verify graph's float32 logits and the three hidden states an EAGLE-3 head
    captures, plus the draft-extend graph's logits and hidden state, for
    ``graph_bs · width`` tokens."""
    tokens = graph_bs * width
    verify = tokens * (target.vocab * 4 + 3 * target.hidden * 2)
    extend = tokens * (draft.vocab * 4 + draft.hidden * 2)
    return verify + extend


def plan_memory(target: ModelShape, draft: ModelShape, states: Sequence[tuple[int, int]],
                startup: tuple[int, int], launch: LaunchSettings, eagle3: bool = True) -> MemoryPlan:
    """The memory of a CAST launch with runtime ``states`` ((depth, width) pairs,
    ``startup`` among them: SGLang builds and sizes that one itself)."""
    gpu_bytes = int(launch.gpu_memory_gib * GIB)
    gpu_mib = gpu_bytes / MIB
    chunk = launch.chunked_prefill_size or default_chunked_prefill(gpu_mib)
    graph_bs = decode_graph_max_bs(gpu_mib, launch.max_running_requests)
    default_fraction = default_mem_fraction_static(gpu_mib, chunk, graph_bs)
    fraction = launch.mem_fraction_static or default_fraction
    before_load = gpu_bytes - CUDA_CONTEXT
    target_weights = target.params() * launch.dtype_bytes
    draft_weights = draft_params(draft, eagle3) * launch.dtype_bytes
    slack = int(before_load * (1 - fraction))
    kv_pool = before_load - target_weights - draft_weights - slack
    cell = target.kv_bytes_per_token(launch.dtype_bytes) + draft.kv_bytes_per_token(launch.dtype_bytes)
    extra = tuple(
        StateMemory(depth, width, state_graph_buffers(target, draft, width, graph_bs))
        for depth, width in sorted(states) if (depth, width) != startup)
    return MemoryPlan(gpu_bytes=gpu_bytes, mem_fraction_static=fraction, target_weights=target_weights,
                      draft_weights=draft_weights, kv_cell=cell, kv_pool=kv_pool,
                      kv_tokens=max(kv_pool, 0) // cell if kv_pool > 0 else 0,
                      sglang_reserve=int(before_load * (1 - default_fraction)), default_fraction=default_fraction,
                      slack=slack,
                      states=extra, context_length=launch.context_length,
                      max_running_requests=launch.max_running_requests)
