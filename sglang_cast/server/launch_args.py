"""Command line of ``python -m sglang_cast.launch_server``.

Flags use SGLang's spelling wherever SGLang has the flag, so a command line
written for SGLang's EAGLE server carries over.  Every mistake is a one-line
error and exit code 2 (argparse's convention), never a traceback.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..flags import OneLineParser, float_between, int_at_least, int_in
from .config import (DEFAULT_MAX_TOP_LOGPROBS, MIN_REQUEST_BYTES, REQUEST_BYTES_PER_CONTEXT_TOKEN,
                     ShapeOverride)

if TYPE_CHECKING:
    from ..cast.policies import Policy

ALGORITHMS = {"NONE": "vanilla", "EAGLE": "eagle2", "CAST": "cast", "GOODPUT": "goodput"}
BACKENDS = ("native", "sglang")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
DTYPES = ("float32", "float16", "bfloat16")


def _weight_format(text: str) -> str:
    from ..engine.format_choice import parse_requested  # imports torch: only when the flag is given
    from ..models.weights import WeightFormatError

    try:
        return parse_requested(text)
    except WeightFormatError as err:
        raise argparse.ArgumentTypeError(err.reason) from None


def _compile_mode(text: str) -> str:
    from ..models.compiled import COMPILE_MODES  # imports torch: only when the flag is given

    if text not in COMPILE_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(COMPILE_MODES)}, got {text!r}")
    return text


def _profile_path(text: str) -> Path | None:
    """``auto`` (the default) picks ``profiles/<hardware label>.yaml`` in `resolve_profile`."""
    return None if text == "auto" else Path(text)


@dataclass(frozen=True)
class LaunchArgs:
    model_path: str | None
    draft_path: str | None
    algorithm: str
    algorithm_given: bool  # False: CAST by default, plain decoding when the model has no draft head
    shape: ShapeOverride
    cast_profile: Path | None
    host: str
    port: int
    max_running_requests: int
    max_queued_requests: int
    context_length: int
    api_key: str | None
    admin_api_key: str | None
    max_request_bytes: int | None
    max_logprobs: int
    mem_fraction_static: float | None  # --backend sglang only
    device: str
    dtype: str
    weight_format: str
    compile: str  # native engine only: off | auto | on (models/compiled.py)
    cuda_graph: bool  # False: --disable-cuda-graph (engine/cuda_graphs.py; SGLang's own flag with --backend sglang)
    backend: str
    served_model_name: str | None
    log_level: str
    live_gate: bool = True  # --cast-live-gate on|off
    calibrate: str = "auto"  # --cast-calibrate auto|on|off (server/startup_calibration.py)
    tp_size: int = 1  # --backend sglang only: SGLang's --tp-size / --dp-size / --pp-size
    dp_size: int = 1
    pp_size: int = 1

    @property
    def policy(self) -> str:
        return ALGORITHMS[self.algorithm]

    @property
    def policy_class(self) -> type[Policy]:
        """The registry's class for the algorithm (imported on first use, so ``--help``
        and flag errors answer without loading torch)."""
        from ..cast.policies import policy_class

        return policy_class(self.policy)


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m sglang_cast.launch_server",
        description="Serve a model with cost-aware speculative decoding (CAST) behind OpenAI-compatible and "
                    "SGLang-native HTTP endpoints.",
    )
    model = parser.add_argument_group("model")
    model.add_argument("--model-path", metavar="PATH", default=None,
                       help="target model: an HF directory or a .gguf file (default: the embedded "
                            "SmolLM2-135M-Instruct)")
    model.add_argument("--speculative-draft-model-path", dest="draft_path", metavar="PATH", default=None,
                       help="EAGLE/EAGLE-3 draft head directory (default: the head shipped for the embedded model)")
    model.add_argument("--served-model-name", metavar="NAME", default=None,
                       help="model name clients send and /v1/models lists (default: the model path)")
    model.add_argument("--context-length", metavar="TOKENS", type=int_at_least(1), default=2048,
                       help="longest prompt + generation per request, in tokens (default: 2048)")
    model.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    model.add_argument("--dtype", choices=DTYPES, default="float32",
                       help="activations, norms, attention and the weights --weight-format leaves dense "
                            "(default: float32)")
    model.add_argument("--weight-format", metavar="FMT", type=_weight_format, default=None,
                       help="native engine on the CPU: how the target's linears / LM head are stored, one of "
                            "fp32, bf16, int8, int4, int4amx or int8amx (int4 or int8 whose forwards of 5+ rows run our "
                            "AMX tile kernels; AMX CPUs), int4vnni or int8vnni (int4 or int8 on our AVX512-VNNI kernels, "
                            "activations rounded to int8 per group of 32; CPUs with AVX512-VNNI and -BF16), or '<linears>/<lm_head>' such as int4/int8, either optionally with "
                            "':dense<N>' (forwards of N or more rows, prefill, run the dense weights: int4/int8:dense32; "
                            "':dense<N>:bf16' keeps them as a bf16 copy, AMX's fastest large GEMM) "
                            "and with '+<draft>' for the draft head's linears such as int4/int8+int8, which takes "
                            "its own ':dense<N>[:bf16]' (int4/int8+int8:dense8:bf16: draft forwards of 8+ rows on a "
                            "bf16 copy; packed formats run bf16 activations; docs/precision.md has their measured "
                            "costs), or auto: the format the "
                            "CAST profile was measured and tuned with, else the cheapest of fp32, bf16, int8, "
                            "int4/int8 (and int4amx/int8amx, int4vnni/int8vnni where their kernels run) in a few timed forwards at startup (default: auto; on CUDA auto is the "
                            "--dtype weights)")
    model.add_argument("--compile", metavar="{off,auto,on}", type=_compile_mode, default="off",
                       help="native engine: compile the target's and draft head's layers with torch.compile at "
                            "startup (on), only for packed --weight-format (auto), or not (off). Compilation takes "
                            "~20 s cold and ~5 s with inductor's cache warm (~/.cache/sglang_cast/inductor), before "
                            "the server listens; it measured no faster than eager on a 2-core AMX Xeon "
                            "(docs/precision.md) (default: off)")

    model.add_argument("--disable-cuda-graph", action="store_true",
                       help="on CUDA, run every forward eagerly instead of replaying CUDA graphs recorded at startup "
                            "for plain decoding, verification and the draft's steps (the native engine reports "
                            "their count, startup seconds and memory under /server_info cuda_graphs; with --backend "
                            "sglang this is SGLang's own flag). No effect on the CPU")

    spec = parser.add_argument_group("speculative decoding")
    spec.add_argument("--speculative-algorithm", dest="algorithm", type=str.upper, choices=list(ALGORITHMS),
                      default=None,
                      help="NONE: plain decoding; EAGLE: EAGLE-2 fixed trees; CAST: cost-aware trees from the "
                           "profile's cost tables (default; when the model has no draft head and none is given, "
                           "the default falls back to NONE and says so in the log); GOODPUT: threshold-free "
                           "cost-aware trees")
    spec.add_argument("--speculative-num-steps", dest="max_depth", metavar="N", type=int_at_least(1), default=None,
                      help="maximum draft tree depth; overrides every profile bucket")
    spec.add_argument("--speculative-eagle-topk", dest="top_k", metavar="K", type=int_at_least(1), default=None,
                      help="candidates kept per tree layer (top-k); overrides every profile bucket")
    spec.add_argument("--speculative-num-draft-tokens", dest="num_verify_tokens", metavar="N",
                      type=int_at_least(1), default=None,
                      help="tokens verified per iteration, the root included (>= 2); overrides every profile "
                           "bucket")
    spec.add_argument("--cast-profile", metavar="PATH", type=_profile_path, default=None,
                      help="CAST profile YAML (cost tables and per-batch tree settings), watched and hot-reloaded, "
                           "or auto: profiles/<label>.yaml for this hardware: on the CPU cpu-<ISA class>.yaml "
                           "(cpu-amx, cpu-avx512, cpu-avx2) if shipped, else cpu.yaml; h100/a800/h20/rtx4090 "
                           "from the CUDA device name (default: auto)")
    spec.add_argument("--cast-live-gate", dest="live_gate", choices=("on", "off"), default=None,
                      help="on: per batch-size bucket, compare each iteration's live cost with what the profile "
                           "predicted and switch speculation off in a bucket whose recent live speculative rate "
                           "fell below plain decoding's (re-tried after a bounded number of plain iterations, the "
                           "profile file is not rewritten); off: measure and export only (/metrics, /server_info). "
                           "Native engine only (default: on)")

    spec.add_argument("--cast-calibrate", dest="calibrate", choices=("auto", "on", "off"), default=None,
                      help="fit the profile's forward tables to this machine at start-up: a few target and draft "
                           "forwards timed here (seconds) scale the tables CAST charges (and a second term where "
                           "their shape differs); auto: only when the profile was measured on another machine "
                           "(its recorded CPU or GPU differs), on: always, off: never; reloads are fitted to the same "
                           "timings; the fit is under /server_info cast_profile.calibration. Native engine only "
                           "(default: auto)")
    spec.add_argument("--cast-lookup-depth", dest="lookup_depth", metavar="N", type=int_at_least(0), default=None,
                      help="add to every draft tree up to N tokens copied from the context: what followed the "
                           "longest recent suffix (2-8 tokens) where it occurred before (prompt lookup), valued by "
                           "the match's length, ranked and verified with the drafted nodes; lossless, no draft "
                           "forward (8, with the earlier 2-token rule, raised EAGLE-2's tree τ 2.64 → 3.06 on "
                           "mt_bench, 3.25 → 4.18 on humaneval: docs/design/cast.md); 0 turns it off. Replaces "
                           "the profile's per-bucket choice (lookup_depth). Native engine only (default: the "
                           "profile's; off without one)")

    serving = parser.add_argument_group("serving")
    serving.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serving.add_argument("--port", type=int_in(1, 65535), default=30000, help="port to listen on (default: 30000)")
    serving.add_argument("--max-running-requests", metavar="N", type=int_at_least(1), default=8,
                         help="requests decoded together in one batch (default: 8)")
    serving.add_argument("--max-queued-requests", metavar="N", type=int_at_least(0), default=64,
                         help="requests waiting for a batch slot; beyond that the server answers 503 with "
                              "Retry-After (default: 64)")
    serving.add_argument("--api-key", metavar="KEY", default=None,
                         help="require 'Authorization: Bearer <key>' on every endpoint but /health, "
                              "/health_generate and /metrics")
    serving.add_argument("--admin-api-key", metavar="KEY", default=None,
                         help="key for the admin endpoints (/cast/reload, /cast/profile, /flush_cache, "
                              "/server_info, /get_server_info) instead of --api-key, which they then refuse; "
                              "without it they need --api-key when that is set")
    serving.add_argument("--max-request-bytes", metavar="BYTES", type=int_at_least(1), default=None,
                         help="largest request body; bigger ones get 413 before they are read (default: "
                              f"max({MIN_REQUEST_BYTES >> 20} MiB, context length x "
                              f"{REQUEST_BYTES_PER_CONTEXT_TOKEN} bytes), 2 MiB at the default context length)")
    serving.add_argument("--max-logprobs", metavar="N", type=int_at_least(0), default=DEFAULT_MAX_TOP_LOGPROBS,
                         help="most alternatives per position a request may ask for with top_logprobs_num "
                              f"(default: {DEFAULT_MAX_TOP_LOGPROBS}, as vLLM's --max-logprobs)")
    serving.add_argument("--mem-fraction-static", metavar="F", type=float_between(0, 1), default=None,
                         help="--backend sglang only: SGLang's share of GPU memory for weights and KV pool, in "
                              "(0, 1); `cast-autotune preflight` prints the value a profile's runtime states "
                              "need (default: SGLang's)")
    for flag, meaning in (("--tp-size", "tensor-parallel GPUs per model copy (every rank builds the same tree; "
                                        "the profile must be measured for this layout)"),
                          ("--dp-size", "data-parallel model copies (each serves the same profile)"),
                          ("--pp-size", "pipeline stages; CAST refuses > 1 (docs/gpu.md says why)")):
        serving.add_argument(flag, metavar="N", type=int_at_least(1), default=None,
                             help=f"--backend sglang only: SGLang's {flag}, {meaning} (default: 1)")
    serving.add_argument("--backend", choices=BACKENDS, default="native",
                         help="native: this package's engine (default); sglang: real SGLang with the CAST "
                              "plugin (needs .venv-sglang, tools/setup_sglang_env.sh): on a CUDA GPU, or on SGLang's CPU engine "
                              "with --device cpu (the project's stand-ins for the sgl_kernel ops it lacks; docs/gpu.md)")
    serving.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default="info",
                         help="logging level (default: info)")
    return parser


def parse_launch_args(argv: list[str] | None = None, parser: OneLineParser | None = None) -> LaunchArgs:
    parser = parser or build_parser()
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    shape = ShapeOverride(max_depth=ns.max_depth, top_k=ns.top_k, num_verify_tokens=ns.num_verify_tokens,
                          lookup_depth=ns.lookup_depth)
    if shape.num_verify_tokens is not None and shape.num_verify_tokens < 2:
        parser.error(f"--speculative-num-draft-tokens counts the root and must be >= 2, "
                     f"got {shape.num_verify_tokens}")
    algorithm_given = ns.algorithm is not None
    ns.algorithm = ns.algorithm or "CAST"
    if ns.algorithm == "NONE":
        given = [flag for flag, value in (("--speculative-num-steps", ns.max_depth),
                                          ("--speculative-eagle-topk", ns.top_k),
                                          ("--speculative-num-draft-tokens", ns.num_verify_tokens),
                                          ("--speculative-draft-model-path", ns.draft_path)) if value is not None]
        if given:
            parser.error(f"{', '.join(given)} cannot be used with --speculative-algorithm NONE (no draft tree)")
    if ns.weight_format not in (None, "auto") and ns.backend == "sglang":
        parser.error("--weight-format applies to the native engine only (SGLang loads the checkpoint's own dtype)")
    if ns.compile != "off" and ns.backend == "sglang":
        parser.error("--compile applies to the native engine only (SGLang captures its own CUDA graphs)")
    if ns.live_gate is not None and ns.backend == "sglang":
        parser.error("--cast-live-gate applies to the native engine only (SGLang's scheduler runs the iterations)")
    if ns.lookup_depth is not None and ns.backend == "sglang":
        parser.error("--cast-lookup-depth applies to the native engine only (with --backend sglang the profile's "
                     "buckets choose the branch: lookup_depth)")
    if ns.lookup_depth and ns.algorithm == "NONE":
        parser.error("--cast-lookup-depth cannot be used with --speculative-algorithm NONE (no draft tree)")
    if ns.calibrate is not None and ns.backend == "sglang":
        parser.error("--cast-calibrate applies to the native engine only (the SGLang worker charges its profile as is)")
    if ns.mem_fraction_static is not None and ns.backend != "sglang":
        parser.error("--mem-fraction-static applies to --backend sglang only (the native engine sizes its KV "
                     "cache from --context-length and --max-running-requests)")
    parallel = [flag for flag, value in (("--tp-size", ns.tp_size), ("--dp-size", ns.dp_size),
                                         ("--pp-size", ns.pp_size)) if value is not None]
    if parallel and ns.backend != "sglang":
        parser.error(f"{', '.join(parallel)} apply to --backend sglang only (the native engine runs on one device)")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", ns.device):
        parser.error(f"--device must be cpu, cuda or cuda:N, got {ns.device!r}")
    return LaunchArgs(model_path=ns.model_path, draft_path=ns.draft_path, algorithm=ns.algorithm,
                      algorithm_given=algorithm_given, shape=shape,
                      cast_profile=ns.cast_profile, host=ns.host, port=ns.port,
                      max_running_requests=ns.max_running_requests, max_queued_requests=ns.max_queued_requests,
                      context_length=ns.context_length, api_key=ns.api_key, admin_api_key=ns.admin_api_key,
                      max_request_bytes=ns.max_request_bytes, max_logprobs=ns.max_logprobs,
                      mem_fraction_static=ns.mem_fraction_static, device=ns.device,
                      dtype=ns.dtype, weight_format=ns.weight_format or "auto", compile=ns.compile,
                      cuda_graph=not ns.disable_cuda_graph,
                      backend=ns.backend, served_model_name=ns.served_model_name, log_level=ns.log_level,
                      live_gate=ns.live_gate != "off", calibrate=ns.calibrate or "auto",
                      tp_size=ns.tp_size or 1, dp_size=ns.dp_size or 1,
                      pp_size=ns.pp_size or 1)
