"""Every piece of SGLang the plugin relies on, and a check that it is there.

The plugin subclasses SGLang's EAGLE v2 worker, re-classes its draft worker,
calls a dozen of its functions by keyword and reads or sets private attributes.
None of that is a public API, so an SGLang upgrade could break it silently, or
fail deep inside a scheduler process after the weights are loaded.  This module
is the one list of what the plugin touches (written against SGLang
``SUPPORTED_VERSION``); :func:`check_installed_sglang` runs at registration and
at launch and refuses, in one line naming what is missing, an SGLang that does
not provide it.

Three kinds of entries:

* :class:`Signature` — a function, method or class the plugin calls (or
  overrides) and the parameter names it passes or receives;
* :class:`Fields` — attributes of SGLang objects the plugin reads or sets, found
  as ``self.<name> =`` assignments in the class or one of its bases (or as
  dataclass fields);
* :class:`Present` — names the plugin only needs to exist (enum members,
  context managers called without arguments).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

SUPPORTED_VERSION = "0.5.23"


@dataclass(frozen=True)
class Signature:
    module: str
    name: str  # dotted inside the module: "EAGLEWorkerV2.build_adaptive_runtime_state"
    params: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.module}.{self.name}"

    def lacks(self, module: ModuleType) -> list[str]:
        """The name if ``module`` has no such callable, else each parameter it does not take."""
        try:
            target = _lookup(module, self.name)
        except AttributeError:
            return [self.label]
        if not self.params:
            return []
        have = _parameter_names(target)
        return [f"{self.label}(... {name}=...)" for name in self.params if name not in have]


@dataclass(frozen=True)
class Fields:
    module: str
    cls: str
    names: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.module}.{self.cls}"

    def lacks(self, module: ModuleType) -> list[str]:
        """The class if ``module`` has no such class, else each attribute it never assigns."""
        try:
            cls = _lookup(module, self.cls)
        except AttributeError:
            return [self.label]
        have = _assigned_attributes(cls)
        return [f"{self.label}.{name} (attribute)" for name in self.names if name not in have]


@dataclass(frozen=True)
class Present:
    module: str
    names: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.module}.{', '.join(self.names)}"

    def lacks(self, module: ModuleType) -> list[str]:
        """Each name ``module`` does not have."""
        missing = []
        for name in self.names:
            try:
                _lookup(module, name)
            except AttributeError:
                missing.append(f"{self.module}.{name}")
        return missing


_SPEC = "sglang.srt.speculative"
_V2 = f"{_SPEC}.eagle_worker_v2"

CONTRACT: tuple[Signature | Fields | Present, ...] = (
    # register.py: the algorithm registry
    Signature(f"{_SPEC}.spec_info", "SpeculativeAlgorithm.register",
              ("name", "supports_overlap", "validate_server_args", "spec_class")),
    Signature(f"{_SPEC}.spec_registry", "get_spec", ("name",)),
    Present(f"{_SPEC}.spec_info", ("SpeculativeAlgorithm.EAGLE", "SpeculativeAlgorithm.EAGLE3")),
    # spec.py: CastSpecAlgo (a CustomSpecAlgo) answers these questions SGLang asks of an
    # algorithm, by asking the built-in EAGLE member the same
    Signature(f"{_SPEC}.spec_registry", "CustomSpecAlgo.__init__"),
    *(Signature(f"{_SPEC}.spec_info", f"SpeculativeAlgorithm.{method}") for method in (
        "is_eagle", "is_eagle3", "supports_mixed_chunk", "supports_grammar_overlap", "has_draft_kv", "need_topk",
        "carries_draft_hidden_states", "get_platform_worker_cls")),
    Signature(f"{_SPEC}.spec_info", "SpeculativeAlgorithm.create_future_map",
              ("device", "req_to_token_pool", "needs_cpu_seq_lens", "needs_confidence_relay")),
    Signature(f"{_SPEC}.spec_info", "SpeculativeAlgorithm.build_disagg_draft_input",
              ("batch", "last_tokens_tensor", "future_map")),
    Signature(f"{_SPEC}.spec_registry", "CustomSpecAlgo.handle_server_args", ("server_args",)),
    Signature("sglang.srt.managers.overlap_utils", "FutureMap",
              ("device", "req_to_token_pool", "needs_cpu_seq_lens", "needs_confidence_relay")),
    Signature("sglang.srt.runtime_context", "get_spec"),
    Signature("sglang.srt.runtime_context", "get_exec"),
    Signature("sglang.srt.runtime_context", "get_parallel"),
    # worker.py + lookup_branch.py: the prompt-lookup branch reads committed contexts, off under overlap scheduling
    Signature("sglang.srt.runtime_context", "get_schedule"),
    Fields("sglang.srt.managers.schedule_batch", "Req", ("origin_input_ids_unpadded", "output_ids")),
    Fields("sglang.srt.managers.schedule_batch", "ScheduleBatch", ("reqs",)),
    Signature("sglang.srt.distributed.parallel_state", "GroupCoordinator.broadcast", ("input_", "src")),
    Fields("sglang.srt.distributed.parallel_state", "GroupCoordinator", ("rank_in_group", "world_size")),
    # spec.py / launch.py: server arguments read, the launcher's entry points
    Signature("sglang.srt.server_args", "ServerArgs", (
        "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
        "speculative_num_draft_tokens", "attention_backend", "device", "tp_size", "pp_size", "dp_size",
        "speculative_use_rejection_sampling", "speculative_adaptive", "enable_multi_layer_eagle",
        "max_running_requests", "context_length", "mem_fraction_static", "chunked_prefill_size", "model_path",
        "attn_dp_size")),
    Signature("sglang.srt.server_args", "prepare_server_args", ("argv",)),
    Signature("sglang.launch_server", "run_server", ("server_args",)),
    Signature("sglang.srt.plugins", "load_plugins"),
    Signature("sglang.srt.utils", "kill_process_tree", ("parent_pid", "include_parent")),
    Signature("sglang.srt.utils.common", "get_device_memory_capacity", ("device",)),
    # worker.py: the EAGLE v2 worker subclassed, the draft worker re-classed
    Signature(_V2, "EAGLEWorkerV2.__init__", ("server_args", "gpu_id", "nccl_port", "target_worker")),
    Signature(_V2, "EAGLEWorkerV2.init_cuda_graphs"),
    Signature(_V2, "EAGLEWorkerV2.build_adaptive_runtime_state",
              ("speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs")),
    Signature(_V2, "EAGLEWorkerV2.apply_runtime_state", ("state",)),
    Signature(_V2, "EAGLEWorkerV2.activate_step_by_batch", ("batch_size",)),
    Signature(_V2, "EAGLEWorkerV2._build_trivial_verify_input", ("batch",)),
    # worker.py + step_log.py: the step log times every decode call (profile --backend sglang only)
    Signature(_V2, "EAGLEWorkerV2.forward_batch_generation", ("batch",)),
    Signature("sglang.srt.managers.tp_worker", "TpModelWorker.forward_batch_generation", ("is_verify",)),
    Fields("sglang.srt.managers.utils", "GenerationBatchResult", ("accept_lens",)),
    Fields("sglang.srt.managers.schedule_batch", "ScheduleBatch", ("forward_mode", "is_extend_in_batch",
                                                                   "seq_lens_cpu")),
    Present("sglang.srt.model_executor.forward_batch_info", ("ForwardMode.is_extend", "ForwardMode.is_idle")),
    Fields(_V2, "EAGLEWorkerV2", ("_draft_worker", "_target_worker", "speculative_algorithm", "speculative_num_steps",
                                  "speculative_num_draft_tokens", "topk")),
    Signature(_V2, "EagleDraftWorker._capture_cuda_graphs"),
    Signature(_V2, "EagleDraftWorker.draft", ("batch", "with_topology")),
    Signature(_V2, "EagleDraftWorker._rebuild_topk1_chain_buffers"),
    Fields(_V2, "EagleDraftWorker", (
        "speculative_num_steps", "speculative_num_draft_tokens", "topk", "draft_attn_backend", "cuda_graph_runner",
        "draft_extend_attn_backend", "cuda_graph_runner_for_draft_extend", "hot_token_id", "tree_mask_mode",
        "req_to_token_pool", "target_worker", "draft_runner", "parallel_layout", "device")),
    Signature("sglang.srt.model_executor.model_runner", "ModelRunner._get_attention_backend",
              ("init_new_workspace",)),
    Fields("sglang.srt.model_executor.model_runner", "ModelRunner",
           ("attn_backend", "decode_cuda_graph_runner", "model_config")),
    Fields("sglang.srt.configs.model_config", "ModelConfig", ("hf_config", "context_len")),
    Signature(f"{_SPEC}.adaptive_runtime_state", "SpecRuntimeState", (
        "speculative_num_steps", "speculative_num_draft_tokens", "draft_attn_backend", "cuda_graph_runner",
        "target_attn_backend", "target_graph_runner", "draft_extend_attn_backend",
        "cuda_graph_runner_for_draft_extend")),
    Signature(f"{_SPEC}.eagle_worker_common", "prepare_for_draft", (
        "draft_input", "req_to_token_pool", "batch", "cuda_graph_runner", "draft_model_runner", "topk",
        "num_steps")),
    Signature(f"{_SPEC}.eagle_worker_common", "build_eagle_verify_input", (
        "batch", "draft_input", "parent_list", "top_scores_index", "draft_tokens", "draft_probs", "target_worker",
        "topk", "num_steps", "num_draft_tokens", "tree_mask_mode", "device")),
    Signature(f"{_SPEC}.eagle_utils", "per_step_draft_out_cache_loc"),
    Signature(f"{_SPEC}.spec_utils", "renorm_draft_probs"),
    Signature(f"{_SPEC}.spec_utils", "draft_tp_context", ("layout",)),
    Signature("sglang.srt.utils.common", "fast_topk", ("values", "topk", "dim")),
    Signature("sglang.srt.model_executor.forward_context", "ForwardContext", ("attn_backend",)),
    Signature("sglang.srt.model_executor.forward_context", "forward_context", ("forward_batch",)),
    Signature("sglang.srt.model_executor.cuda_graph_config", "check_cuda_graph_backend"),
    Present("sglang.srt.model_executor.cuda_graph_config", ("Phase.DECODE", "Backend.DISABLED")),
    Present("sglang.srt.layers.moe.utils", ("speculative_moe_backend_context", "speculative_moe_a2a_backend_context")),
    Present(f"{_SPEC}.eagle_info", ("EagleDraftInput", "EagleVerifyInput")),
    # worker.CastVerifyInput overrides the bound SGLang sizes accept_index by
    Present(f"{_SPEC}.eagle_info", ("EagleVerifyInput.max_tree_depth",)),
    # cpu_runtime.intel_amx_kept: the platform fact SGLang's CPU backend fallback reads
    Signature("sglang.srt.runtime_context", "override_platform"),
    Present("sglang.srt.model_executor.forward_batch_info", ("ForwardBatch",)),
    # profile_forwards.py: `cast-autotune profile --backend sglang` builds SGLang's workers as its
    # scheduler does and times their verify and draft-extend forwards
    Signature("sglang.benchmark.one_batch", "_init_process_global_configs"),
    Signature("sglang.benchmark.one_batch", "extend", ("reqs", "model_runner")),
    Signature("sglang.srt.configs.model_config", "ModelConfig.from_server_args", ("server_args",)),
    Signature("sglang.srt.distributed", "bootstrap.init_parallel_runtime", ("server_args", "device", "dist_port")),
    Signature("sglang.srt.distributed", "bootstrap.init_layer_runtime", ("model_config",)),
    Signature("sglang.srt.entrypoints.engine", "_set_envs_and_config", ("server_args",)),
    Signature("sglang.srt.runtime_context", "publish", ("server_args", "role", "ranks")),
    Signature("sglang.srt.runtime_context", "SpawnRanks", ("world_rank", "gpu_id")),
    Signature("sglang.srt.runtime_context", "spawn_world_rank", ("server_args", "tp_rank", "pp_rank")),
    Signature("sglang.srt.server_args", "PortArgs.init_new", ("server_args",)),
    Signature("sglang.srt.server_args", "ServerArgs.resolve_once"),
    Signature(f"{_SPEC}.spec_info", "SpeculativeAlgorithm.from_string"),
    Signature(f"{_SPEC}.spec_info", "SpeculativeAlgorithm.create_worker", ("server_args",)),
    Signature("sglang.srt.managers.tp_worker", "TpModelWorker", ("server_args", "gpu_id", "nccl_port")),
    Signature("sglang.srt.managers.tp_worker", "TpModelWorker.alloc_memory_pool", ("draft_parallel_layout",)),
    Present("sglang.srt.managers.tp_worker", (
        "TpModelWorker.model_runner", "TpModelWorker.preloaded_weights_bytes", "TpModelWorker.get_memory_pool",
        "TpModelWorker.init_attention_backends", "TpModelWorker.init_cuda_graphs")),
    Present(_V2, ("EAGLEWorkerV2.preloaded_weights_bytes", "EAGLEWorkerV2.draft_parallel_layout",
                  "EAGLEWorkerV2.alloc_memory_pool", "EAGLEWorkerV2.init_attention_backends")),
    Signature("sglang.srt.model_executor.model_runner", "ModelRunner.forward", ("forward_batch",)),
    Signature("sglang.srt.model_executor.model_runner", "ModelRunner.account_preloaded_weights",
              ("preloaded_weights_bytes",)),
    Fields("sglang.srt.model_executor.model_runner", "ModelRunner",
           ("req_to_token_pool", "token_to_kv_pool_allocator", "memory_pool_config")),
    Signature("sglang.srt.managers.schedule_batch", "Req",
              ("rid", "origin_input_text", "origin_input_ids", "sampling_params")),
    Fields("sglang.srt.managers.schedule_batch", "Req", ("full_untruncated_fill_ids", "logprob_start_len",
                                                         "extend_end")),
    Signature("sglang.srt.managers.schedule_batch", "ScheduleBatch.batch_size"),
    Fields("sglang.srt.managers.schedule_batch", "ScheduleBatch",
           ("spec_info", "spec_algorithm", "seq_lens", "req_pool_indices", "out_cache_loc")),
    Signature("sglang.srt.sampling.sampling_params", "SamplingParams", ("temperature", "max_new_tokens")),
    Signature(f"{_SPEC}.eagle_info", "EagleDraftInput", ("bonus_tokens",)),
    Signature(f"{_SPEC}.eagle_info", "EagleDraftExtendInput", (
        "hidden_states", "num_correct_drafts", "num_accept_tokens", "num_tokens_per_req",
        "num_tokens_for_logprob_per_req")),
    Signature(f"{_SPEC}.eagle_utils", "eagle_prepare_for_decode", ("batch",)),
    Signature(f"{_SPEC}.eagle_utils", "eagle_prepare_for_verify",
              ("verify_input", "req_to_token_pool", "batch", "target_worker")),
    Signature(f"{_SPEC}.eagle_utils", "get_draft_input_from_target_hidden_dim", ("model_runner",)),
    Signature(f"{_SPEC}.eagle_worker_common", "prepare_for_draft_extend", (
        "draft_extend_input", "batch", "predict", "num_draft_tokens", "draft_model_runner", "cuda_graph_runner",
        "return_hidden_states_before_norm")),
    Signature("sglang.kernels.ops.speculative.cache_locs", "assign_extend_cache_locs_uniform_func", (
        "req_pool_indices", "req_to_token", "start_offset", "batch_size", "draft_token_num", "device")),
    # profile_steps.py: the step design runs SGLang's offline engine, one per tree
    Present("sglang.srt.entrypoints.engine", ("Engine",)),
    Signature("sglang.srt.entrypoints.engine", "Engine.generate", ("prompt", "sampling_params")),
    Signature("sglang.srt.entrypoints.engine", "Engine.shutdown"),
)


class ContractError(RuntimeError):
    """The installed SGLang cannot serve the plugin: part of the contract is
    missing, a module fails to import, or SGLang is not installed at all."""


@dataclass(frozen=True)
class ImportFailure:
    """A contract module whose import raised something other than "this SGLang
    has no such module": a missing third-party dependency, or any other error
    (a torch/torchvision mismatch raises ``RuntimeError``, a broken CUDA library
    ``OSError``)."""

    module: str
    error: BaseException

    @property
    def missing_dependency(self) -> str | None:
        """The top-level non-SGLang module the import could not find, if that is the cause."""
        if isinstance(self.error, ModuleNotFoundError) and self.error.name:
            top = self.error.name.split(".")[0]
            return None if top == "sglang" else top
        return None

    def cause(self) -> str:
        """The exception's type and the first line of its message."""
        text = str(self.error).splitlines()
        return f"{type(self.error).__name__}: {text[0]}" if text else type(self.error).__name__


@dataclass(frozen=True)
class ContractReport:
    """What the SGLang reachable from one interpreter lacks, and why."""

    missing: tuple[str, ...]  # parts of the contract absent from modules that import
    failed_imports: tuple[ImportFailure, ...]
    version: str | None  # the installed distribution's version; None: not installed
    interpreter: str

    def message(self) -> str | None:
        """One line naming every cause and the fix that matches it (``None`` when all is well)."""
        pip = f"{self.interpreter} -m pip install"
        if self.version is None:
            return (f"SGLang is not installed for {self.interpreter}; the CAST plugin needs SGLang "
                    f"{SUPPORTED_VERSION}: {pip} 'sglang=={SUPPORTED_VERSION}'")
        parts = [self._import_failures(pip)] if self.failed_imports else []
        if self.missing:
            lacks = f"it lacks what the CAST plugin uses: {', '.join(self.missing)}; "
            if self.version == SUPPORTED_VERSION:
                parts.append(lacks + f"{SUPPORTED_VERSION} is the supported version, so this copy differs from the "
                             f"release (edited or partly installed): {pip} --force-reinstall --no-deps "
                             f"'sglang=={SUPPORTED_VERSION}'")
            else:
                parts.append(lacks + f"the plugin supports SGLang {SUPPORTED_VERSION} "
                             f"({pip} 'sglang=={SUPPORTED_VERSION}')")
        return f"SGLang {self.version} for {self.interpreter}: " + "; ".join(parts) if parts else None

    def _import_failures(self, pip: str) -> str:
        """Failures grouped by cause (one torchvision error breaks many modules at once)."""
        by_cause: dict[str, list[ImportFailure]] = {}
        for failure in self.failed_imports:
            by_cause.setdefault(failure.cause(), []).append(failure)
        lines = []
        for cause, failures in by_cause.items():
            modules = ", ".join(f.module for f in failures)
            dependency = failures[0].missing_dependency
            if dependency is not None:
                fix = (f"{dependency!r} is a dependency of SGLang, not part of it: install it for this interpreter "
                       f"({pip} {dependency}, or the package that provides it)")
            else:
                fix = ("not a missing part of SGLang: fix that error in this environment (reinstalling SGLang "
                       "will not)")
            lines.append(f"importing {modules} raised {cause}; {fix}")
        return "; ".join(lines)


def _lookup(module: ModuleType, dotted: str):
    target = module
    for part in dotted.split("."):
        target = getattr(target, part)
    return target


def _parameter_names(target) -> set[str]:
    return set(inspect.signature(target).parameters)


def _assigned_attributes(cls: type) -> set[str]:
    """``self.<name>`` assignments (and dataclass/annotated fields) in ``cls`` and its bases."""
    names: set[str] = set()
    for klass in inspect.getmro(cls):
        if klass is object:
            continue
        names |= set(getattr(klass, "__annotations__", {}))
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        names |= set(re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=(?!=)", source))
    return names


def _entry_problems(entry: Signature | Fields | Present, module: ModuleType) -> list[str]:
    """What of ``entry`` ``module`` lacks; an entry whose inspection itself raises
    is reported with the error, never lets it escape."""
    try:
        return entry.lacks(module)
    except Exception as err:  # noqa: BLE001 (any failure is reported, per entry)
        return [f"{entry.label} (inspecting it raised {type(err).__name__}: {err})"]


def _is_absent_sglang_module(error: BaseException) -> bool:
    """Whether ``error`` says SGLang itself has no such module (not a dependency missing)."""
    return (isinstance(error, ModuleNotFoundError)
            and (error.name is None or error.name.split(".")[0] == "sglang"))


def contract_report(import_module: Callable[[str], ModuleType] = importlib.import_module,
                    version: str | None = None, interpreter: str | None = None) -> ContractReport:
    """Check :data:`CONTRACT` against the SGLang reachable through ``import_module``.
    Every module is imported on its own, and any exception its import raises is
    recorded with that module: one failure never hides the others."""
    missing: list[str] = []
    failures: list[ImportFailure] = []
    modules: dict[str, ModuleType | None] = {}
    for entry in CONTRACT:
        if entry.module not in modules:
            try:
                modules[entry.module] = import_module(entry.module)
            except Exception as err:  # noqa: BLE001 (every per-module failure is reported)
                modules[entry.module] = None
                if _is_absent_sglang_module(err):
                    missing.append(f"module {err.name or entry.module}")
                else:
                    failures.append(ImportFailure(entry.module, err))
        module = modules[entry.module]
        if module is not None:
            missing += _entry_problems(entry, module)
    return ContractReport(tuple(missing), tuple(failures), _installed_version() if version is None else version,
                          interpreter or sys.executable)


def _installed_version() -> str | None:
    """The installed ``sglang`` distribution's version, read from its metadata
    (importing ``sglang`` may be what fails)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def contract_problems(import_module: Callable[[str], ModuleType] = importlib.import_module) -> list[str]:
    """What of :data:`CONTRACT` the SGLang reachable through ``import_module`` lacks,
    and every module whose import failed (with its error)."""
    report = contract_report(import_module, version=SUPPORTED_VERSION)
    return [*report.missing, *(f"module {f.module} (import raised {f.cause()})" for f in report.failed_imports)]


def check_installed_sglang(import_module: Callable[[str], ModuleType] = importlib.import_module,
                           version: str | None = None, interpreter: str | None = None) -> None:
    """Raise :class:`ContractError` (one line naming the cause, the interpreter,
    the installed version and the matching fix) when SGLang cannot serve the plugin."""
    message = contract_report(import_module, version, interpreter).message()
    if message is not None:
        raise ContractError(message)
