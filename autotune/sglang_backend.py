"""``cast-autotune profile/tune --backend sglang``: what is checked before
anything loads, the identifiers its rows are keyed by, its timers, and the
runtime states ``tune`` sizes for the published profile.

The checks run first and cost nothing: an SGLang deployment serves a Hugging Face
target with an EAGLE/EAGLE-3 head, so both paths are required; on a CUDA GPU a
tensor-parallel size must shard both models' heads the way SGLang does and have a
GPU per rank.  Without a GPU (or with ``--device cpu``) SGLang's own CPU engine runs,
one rank, with the project's CPU stand-ins for ``sgl_kernel``
(``sglang_plugin.cpu_runtime``): its runtime must import here (.venv-sglang).  Only
then is SGLang imported, its contract checked and its workers built
(``sglang_cast.sglang_plugin.profile_forwards``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from sglang_cast.cast import CostModel, TraceIteration
from sglang_cast.profile import Profile
from sglang_cast.sglang_plugin.memory_plan import (GIB, LaunchSettings, ModelShape, captures_per_state,
                                                   decode_graph_max_bs, state_bytes_for, tp_size_problem)
from sglang_cast.sglang_plugin.state_cover import StateCap
from sglang_cast.sglang_plugin.step_log import median_speed

from .errors import RUNTIME, AutotuneError
from .grid import ProfileGrid
from .model_configs import read_config_json
from .overhead import at_speed
from .profiler import TimerFactory
from .space import SearchSpace
from .store import Setup, TimedStep

SGLANG = "sglang"
MAX_TP_SIZE = 8  # `profile` runs every rank on this machine, one GPU each: at most a node's 8


@dataclass(frozen=True)
class SGLangModels:
    """The pair an SGLang deployment serves, as paths and as measurement ids."""

    model_path: str
    draft_path: str
    target_id: str
    draft_id: str


def sglang_on_cpu(device: str | None, cuda_available: bool) -> bool:
    """Whether ``--backend sglang`` runs SGLang's CPU engine: asked for, or no GPU here."""
    return device == "cpu" or not cuda_available


def check_sglang_backend(model_path: str | None, draft_path: str | None, device: str | None,
                         cuda_available: bool, tp_size: int = 1, gpu_count: int = 1) -> SGLangModels:
    """Refuse, in one line, what ``--backend sglang`` cannot profile, before any
    model or SGLang module loads.  ``gpu_count``: the CUDA GPUs visible here."""
    models = sglang_models(model_path, draft_path)
    if sglang_on_cpu(device, cuda_available):
        if tp_size != 1:
            raise AutotuneError(f"--tp-size {tp_size}: SGLang's CPU engine runs one rank here (accepted without a "
                                "CUDA GPU: 1); profile a tensor-parallel layout on its GPUs")
        return models
    if tp_size > gpu_count:
        raise AutotuneError(f"--tp-size {tp_size}: every rank runs on its own GPU of this machine and "
                            f"{gpu_count} {'is' if gpu_count == 1 else 'are'} visible; pass --tp-size 1 to "
                            f"{gpu_count} or run on a machine with {tp_size} GPUs")
    if tp_size > 1:
        model_shapes(models, tp_size)
    return models


def enter_sglang_cpu_engine() -> None:
    """Set this process (and the SGLang processes it starts) up for SGLang's CPU
    engine (``cpu_runtime.enter_cpu_engine``: before SGLang is first imported), then
    check that SGLang's runtime imports here, else one line saying where it does."""
    from sglang_cast.sglang_plugin.cpu_runtime import enter_cpu_engine
    from sglang_cast.sglang_plugin.launch import sglang_runtime_problem

    enter_cpu_engine()
    problem = sglang_runtime_problem()
    if problem is not None:
        raise AutotuneError(f"--backend sglang: SGLang 0.5.23's runtime does not import in this Python ({problem}); "
                            "run cast-autotune with .venv-sglang/bin/python (tools/setup_sglang_env.sh creates it)",
                            RUNTIME)


def sglang_models(model_path: str | None, draft_path: str | None) -> SGLangModels:
    """The pair's directories (both required, each with its config.json) and ids."""
    if not model_path:
        raise AutotuneError("--model-path: required with --backend sglang (the Hugging Face model directory the "
                            "deployment serves; the embedded model runs on the native engine only)")
    if not draft_path:
        raise AutotuneError("--draft-path: required with --backend sglang (the EAGLE or EAGLE-3 head directory "
                            "the deployment serves with)")
    from .models import draft_model_id, target_model_id

    target, draft = Path(model_path).expanduser(), Path(draft_path).expanduser()
    for flag, path in (("--model-path", target), ("--draft-path", draft)):
        if not (path / "config.json").is_file():
            raise AutotuneError(f"{flag}: {path} is not a model directory with a config.json")
    # The ids load_model_pair gives the same paths, so `tune --backend sglang` finds these rows.
    return SGLangModels(str(target), str(draft), target_model_id(model_path), draft_model_id(draft))


def model_shapes(models: SGLangModels, tp_size: int) -> tuple[ModelShape, ModelShape]:
    """Both models' shapes from their config.json; refused unless SGLang can shard
    each over ``tp_size`` GPUs (``memory_plan.tp_size_problem``)."""
    shapes = []
    for flag, path in (("--model-path", models.model_path), ("--draft-path", models.draft_path)):
        try:
            shape = ModelShape.from_config(read_config_json(Path(path), flag), f"{flag} {path}/config.json")
        except (ValueError, TypeError) as err:
            raise AutotuneError(str(err)) from None
        problem = tp_size_problem(shape.heads, shape.kv_heads, tp_size)
        if problem:
            raise AutotuneError(f"--tp-size {tp_size}: {flag} {path}: {problem} (SGLang shards attention by heads, "
                                "srt/models/llama.py:183-193)")
        shapes.append(shape)
    return shapes[0], shapes[1]


@dataclass(frozen=True)
class PairIds:
    """What ``tune`` reads of a model pair when nothing runs live (``--confirm-prompts
    0``): the ids its traces and rows are keyed by, so a target too large for the
    native engine on this machine need not be loaded (``ModelPair``'s fields of the
    same names)."""

    target_id: str
    draft_id: str
    dtype: str
    device: torch.device  # where tune runs (the profile's provenance records it)
    random_draft: bool = False  # an SGLang deployment serves a trained head (--draft-path)


def _run_child(queue, target: Callable[..., None], args: tuple) -> None:
    try:
        target(*args)
    except AutotuneError as err:  # reported by the parent as its own one-line error
        queue.put((str(err), err.exit_code))
        raise SystemExit(err.exit_code) from None


def in_child_process(target: Callable[..., None], *args, what: str) -> None:
    """Run ``target(*args)`` in a spawned process and wait for it: what it holds on
    the GPU (SGLang's workers, their KV pools) is given back when it exits, which
    SGLang offers no in-process way to do.  Its ``AutotuneError`` is raised here."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.SimpleQueue()
    process = context.Process(target=_run_child, args=(queue, target, args), name="cast-autotune-child")
    process.start()
    process.join()
    if not queue.empty():
        message, exit_code = queue.get()
        raise AutotuneError(message, exit_code)
    if process.exitcode != 0:
        raise AutotuneError(f"{what}: the process timing them ended with exit code {process.exitcode} (its error "
                            "is printed above); every point measured so far is committed, a rerun resumes", RUNTIME)


def pair_ids(models: SGLangModels, dtype: str, device: str) -> PairIds:
    return PairIds(models.target_id, models.draft_id, dtype, torch.device(device))


def sglang_setup(models: SGLangModels, device_name: str, dtype: str, tp_size: int = 1) -> Setup:
    return Setup.current(device_name, models.target_id, models.draft_id, dtype, backend=SGLANG, tp_size=tp_size)


def profile_launch(models: SGLangModels, grid: ProfileGrid, dtype: str, tp_size: int, on_cpu: bool,
                   new_tokens: int = 0):
    """The SGLang launch both halves of the profile run on: KV reserved for ``grid``'s
    largest context plus ``new_tokens`` decoded (the step design's requests) plus the
    widest forward of either role.  The tree's branching changes which mask bits are
    set, not a forward's cost; the tuner's default top-k lays the trees out as a
    tuned profile would."""
    from sglang_cast.sglang_plugin.profile_forwards import SGLangProfileLaunch

    widest = max(grid.max_n, grid.draft_max_n)
    return SGLangProfileLaunch(models.model_path, models.draft_path, dtype,
                               context_length=max(grid.contexts) + new_tokens + widest,
                               max_batch_size=max(grid.batch_sizes), topk=SearchSpace().top_k, max_n=widest,
                               tp_size=tp_size, on_cpu=on_cpu)


def sglang_timers(models: SGLangModels, grid: ProfileGrid, dtype: str, tp_size: int = 1,
                  on_cpu: bool = False) -> TimerFactory:
    """Build SGLang's workers sized for ``grid`` (one rank per GPU over ``tp_size``
    GPUs, rank 0 in this process; or SGLang's CPU engine) and return timers over them."""
    if importlib.util.find_spec("sglang") is None:
        raise AutotuneError("--backend sglang: SGLang is not installed in this environment "
                            "(pip install -e '.[sglang]' on the GPU machine)", RUNTIME)
    from sglang_cast.sglang_plugin.contract import ContractError, check_installed_sglang

    try:
        check_installed_sglang()
    except ContractError as err:
        raise AutotuneError(f"--backend sglang: {err}", RUNTIME) from None
    from sglang_cast.sglang_plugin.profile_forwards import SGLangRoleTimer, start_ranks

    launch = profile_launch(models, grid, dtype, tp_size, on_cpu)
    forwards, followers = start_ranks(launch)
    return lambda role, max_batch, capacity: SGLangRoleTimer(forwards, role, followers, launch.torch_device)


class SGLangDesignTimer:
    """``autotune.overhead.StepTimer`` over SGLang engines running the CAST worker
    (``sglang_plugin.profile_steps``): its logged iterations become stored steps, at
    the forward tables' speed (``overhead.at_speed``) as the native timer stores
    them.  The run's speed is read inside it, no SGLang forward running outside the
    engines: the median over its steps of the verify forward, timed on its own by the
    worker, over its table charge.  Without it a machine faster than when its forwards
    were profiled fits less host work than it does."""

    def __init__(self, timer) -> None:
        self.timer = timer

    def time(self, batch_size: int, shape, texts: list[str], new_tokens: int, design) -> list[TimedStep]:
        logged = self.timer.time(shape, texts, new_tokens, design.warmup, design.steps)
        if not logged:
            return []
        speed = median_speed(logged)
        if speed is None:
            raise AutotuneError(f"SGLang's step design at B={batch_size}: the worker logged no timed verify forward, "
                                "so the machine's drift since profiling cannot be read", RUNTIME)
        return at_speed([TimedStep.of(step) for step in logged], speed)

    def close(self) -> None:
        self.timer.close()


def sglang_step_timer(models: SGLangModels, grid: ProfileGrid, dtype: str, tp_size: int, forwards: CostModel,
                      new_tokens: int, on_cpu: bool = False, engine_factory=None) -> SGLangDesignTimer:
    """The step design's timer: SGLang engines sized for ``grid`` and for requests
    of up to ``new_tokens`` new tokens (``engine_factory``: tests pass a stand-in for
    ``sglang.Engine``)."""
    from sglang_cast.sglang_plugin.profile_steps import SGLangStepTimer, start_engine

    launch = profile_launch(models, grid, dtype, tp_size, on_cpu, new_tokens)
    return SGLangDesignTimer(SGLangStepTimer(launch, forwards, engine_factory=engine_factory or start_engine))


@dataclass(frozen=True)
class RuntimeStateSizing:
    """How ``tune --backend sglang`` sizes the published profile's runtime states:
    each state's memory on one GPU of the deployment (``memory_plan``), that GPU's
    memory and the cap the cover respects (``sglang_plugin.tune_states``)."""

    state_bytes: Callable[[int, int], int]  # (depth, width) -> bytes on one GPU
    gpu_bytes: int
    cap: StateCap
    captures_per_state: int  # start-up CUDA-graph captures each state beyond SGLang's own adds
    described: str  # what the states were weighed for
    # Whether the worker grafts a bucket's prompt-lookup branch there: SGLang's CPU
    # engine never overlaps; on GPUs SGLang overlaps by default, and under overlap the
    # branch is off (``sglang_plugin.lookup_branch``), so tune searches none.
    branch_runs: bool = False

    def size(self, profile: Profile, tp_size: int, traces: Sequence[TraceIteration], traces_described: str
             ) -> Profile:
        """``profile`` for ``--tp-size tp_size`` with the states the CAST policy
        reaches on ``traces`` (``provenance.sglang``)."""
        from sglang_cast.sglang_plugin.tune_states import with_runtime_states

        layout = {"parallel": {"tp_size": tp_size, "pp_size": 1}}
        profile = replace(profile, provenance={**profile.provenance, "sglang": layout})
        try:
            return with_runtime_states(profile, traces, self.state_bytes, self.gpu_bytes, self.cap, policy="cast",
                                       traces_described=f"{traces_described}; states weighed for {self.described}")
        except ValueError as err:
            raise AutotuneError(f"--max-states/--max-state-memory: {err}") from None


def cpu_state_sizing(models: SGLangModels, cap: StateCap) -> RuntimeStateSizing:
    """The sizing for SGLang's CPU engine: a runtime state there holds no CUDA graph
    and no attention workspace (the ``intel_amx`` backend plans per forward), so only
    the cap's count and coverage bind; the memory weighed against is this host's RAM."""
    from .models import portable_ref

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return RuntimeStateSizing(lambda depth, width: 0, ram, cap, 0, f"{portable_ref(models.model_path)} + head "
                              f"{portable_ref(models.draft_path)} on SGLang's CPU engine", branch_runs=True)


def states_report(profile: Profile, sizing: RuntimeStateSizing) -> str:
    """What ``tune`` chose for ``profile`` (sized by ``sizing``), in three lines."""
    from sglang_cast.sglang_plugin.plugin_config import SGLangSection, StaticShape

    section = SGLangSection.of(profile)
    replay = profile.provenance["sglang"]["replay"]
    startup = StaticShape.covering(profile.settings).startup_state
    beyond = [s for s in section.runtime_states if s != startup]
    captures = len(beyond) * sizing.captures_per_state
    names = ", ".join(f"{d}x{w}" + (" (startup)" if (d, w) == startup else "") for d, w in section.runtime_states)
    return "\n".join([
        f"SGLang runtime states (depth x width) for --tp-size {section.parallel.tp_size}: "
        f"{len(section.runtime_states)} of at most {section.cap.max_states}: {names}",
        f"  {replay['exact']} of {replay['iterations']} replayed iterations ({replay['coverage']:.1%}; wanted "
        f"{section.cap.coverage:.0%}) run in exactly their own state, the rest in a larger built one",
        f"  {len(beyond)} beyond SGLang's startup state: {replay['state_bytes'] / GIB:.2f} GiB per GPU (at most "
        f"{section.cap.max_memory_share:.0%} of {sizing.gpu_bytes / GIB:g} GiB), {captures} extra start-up "
        f"CUDA-graph captures ({sizing.captures_per_state} each: verify and draft-extend at every graph batch size)",
    ])


def runtime_state_sizing(models: SGLangModels, gpu_memory_gib: float, context_length: int | None,
                         max_running_requests: int, tp_size: int, cap: StateCap) -> RuntimeStateSizing:
    """The sizing for the checkpoints ``models`` names (their config.json) at
    ``context_length`` (default: the target's ``max_position_embeddings``, SGLang's
    default) on GPUs of ``gpu_memory_gib``."""
    from sglang_cast.sglang_plugin.plugin_config import draft_is_eagle3

    target, draft = model_shapes(models, tp_size)
    if context_length is None:
        context_length = read_config_json(Path(models.model_path), "--model-path").get("max_position_embeddings")
        if not isinstance(context_length, int) or context_length < 1:
            raise AutotuneError("--serve-context-length: not given and --model-path's config.json has no "
                                "max_position_embeddings")
    launch = LaunchSettings(gpu_memory_gib=gpu_memory_gib, context_length=context_length,
                            max_running_requests=max_running_requests, tp_size=tp_size)
    graph_bs = decode_graph_max_bs(gpu_memory_gib * 1024, max_running_requests, tp_size)
    eagle3 = draft_is_eagle3(models.draft_path)
    from .models import portable_ref

    described = (f"{portable_ref(models.model_path)} + {'EAGLE-3' if eagle3 else 'EAGLE'} head "
                 f"{portable_ref(models.draft_path)} at "
                 f"{context_length} context, {max_running_requests} running requests, {gpu_memory_gib:g} GiB per "
                 f"GPU, --tp-size {tp_size}")
    return RuntimeStateSizing(state_bytes_for(target, draft, launch, eagle3), int(gpu_memory_gib * GIB), cap,
                              captures_per_state(graph_bs), described)


def sglang_live_gate(models: SGLangModels, dtype: str, tp_size: int, on_cpu: bool, texts: Sequence[str],
                     max_new_tokens: int, max_batch_size: int, space: SearchSpace):
    """``tune --backend sglang``'s live gate (``sglang_gate.SGLangGate``): SGLang engines
    on ``models`` serving up to ``max_batch_size`` requests of the chat-formatted
    ``texts``, each context holding the longest of them, ``max_new_tokens`` and what a
    speculative step of any tree of ``space`` takes ahead (``speculative_reserve``).
    Call after :func:`enter_sglang_cpu_engine` on the CPU."""
    from sglang_cast.models.loader import load_tokenizer
    from sglang_cast.sglang_plugin.live_runs import SGLangLiveRuns
    from sglang_cast.sglang_plugin.profile_forwards import SGLangProfileLaunch

    from .models import chat_prompt
    from .sglang_gate import SGLangGate

    tokenizer = load_tokenizer(Path(models.model_path))
    longest = max(len(tokenizer.encode(chat_prompt(tokenizer, text))) for text in texts)
    launch = SGLangProfileLaunch(models.model_path, models.draft_path, dtype,
                                 context_length=longest + max_new_tokens + speculative_reserve(space),
                                 max_batch_size=max_batch_size, topk=space.top_k, max_n=space.max_tokens,
                                 tp_size=tp_size, on_cpu=on_cpu)
    return SGLangGate(SGLangLiveRuns(launch), lambda text: chat_prompt(tokenizer, text))


def speculative_reserve(space: SearchSpace) -> int:
    """Context a request needs beyond its tokens for a speculative step of any tree in
    ``space``: SGLang reserves twice ``max(top-k x draft layers, verified tokens)`` ahead
    of every decode step (``mem_cache/allocation_sizing.py:64``; the lookup branch's
    layers are draft layers of the startup shape), and a step commits up to its
    verified tokens past ``max_new_tokens``.  A context without it overflowed SGLang's
    ``req_to_token`` row on the first gate run (2026-12-01)."""
    layers = space.max_depth + space.lookup_depth
    return 2 * max(space.top_k * layers, space.max_tokens) + space.max_tokens
