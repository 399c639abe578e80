"""``--backend sglang``: start real SGLang with the CAST plugin and our flags.

``sglang_cast.launch_server`` calls :func:`launch_sglang` with an
``argparse.Namespace`` carrying (SGLang's spelling, ``None`` when not given):

=============================  ===============================================
``model_path``                 target model (HF id or directory); ``None``: the
                               embedded SmolLM2-135M's converted folder
``speculative_draft_model_path``  EAGLE / EAGLE-3 head, required unless NONE
``speculative_algorithm``      ``NONE`` | ``EAGLE`` | ``CAST`` | ``GOODPUT``
``speculative_num_steps``      max depth; CAST/GOODPUT default: the profile's
``speculative_eagle_topk``     candidates per layer; same default
``speculative_num_draft_tokens``  verified tokens incl. root; same default
``cast_profile``               profile YAML path, required for CAST/GOODPUT
``host``, ``port``             where SGLang's HTTP server listens
``max_running_requests``       SGLang's batch limit
``context_length``             SGLang's context length
``mem_fraction_static``        SGLang's ``--mem-fraction-static`` (optional;
                               ``cast-autotune preflight`` prints the value a
                               profile's runtime states need)
``api_key``                    SGLang's ``--api-key``
``admin_api_key``              SGLang's ``--admin-api-key``
``device``                     ``cpu``, ``cuda`` or ``cuda:N`` (``None`` = ``cuda``);
                               ``cpu`` runs SGLang's CPU engine (`cpu_runtime`)
``dtype``                      on ``cpu``: SGLang's ``--dtype`` (``None`` = float32)
``tp_size``                    SGLang's ``--tp-size`` (GPUs per model copy; the
                               profile must be made for it)
``dp_size``                    SGLang's ``--dp-size`` (model copies; each
                               serves the same profile)
``pp_size``                    SGLang's ``--pp-size``: CAST/GOODPUT refuse > 1
=============================  ===============================================

:func:`validate` and :func:`translate_args` never import SGLang, so every
mistake is reported before SGLang, torch's CUDA runtime or a model is loaded.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from ..profile import load_profile
from .cpu_runtime import cpu_server_flags, enter_cpu_engine, intel_amx_kept
from .plugin_config import (DEFAULT_MAX_RUNNING_REQUESTS, POLICY_OF_ALGORITHM, PP_REFUSAL, PROFILE_ENV,
                            ParallelLayout, StaticShape, draft_is_eagle3, require_layout)

ALGORITHMS = ("NONE", "EAGLE", *POLICY_OF_ALGORITHM)
CPU_DEFAULT_CONTEXT = 8192  # the embedded SmolLM2's max_position_embeddings
ENTRY_POINT_GROUP = "sglang.srt.plugins"
SHAPE_FLAGS = (("speculative_num_steps", "--speculative-num-steps", 1),
               ("speculative_eagle_topk", "--speculative-eagle-topk", 1),
               ("speculative_num_draft_tokens", "--speculative-num-draft-tokens", 2))


def _get(args: argparse.Namespace, name: str):
    return getattr(args, name, None)


def _algorithm(args: argparse.Namespace) -> str:
    algorithm = str(_get(args, "speculative_algorithm") or "NONE").upper()
    if algorithm not in ALGORITHMS:
        raise ValueError(f"--speculative-algorithm must be one of {', '.join(ALGORITHMS)} with --backend sglang, "
                         f"got {algorithm!r}")
    return algorithm


@dataclass(frozen=True)
class Device:
    """Where SGLang runs: its CPU engine or a CUDA GPU (``gpu``: ``N`` of ``cuda:N``)."""

    on_cpu: bool
    gpu: int | None = None
    dtype: str = "float32"  # on the CPU: the activations' and weights' dtype (the project's CPU default)

    @classmethod
    def of(cls, args: argparse.Namespace) -> Device:
        device = _get(args, "device") or "cuda"
        if device == "cpu":
            return cls(on_cpu=True, dtype=_get(args, "dtype") or "float32")
        match = re.fullmatch(r"cuda(?::(\d+))?", device)
        if match is None:
            raise ValueError(f"--device must be cpu, cuda or cuda:N with --backend sglang, got {device!r}")
        return cls(on_cpu=False, gpu=int(match.group(1)) if match.group(1) is not None else None)

    def sglang_args(self, algorithm: str) -> list[str]:
        """SGLang's device flags.  On the CPU every algorithm runs the ``intel_amx``
        backend (EAGLE's tree attention needs it, `cpu_runtime`), so plain decoding,
        EAGLE and CAST are timed on the same attention; CAST on a GPU runs FlashInfer's
        custom-mask attention, the backend the plugin is written for."""
        if self.on_cpu:
            return [*cpu_server_flags(), "--dtype", self.dtype]
        argv = ["--device", "cuda"] + (["--base-gpu-id", str(self.gpu)] if self.gpu is not None else [])
        return argv + (["--attention-backend", "flashinfer"] if algorithm in POLICY_OF_ALGORITHM else [])


def _check_positive(args: argparse.Namespace) -> None:
    for name, flag, minimum in (*SHAPE_FLAGS, ("max_running_requests", "--max-running-requests", 1),
                                ("context_length", "--context-length", 1), ("port", "--port", 1),
                                ("tp_size", "--tp-size", 1), ("dp_size", "--dp-size", 1),
                                ("pp_size", "--pp-size", 1)):
        value = _get(args, name)
        if value is not None and (not isinstance(value, int) or value < minimum):
            raise ValueError(f"{flag} must be an integer >= {minimum}, got {value!r}")
    port = _get(args, "port")
    if port is not None and port > 65535:
        raise ValueError(f"--port must be in [1, 65535], got {port}")
    fraction = _get(args, "mem_fraction_static")
    if fraction is not None and (not isinstance(fraction, float) or not 0 < fraction < 1):
        raise ValueError(f"--mem-fraction-static must be a number in (0, 1), got {fraction!r}")


def static_shape(args: argparse.Namespace) -> StaticShape:
    """CAST/GOODPUT: SGLang's startup shape, the flags where given, else the
    smallest shape holding every bucket of the profile; it must fit the profile."""
    profile = Path(_get(args, "cast_profile"))
    return StaticShape.from_flags(load_profile(profile).profile.settings, profile,
                                  num_steps=_get(args, "speculative_num_steps"),
                                  topk=_get(args, "speculative_eagle_topk"),
                                  num_draft_tokens=_get(args, "speculative_num_draft_tokens"))


def validate(args: argparse.Namespace) -> None:
    """Refuse what the SGLang backend cannot run, with a message naming the flag.
    Raises ``ValueError`` (a bad profile raises its ``ProfileError`` subclass)."""
    algorithm = _algorithm(args)
    Device.of(args)
    _check_positive(args)
    given = [flag for name, flag, _ in SHAPE_FLAGS if _get(args, name) is not None]
    draft = _get(args, "speculative_draft_model_path")
    profile = _get(args, "cast_profile")
    if algorithm == "NONE":
        extra = given + (["--speculative-draft-model-path"] if draft else []) + (["--cast-profile"] if profile else [])
        if extra:
            raise ValueError(f"{', '.join(extra)} cannot be used with --speculative-algorithm NONE (no draft tree)")
        return
    if not draft:
        raise ValueError(f"--speculative-algorithm {algorithm} needs --speculative-draft-model-path "
                         "(an EAGLE or EAGLE-3 head)")
    if algorithm == "EAGLE":
        if profile:
            raise ValueError("--cast-profile has no effect with --speculative-algorithm EAGLE (SGLang's own "
                             "fixed trees); use CAST or GOODPUT to run the profile")
        if given and len(given) != len(SHAPE_FLAGS):
            raise ValueError("with --speculative-algorithm EAGLE give all of --speculative-num-steps, "
                             "--speculative-eagle-topk and --speculative-num-draft-tokens, or none (SGLang then "
                             "picks them)")
        return
    if not profile:
        raise ValueError(f"--speculative-algorithm {algorithm} needs --cast-profile PATH (cost tables and "
                         "per-batch tree settings; `cast-autotune profile` writes one)")
    if (_get(args, "pp_size") or 1) > 1:
        raise ValueError(f"--speculative-algorithm {algorithm}: --pp-size must be 1 (got {_get(args, 'pp_size')}): "
                         f"{PP_REFUSAL}")
    static_shape(args)
    layout = ParallelLayout(_get(args, "tp_size") or 1, _get(args, "pp_size") or 1)
    require_layout(load_profile(Path(profile)).profile, layout, profile)


def translate_args(args: argparse.Namespace) -> list[str]:
    """SGLang's command line for ``args`` (call :func:`validate` first)."""
    algorithm, device = _algorithm(args), Device.of(args)
    argv = ["--model-path", model_path(args), *device.sglang_args(algorithm)]
    for name, flag in (("host", "--host"), ("port", "--port"), ("max_running_requests", "--max-running-requests"),
                       ("context_length", "--context-length"), ("api_key", "--api-key"),
                       ("admin_api_key", "--admin-api-key"), ("mem_fraction_static", "--mem-fraction-static"),
                       ("tp_size", "--tp-size"), ("dp_size", "--dp-size"), ("pp_size", "--pp-size")):
        if _get(args, name) is not None:
            argv += [flag, str(_get(args, name))]
    if _get(args, "disable_cuda_graph") and not device.on_cpu:  # on the CPU: always (`cpu_server_flags`)
        argv.append("--disable-cuda-graph")
    if device.on_cpu and _get(args, "mem_fraction_static") is None:
        argv += ["--max-total-tokens", str(cpu_kv_tokens(args))]
    if algorithm == "NONE":
        return argv
    draft = str(args.speculative_draft_model_path)
    if algorithm == "EAGLE":
        argv += ["--speculative-algorithm", "EAGLE3" if draft_is_eagle3(draft) else "EAGLE",
                 "--speculative-draft-model-path", draft]
        for name, flag, _ in SHAPE_FLAGS:
            if _get(args, name) is not None:
                argv += [flag, str(_get(args, name))]
        return argv
    shape = static_shape(args)
    return argv + ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", draft,
                   "--speculative-num-steps", str(shape.num_steps), "--speculative-eagle-topk", str(shape.topk),
                   "--speculative-num-draft-tokens", str(shape.num_draft_tokens)]


def cpu_kv_tokens(args: argparse.Namespace) -> int:
    """The CPU engine's KV pool: every running request at full context.  SGLang's
    default on a CPU is a share of all RAM, which it zero-fills at start-up (64 s of a
    2-core machine's start for ~14 GB; ``--mem-fraction-static`` restores it)."""
    requests = _get(args, "max_running_requests") or DEFAULT_MAX_RUNNING_REQUESTS
    return requests * (_get(args, "context_length") or CPU_DEFAULT_CONTEXT)


def model_path(args: argparse.Namespace) -> str:
    """``--model-path``, or the embedded SmolLM2-135M's converted folder (converted
    on first use: call after :func:`validate`, so a bad flag never waits for it)."""
    if _get(args, "model_path"):
        return str(args.model_path)
    from ..models.loader import resolve_model_dir

    return str(resolve_model_dir(None))


def plugin_environment(args: argparse.Namespace) -> dict[str, str]:
    """Environment SGLang's processes need for the plugin: the profile's path."""
    if _algorithm(args) in POLICY_OF_ALGORITHM:
        return {PROFILE_ENV: str(Path(args.cast_profile).resolve())}
    return {}


def _require_entry_point() -> None:
    """SGLang's scheduler processes find the plugin through package metadata only."""
    from importlib.metadata import entry_points

    if not any(ep.value.startswith("sglang_cast.") for ep in entry_points(group=ENTRY_POINT_GROUP)):
        raise ValueError(f"the {ENTRY_POINT_GROUP!r} entry point of sglang-cast is not installed; reinstall the "
                         "package (pip install -e '.[sglang]') so SGLang's processes load the CAST plugin")


def launch_sglang(args: argparse.Namespace) -> None:
    """Validate, translate and run SGLang's HTTP server in this process (blocks
    until it stops).  Mistakes raise ``ValueError`` before anything is loaded."""
    validate(args)
    on_cpu = Device.of(args).on_cpu
    if on_cpu:
        enter_cpu_engine()  # before anything imports SGLang
    _require_sglang_runtime()
    if _algorithm(args) in POLICY_OF_ALGORITHM:
        _require_entry_point()
        from .contract import ContractError, check_installed_sglang

        try:
            check_installed_sglang()
        except ContractError as err:
            raise ValueError(str(err)) from None
    try:
        argv = translate_args(args)  # converts the embedded model on first use
    except FileNotFoundError as err:  # the embedded model's package missing
        raise ValueError(f"--model-path: {err}") from None
    os.environ.update(plugin_environment(args))
    run_sglang_server(argv, on_cpu)


def sglang_runtime_problem() -> str | None:
    """Why SGLang's server does not import in this Python (its runtime needs .venv-sglang:
    torch 2.14.1 with torchvision, uvloop, ...), or None when it does.  The end-to-end
    tests skip on the same check the launcher refuses on."""
    try:
        importlib.import_module("sglang.srt.entrypoints.http_server")
    except Exception as err:  # noqa: BLE001 - any failure means the same: not SGLang's runtime venv
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def _require_sglang_runtime() -> None:
    """SGLang's server imports here, else one line saying where it does."""
    problem = sglang_runtime_problem()
    if problem is not None:
        raise ValueError(f"--backend sglang: SGLang 0.5.23's server does not import in this Python ({problem}); "
                         "run it with .venv-sglang/bin/python (tools/setup_sglang_env.sh creates it)")


def run_sglang_server(argv: list[str], on_cpu: bool) -> None:
    """SGLang's own ``launch_server`` on ``argv`` (SGLang's flags), in this process;
    on the CPU after `enter_cpu_engine`, with ``intel_amx`` kept (`cpu_runtime`)."""
    from sglang.launch_server import run_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    load_plugins()  # registers CAST/GOODPUT in this process before the args are resolved
    # SGLang resolves the arguments while it starts the server (not in prepare_server_args).
    with intel_amx_kept() if on_cpu else nullcontext():
        server_args = prepare_server_args(argv)
        try:
            run_server(server_args)
        finally:
            kill_process_tree(os.getpid(), include_parent=False)
