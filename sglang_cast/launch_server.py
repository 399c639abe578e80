"""``python -m sglang_cast.launch_server``: load the model, build the engine and
serve it over HTTP (see ``--help``).

Startup problems (bad paths, a missing profile for a cost-aware policy, no CUDA)
are one-line errors with exit code 2.  SIGTERM/SIGINT are uvicorn's: stop
accepting, give open requests ``GRACEFUL_SHUTDOWN_SECONDS`` to finish, then
cancel the rest and stop the engine thread.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from .hardware import hardware_label
from .server.launch_args import LaunchArgs, OneLineParser, build_parser, parse_launch_args

if TYPE_CHECKING:
    from .engine import Engine
    from .profile import LoadedProfile
    from .server.startup_calibration import ServedCalibration

GRACEFUL_SHUTDOWN_SECONDS = 30


def resolve_profile(args: LaunchArgs, parser: OneLineParser) -> LoadedProfile | None:
    """``--cast-profile``, else this hardware's profile if there is one (`profile.find_profile`).
    Policies that read no costs (eagle2, vanilla) may run without a profile; cost-aware
    ones (cast, goodput) decide on its tables and refuse to start without them."""
    from .profile import ProfileError, find_profile, load_profile

    path = args.cast_profile
    if path is None:
        label = hardware_label(args.device)
        path = find_profile(label)
        if path is None:
            if args.policy_class.cost_aware:
                parser.error(f"--speculative-algorithm {args.algorithm} needs a CAST profile, and there is none for "
                             f"this hardware (label {label!r}): pass --cast-profile PATH or run "
                             f"`cast-autotune profile`")
            return None
    try:
        loaded = load_profile(path)
    except ProfileError as err:
        parser.error(f"--cast-profile: {err}")
    note_differences(loaded, args.device, served_draft(args))
    return loaded


def served_draft(args: LaunchArgs) -> Path | None:
    """The head this server drafts with: ``--speculative-draft-model-path``, else the
    model's shipped head when the policy drafts (`engine.build.default_draft_path`)."""
    from .engine.build import default_draft_path

    if not args.policy_class.needs_draft:
        return args.draft_path
    return args.draft_path or default_draft_path(args.model_path)


def note_differences(loaded: LoadedProfile, device: str, draft: Path | None) -> None:
    """Say in one line each when the profile was measured on another machine than this
    one, or tuned with another draft head than ``draft``."""
    from .hardware import MachineIdentity
    from .models.digest import weights_digest

    profile = loaded.profile
    notes = [profile.machine_difference(MachineIdentity.current("cuda" if device.startswith("cuda") else "cpu"))]
    if draft is not None and Path(draft).exists():
        notes.append(profile.draft_difference(weights_digest(Path(draft))))
    for note in filter(None, notes):
        logging.getLogger(__name__).warning("%s (%s)", note, loaded.path)


def fall_back_without_draft(args: LaunchArgs) -> LaunchArgs:
    """The default algorithm (CAST) needs a draft head.  When the user asked for
    nothing and the model has none, serve plain decoding and say why, rather than
    refuse to start; an explicit ``--speculative-algorithm`` is never overridden."""
    from .engine.build import default_draft_path

    if args.algorithm_given or args.draft_path is not None or default_draft_path(args.model_path) is not None:
        return args
    logging.getLogger(__name__).warning(
        "no draft head for this model: serving plain decoding (--speculative-algorithm NONE). Pass "
        "--speculative-draft-model-path, or train the embedded model's head with tools/train_draft.py")
    return dataclasses.replace(args, algorithm="NONE")


def sglang_profile(args: LaunchArgs, draft: Path | None, parser: OneLineParser) -> str | None:
    """CAST/GOODPUT inside SGLang: ``--cast-profile``, else this hardware's profile
    tuned through SGLang (``profiles/sglang/<label>.yaml``), else the native engine's
    (`resolve_profile`; the worker's start-up log names the profile it runs)."""
    from .profile import PROFILE_DIR, ProfileError, find_profile, load_profile

    if not args.policy_class.cost_aware or args.cast_profile is not None or draft is None:  # no draft: refused anyway
        return str(args.cast_profile) if args.cast_profile else None
    found = find_profile(hardware_label(args.device), PROFILE_DIR / "sglang")
    if found is None:
        return str(resolve_profile(args, parser).path)
    try:
        note_differences(load_profile(found), args.device, draft)
    except ProfileError:
        pass  # the plugin's own load says what is wrong with it, in SGLang's start-up
    return str(found)


def launch_with_sglang(args: LaunchArgs, parser: OneLineParser) -> None:
    """``--backend sglang``: our flags in SGLang's spelling, checked before SGLang loads.
    Without ``--model-path`` it serves the embedded model with its shipped head."""
    import argparse

    from .sglang_plugin.launch import launch_sglang, validate

    args = fall_back_without_draft(args)
    draft = served_draft(args)
    namespace = argparse.Namespace(
        model_path=args.model_path, speculative_draft_model_path=str(draft) if draft else None,
        speculative_algorithm=args.algorithm, speculative_num_steps=args.shape.max_depth,
        speculative_eagle_topk=args.shape.top_k, speculative_num_draft_tokens=args.shape.num_verify_tokens,
        cast_profile=sglang_profile(args, draft, parser), host=args.host, port=args.port,
        max_running_requests=args.max_running_requests, context_length=args.context_length,
        api_key=args.api_key, admin_api_key=args.admin_api_key, mem_fraction_static=args.mem_fraction_static,
        device=args.device, dtype=args.dtype, tp_size=args.tp_size, dp_size=args.dp_size, pp_size=args.pp_size,
        disable_cuda_graph=not args.cuda_graph,
    )
    try:
        validate(namespace)
        launch_sglang(namespace)
    except ValueError as err:  # launch_sglang's refusals come before SGLang loads anything
        parser.error(str(err))


def build_served_engine(args: LaunchArgs, profile: LoadedProfile | None,
                        parser: OneLineParser) -> tuple[Engine, ServedCalibration]:
    """The engine and its start-up calibration: every torch op of the start-up, so
    `main` runs this on a passing thread (`server.build_thread` says why)."""
    from .engine import EngineArgs, build_engine
    from .engine.build import resolve_settings
    from .server.startup_calibration import calibrate_at_startup

    try:
        base = profile.profile.settings if profile is not None else resolve_settings(args.policy_class, None)
        engine = build_engine(EngineArgs(
            model_path=args.model_path, draft_path=args.draft_path, policy=args.policy,
            settings=args.shape.apply(base), max_batch_size=args.max_running_requests,
            context_length=args.context_length, device=args.device, dtype=args.dtype,
            weight_format=args.weight_format, profile=profile.profile if profile is not None else None,
            compile=args.compile, cuda_graph=args.cuda_graph,
        ))
    except (ValueError, OSError) as err:
        parser.error(str(err))
    charged = profile.profile if profile is not None and args.policy_class.cost_aware else None  # eagle2 reads no costs
    calibration = calibrate_at_startup(args.calibrate, charged, engine,
                                       "cuda" if args.cuda_graph and args.device.startswith("cuda") else None)
    return engine, calibration


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parse_launch_args(argv, parser)
    if args.backend == "sglang":
        launch_with_sglang(args, parser)
        return
    # Imported only now: --help and argument errors answer without loading torch.
    import uvicorn

    from .models.loader import EMBEDDED_NAME
    from .server.app import create_app
    from .server.build_thread import run_on_passing_thread
    from .server.config import LiveGateConfig, ServerConfig

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = fall_back_without_draft(args)
    profile = resolve_profile(args, parser)
    engine, calibration = run_on_passing_thread(lambda: build_served_engine(args, profile, parser))
    model_path = args.model_path or EMBEDDED_NAME
    config = ServerConfig(
        served_model_name=args.served_model_name or model_path, model_path=model_path,
        max_queued_requests=args.max_queued_requests, api_key=args.api_key, admin_api_key=args.admin_api_key,
        max_request_bytes=args.max_request_bytes, max_top_logprobs=args.max_logprobs, profile=profile,
        shape_override=args.shape, calibration=calibration,
        live_gate=LiveGateConfig(switching=args.live_gate,
                                 explore_share=profile.profile.explore_share if profile is not None else 0.0),
        server_args={"host": args.host, "port": args.port, "device": args.device, "dtype": args.dtype,
                     "weight_format": str(engine.runner.target.weight_format),
                     "speculative_algorithm": args.algorithm, "draft_path": args.draft_path},
    )
    logging.getLogger(__name__).info(
        "serving %s with policy %s (profile: %s) on http://%s:%d", model_path, args.policy,
        profile.path if profile is not None else "none", args.host, args.port)
    uvicorn.run(create_app(engine, config), host=args.host, port=args.port, log_level=args.log_level,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)


if __name__ == "__main__":
    main()
