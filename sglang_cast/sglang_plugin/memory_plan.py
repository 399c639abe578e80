"""Will a CAST launch fit in GPU memory?  SGLang 0.5.23's sizing, re-stated per rank.

Every rule below is cited to the installed SGLang 0.5.23
(``site-packages/sglang/...``, file:line).  SGLang splits each GPU in two by
``mem_fraction_static`` (``mfs``):

* the *static* part, ``mfs`` of the memory free before loading: the weights and
  then the KV pool, which takes all the rest of it
  (``srt/mem_cache/kv_cache_configurator.py:2990-3007``: pool bytes = free now -
  free before load · (1 - mfs), so whatever is resident when the pool is sized is
  charged to the pool; the cell is every layer's K and V for one token, target
  plus draft head, ``srt/model_executor/pool_configurator.py:340``
  ``_compute_cell_size``; with tensor parallelism each rank holds
  ``max(1, kv_heads // tp)`` heads, ``srt/configs/model_config.py:1700``);
* the *slack*, the rest, which SGLang sizes for its own activations and graphs
  when ``--mem-fraction-static`` is not given (``srt/arg_groups/memory_hook.py``):
  ``512 MiB + 1.5 MiB · max(chunked_prefill, 2048) + tp·pp/8 GiB`` (lines
  304-312; pp is 1 under CAST) ``+ 2 MiB`` per decode-graph batch (368)
  ``+ 8 MiB`` per prefill-graph token bucket (380-386; SGLang enables breakable
  prefill graphs by default on CUDA,
  ``srt/model_executor/cuda_graph_config.py:119-123``, with buckets up to
  the chunked-prefill size, ``memory_hook.py:233-236`` and
  ``srt/arg_groups/cuda_graph_hook.py:480-497``), at least 10 GiB on GPUs above
  60 GiB (314-315); ``mfs = round((gpu - reserve) / gpu, 3)`` (324-328).

What the CAST worker adds, per runtime state beyond SGLang's startup one
(``EAGLEWorkerV2.build_adaptive_runtime_state``,
``srt/speculative/eagle_worker_v2.py:1777-1849``):

* two FlashInfer backends whose CUDA-graph state holds, for ``T = max_bs ·
  width`` tokens, ``T · context`` int32 KV indices per wrapper and a ``T ·
  context`` uint8 custom mask (``srt/layers/attention/flashinfer_backend.py:
  1100-1138``): the verify backend (``T`` from
  ``srt/model_executor/runner/decode_cuda_graph_runner.py:423-429``) and the
  draft-extend one (``skip_prefill=False``, ``srt/speculative/draft_utils.py:
  436-445``; ``T`` from ``srt/speculative/eagle_draft_extend_cuda_graph_runner.py:
  150-159``).  One wrapper, or two for sliding-window models
  (``flashinfer_backend.py:411-418``);
* the graphs' captured hidden-state outputs (three target hidden states per
  verified token for an EAGLE-3 head, one draft hidden state per draft-extend
  token).  Their logits are *not* charged: every graph runner writes them into
  one process-wide buffer (``srt/model_executor/graph_shared_output.py:16-73``,
  ``decode_cuda_graph_runner.py:475``) sized for the startup shape, the widest.

Not charged: the states' attention workspaces (the worker shares SGLang's one,
``worker.shared_attention_workspace``), the draft's multi-step backends
(``O(max_bs)`` index pointers, ``flashinfer_backend.py:2459-2482``; CAST drafts
eagerly, so their graph state is never allocated), and SGLang's own startup
state, which SGLang's reserve is its own estimate for.

The worker holds the states' bytes *before* SGLang sizes the KV pool and frees
them just before building the states (``worker.StateMemoryHold``), so they come
out of the KV pool, never out of SGLang's slack: a launch at SGLang's default
``mfs`` fits when the pool left still holds a full-length request.

The numbers are an estimate built from SGLang's formulas and the model's
config.json; they have never been compared with a real GPU's allocator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .plugin_config import DEFAULT_MAX_RUNNING_REQUESTS

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
    sliding_window: bool = False

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
                   tied_embeddings=bool(config.get("tie_word_embeddings", False)),
                   sliding_window=bool(config.get("sliding_window") and config.get("use_sliding_window", True)))

    def layer_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)  # q, o; k, v
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden  # gate/up/down, two norms

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params() + embeddings + self.hidden

    def kv_bytes_per_token(self, dtype_bytes: int, tp_size: int = 1) -> int:
        """SGLang's MHA KV cell on one rank: K and V of the rank's heads, every layer."""
        return max(1, self.kv_heads // tp_size) * 2 * self.head_dim * self.layers * dtype_bytes

    @property
    def kv_index_wrappers(self) -> int:
        """FlashInfer wrappers per backend: two for sliding-window models (flashinfer_backend.py:411-418).
        Charged whenever config.json names a window: conservative, as not every model class uses it."""
        return 2 if self.sliding_window else 1

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

    gpu_memory_gib: float  # as SGLang reads it (get_device_memory_capacity: the device's total MiB / 1024)
    context_length: int
    max_running_requests: int = DEFAULT_MAX_RUNNING_REQUESTS  # CastSpecAlgo.handle_server_args' default
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    dtype_bytes: int = 2  # bfloat16 weights and KV
    tp_size: int = 1  # --tp-size: weights and KV heads are split across this many GPUs
    # no pp_size: pipeline parallelism is always 1 under CAST (plugin_config.PP_REFUSAL)


def default_chunked_prefill(gpu_mib: float) -> int:
    """SGLang's default ``--chunked-prefill-size`` by GPU memory (memory_hook.py:89-170)."""
    if gpu_mib < 20 * 1024:
        return 2048
    if gpu_mib < 60 * 1024:
        return 4096
    return 8192 if gpu_mib < 160 * 1024 else 16384


def decode_graph_max_bs(gpu_mib: float, max_running_requests: int, tp_size: int = 1) -> int:
    """SGLang's largest captured decode batch, capped by the running limit (memory_hook.py:89-188)."""
    if gpu_mib < 20 * 1024:
        default = 8
    elif gpu_mib < 35 * 1024:
        default = 48 if tp_size < 4 else 160
    elif gpu_mib < 60 * 1024:
        default = 32 if tp_size < 4 else 160
    elif gpu_mib < 160 * 1024:
        default = 256 if tp_size < 4 else 512
    else:
        default = 512
    return min(default, max_running_requests)


def decode_graph_batch_sizes(max_bs: int) -> int:
    """How many decode batch sizes SGLang captures with speculative decoding on, up to
    ``max_bs`` (cuda_graph_hook.py:517-532): each runtime state captures its verify and
    draft-extend graphs at every one of them."""
    sizes = {*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)}
    return len({size for size in sizes if size <= max_bs} | {max_bs})


def captures_per_state(graph_max_bs: int) -> int:
    """Start-up CUDA-graph captures of one runtime state: its verify and draft-extend
    graphs at every decode batch size (none with CUDA graphs off, ``graph_max_bs`` 0)."""
    return 2 * decode_graph_batch_sizes(graph_max_bs) if graph_max_bs else 0


def tp_size_problem(heads: int, kv_heads: int, tp_size: int) -> str | None:
    """Why SGLang 0.5.23 cannot shard attention of ``heads`` query and ``kv_heads``
    KV heads over ``tp_size`` GPUs (None when it can): the query heads must divide
    evenly, and the KV heads too, or else be replicated, ``tp_size`` a multiple of
    them (``srt/models/llama.py:183-193``)."""
    if heads % tp_size:
        return f"{heads} attention heads do not divide over {tp_size} GPUs"
    if kv_heads % tp_size and tp_size % kv_heads:
        return (f"{kv_heads} KV heads neither divide over {tp_size} GPUs nor replicate evenly across them "
                f"({tp_size} is not a multiple of {kv_heads})")
    return None


def prefill_graph_buckets(chunked_prefill_size: int) -> int:
    """How many prefill-graph token buckets SGLang captures by default on CUDA
    (cuda_graph_hook.py:480-497, ``max_bs`` = the chunked-prefill size, memory_hook.py:233-236)."""
    steps = ((4, 33, 4), (48, 257, 16), (288, 513, 32), (576, 1025, 64), (1280, 4097, 256),
             (4608, chunked_prefill_size + 1, 512))
    return sum(1 for start, stop, step in steps for size in range(start, stop, step) if size <= chunked_prefill_size)


def sglang_reserve_mib(gpu_mib: float, chunked_prefill_size: int, graph_max_bs: int, tp_size: int = 1) -> float:
    """What SGLang keeps outside the static part for itself when ``--mem-fraction-static``
    is not given (memory_hook.py:304-315; post-capture KV sizing is off by default,
    ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``, srt/environ.py:640).  SGLang's
    ``tp_size * pp_size`` term is ``tp_size`` here: pp is always 1 under CAST
    (``plugin_config.PP_REFUSAL``)."""
    reserve = (512 + max(chunked_prefill_size, 2048) * 1.5 + tp_size / 8 * 1024 + graph_max_bs * 2
               + prefill_graph_buckets(chunked_prefill_size) * 8)
    return max(reserve, 10 * 1024) if gpu_mib > 60 * 1024 else reserve


def default_mem_fraction_static(gpu_mib: float, chunked_prefill_size: int, graph_max_bs: int,
                                tp_size: int = 1) -> float:
    """SGLang's ``mem_fraction_static`` when the flag is not given (memory_hook.py:324-328)."""
    reserve = sglang_reserve_mib(gpu_mib, chunked_prefill_size, graph_max_bs, tp_size)
    return round((gpu_mib - reserve) / gpu_mib, 3)


@dataclass(frozen=True)
class StateMemory:
    """One runtime state's buffers on one rank, in bytes."""

    depth: int
    width: int
    kv_indices: int  # FlashInfer int32 KV indices, verify + draft-extend backends
    custom_masks: int  # FlashInfer uint8 custom masks, verify + draft-extend backends
    graph_outputs: int  # captured hidden-state outputs of the verify and draft-extend graphs

    @property
    def total(self) -> int:
        return self.kv_indices + self.custom_masks + self.graph_outputs


def state_memory(target: ModelShape, draft: ModelShape, depth: int, width: int, graph_bs: int, context: int,
                 eagle3: bool = True) -> StateMemory:
    """The buffers SGLang allocates for one (depth, width) runtime state on one rank
    (see the module docstring for each term's source); none depends on the tensor
    parallel size (indices count tokens, hidden states are replicated).  ``graph_bs``
    0 (CUDA graphs off) allocates no graph state at all."""
    tokens = graph_bs * width
    backends = 2  # verify and draft-extend
    captured = 3 if eagle3 else 1  # target hidden states per verified token
    return StateMemory(
        depth=depth, width=width,
        kv_indices=backends * target.kv_index_wrappers * tokens * context * 4,
        custom_masks=backends * tokens * context,
        graph_outputs=tokens * (captured * target.hidden + draft.hidden) * 2,  # bf16
    )


@dataclass(frozen=True)
class MemoryPlan:
    gpu_bytes: int
    mem_fraction_static: float
    target_weights: int  # per rank
    draft_weights: int  # per rank
    kv_cell: int  # bytes per token on one rank, target + draft
    kv_pool: int  # bytes
    kv_tokens: int
    sglang_reserve: int  # bytes of slack SGLang plans for itself (its default fraction's slack)
    default_fraction: float  # SGLang's default mem_fraction_static for this GPU and these flags
    slack: int  # bytes outside the static part
    states: tuple[StateMemory, ...]
    context_length: int
    max_running_requests: int
    graph_max_bs: int
    tp_size: int = 1

    @property
    def extra_states(self) -> int:
        return sum(s.total for s in self.states)

    @property
    def slack_left(self) -> int:
        """What the slack has beyond SGLang's own reserve (the states are not in it)."""
        return self.slack - self.sglang_reserve

    def problems(self) -> list[str]:
        """Why the launch would not fit (empty when it fits), each with its fix."""
        found = []
        if self.kv_pool <= 0:
            found.append(f"the weights ({_gib(self.target_weights + self.draft_weights)}) and the "
                         f"{len(self.states)} extra runtime states ({_gib(self.extra_states)}) leave no KV pool in "
                         f"the static {self.mem_fraction_static:.3f} of {_gib(self.gpu_bytes)}: pass a shorter "
                         "--context-length, use more GPUs (--tp-size) or re-tune the profile with fewer states")
        elif self.kv_tokens < self.context_length:
            found.append(f"the KV pool holds {self.kv_tokens} tokens, less than one --context-length "
                         f"{self.context_length} request: pass --context-length {self.kv_tokens} or less (the "
                         f"states' buffers grow with it too)")
        if self.slack_left < -MIB:
            found.append(f"--mem-fraction-static {self.mem_fraction_static:.3f} leaves SGLang {_gib(self.slack)} "
                         f"outside the static part, less than its own reserve {_gib(self.sglang_reserve)}: drop the "
                         f"flag (SGLang's default here is {self.default_fraction:.3f}) or pass "
                         f"{self.fitting_fraction():.3f} or less")
        return found

    def fitting_fraction(self) -> float:
        """The largest ``mem_fraction_static`` (3 decimals) whose slack holds SGLang's own reserve."""
        before_load = self.gpu_bytes - CUDA_CONTEXT
        return int((1 - self.sglang_reserve / before_load) * 1000) / 1000

    def report(self) -> str:
        lines = [
            f"GPU memory (per rank)    {_gib(self.gpu_bytes)}" + (f", --tp-size {self.tp_size}"
                                                                 if self.tp_size > 1 else ""),
            f"mem_fraction_static      {self.mem_fraction_static:.3f} (SGLang's default here: "
            f"{self.default_fraction:.3f})",
            f"target weights           {_gib(self.target_weights)}",
            f"draft head weights       {_gib(self.draft_weights)}",
            f"runtime states           {len(self.states)} (depth x width) beyond SGLang's startup state, held "
            f"before the KV pool is sized (graph batch {self.graph_max_bs}, context {self.context_length}):",
        ]
        for s in self.states:
            lines.append(f"  {s.depth:>3} x {s.width:<4} KV indices {_mib(s.kv_indices):>9}, masks "
                         f"{_mib(s.custom_masks):>9}, graph outputs {_mib(s.graph_outputs):>7}")
        captures = captures_per_state(self.graph_max_bs)
        lines += [
            f"states total             {_gib(self.extra_states)}; start-up CUDA-graph captures {captures} per state "
            f"(verify and draft-extend at each graph batch size), {captures * len(self.states)} beyond SGLang's own",
            f"KV pool                  {_gib(self.kv_pool)} = {self.kv_tokens} tokens x {self.kv_cell} B "
            f"(--context-length {self.context_length}: {max(self.kv_tokens, 0) // self.context_length} full-length "
            f"requests; --max-running-requests {self.max_running_requests})",
            f"slack outside static     {_gib(self.slack)}, SGLang's own reserve {_gib(self.sglang_reserve)}",
        ]
        problems = self.problems()
        lines.append("FITS" if not problems else "DOES NOT FIT: " + "; ".join(problems))
        return "\n".join(lines)


def _gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def _mib(value: int) -> str:
    return f"{value / MIB:.0f} MiB"


def extra_state_memory(target: ModelShape, draft: ModelShape, states: Sequence[tuple[int, int]],
                       startup: tuple[int, int], graph_bs: int, context: int, eagle3: bool = True
                       ) -> tuple[StateMemory, ...]:
    """Every state of ``states`` but ``startup`` (SGLang builds and sizes that one itself)."""
    return tuple(state_memory(target, draft, depth, width, graph_bs, context, eagle3)
                 for depth, width in sorted(states) if (depth, width) != startup)


def plan_memory(target: ModelShape, draft: ModelShape, states: Sequence[tuple[int, int]],
                startup: tuple[int, int], launch: LaunchSettings, eagle3: bool = True) -> MemoryPlan:
    """The memory of one rank of a CAST launch with runtime ``states`` ((depth,
    width) pairs, ``startup`` among them).  Weights split evenly over ``tp_size``
    ranks (SGLang shards every projection, the vocabulary-parallel embedding and
    LM head; the replicated norms are negligible)."""
    gpu_bytes = int(launch.gpu_memory_gib * GIB)
    gpu_mib = gpu_bytes / MIB
    chunk = launch.chunked_prefill_size or default_chunked_prefill(gpu_mib)
    graph_bs = decode_graph_max_bs(gpu_mib, launch.max_running_requests, launch.tp_size)
    default_fraction = default_mem_fraction_static(gpu_mib, chunk, graph_bs, launch.tp_size)
    fraction = launch.mem_fraction_static or default_fraction
    before_load = gpu_bytes - CUDA_CONTEXT
    target_weights = target.params() * launch.dtype_bytes // launch.tp_size
    draft_weights = draft_params(draft, eagle3) * launch.dtype_bytes // launch.tp_size
    slack = int(before_load * (1 - fraction))
    extra = extra_state_memory(target, draft, states, startup, graph_bs, launch.context_length, eagle3)
    kv_pool = before_load - target_weights - draft_weights - slack - sum(s.total for s in extra)
    cell = (target.kv_bytes_per_token(launch.dtype_bytes, launch.tp_size)
            + draft.kv_bytes_per_token(launch.dtype_bytes, launch.tp_size))
    return MemoryPlan(gpu_bytes=gpu_bytes, mem_fraction_static=fraction, target_weights=target_weights,
                      draft_weights=draft_weights, kv_cell=cell, kv_pool=kv_pool,
                      kv_tokens=kv_pool // cell if kv_pool > 0 else 0,
                      sglang_reserve=int(before_load * (1 - default_fraction)), default_fraction=default_fraction,
                      slack=slack, states=extra, context_length=launch.context_length,
                      max_running_requests=launch.max_running_requests, graph_max_bs=graph_bs,
                      tp_size=launch.tp_size)


def state_bytes_for(target: ModelShape, draft: ModelShape, launch: LaunchSettings,
                    eagle3: bool = True) -> Callable[[int, int], int]:
    """``(depth, width) -> bytes`` of one runtime state on one GPU of ``launch``
    (what ``state_cover.cover_states`` weighs against its memory cap)."""
    graph_bs = decode_graph_max_bs(launch.gpu_memory_gib * 1024, launch.max_running_requests, launch.tp_size)
    return lambda depth, width: state_memory(target, draft, depth, width, graph_bs, launch.context_length,
                                             eagle3).total
