"""The command line of ``cast-autotune``: every subcommand and its flags, nothing else.

Each flag's value is checked by its argparse ``type`` (the ranges of
`sglang_cast.flags`, plus the few types of this tool's own below), so a command
starts from values already in range; `autotune.cli` dispatches the parsed namespace
to ``autotune/commands/<command>.py``, whose options dataclass names the same
fields.  The groups of flags several commands share (``add_models``, ``add_grid``,
``add_space`` ...) are the groups of `autotune.options`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglang_cast.cast.settings import MAX_LOOKUP_DEPTH
from sglang_cast.flags import OneLineParser, float_in, float_list, int_in, int_list
from sglang_cast.models.weights import WeightFormat, WeightFormatError
from sglang_cast.server.config import SPECULATION_WIN_MARGIN
from sglang_cast.sglang_plugin.plugin_config import DEFAULT_MAX_RUNNING_REQUESTS
from sglang_cast.sglang_plugin.state_cover import StateCap

from .analytic import ANALYTIC_GPUS
from .grid import AUTO_N, ProfileGrid
from .labels import KNOWN_LABELS
from .sglang_backend import MAX_TP_SIZE
from .space import SearchSpace
from .store import BACKENDS, DEFAULT_TIMEOUT_S, default_db_path
from .tuner import INCUMBENT_MARGIN

PROG = "cast-autotune"

DESCRIPTION = """``cast-autotune``: command-line entry point.

    cast-autotune profile --gpu cpu            # measure f_T, f_D into the database
    cast-autotune collect --batch-size 1,4     # record full-expansion traces
    cast-autotune tune --gpu cpu               # Optuna over trace replay → profiles/cpu.yaml
    cast-autotune daemon --gpu cpu             # keep re-profiling / re-tuning / publishing
    cast-autotune analytic --gpu h100          # roofline profile for hardware we cannot measure
    cast-autotune profile|tune --backend sglang --tp-size 4 ...   # SGLang's forwards, runtime states
    cast-autotune show | plot | bench

Every flag value is checked here, at the edge; a bad one is reported in one line
naming the flag and the accepted range (exit 2), as are database and file
problems (exit 1).  No traceback for anything a user can cause.
"""

PREFLIGHT_DESCRIPTION = """Lists the runtime states the CAST worker would build for the profile, the
memory each needs on one GPU and the totals (weights, states, KV pool, slack),
with the arithmetic of ``sglang_cast.sglang_plugin.memory_plan`` (SGLang
0.5.23's own sizing rules).  Exit 0 when it fits, 1 when it does not (the last
line says why and what to change), 2 for bad input.  No GPU, no SGLang needed.
"""


# ------------------------------------------------------------------ flag types of this tool
def weight_formats(text: str) -> str | tuple[str, ...]:
    """argparse type of ``--weight-format``: ``auto`` or comma-separated formats (canonical, no repeats)."""
    if text == "auto":
        return text
    try:
        formats = tuple(dict.fromkeys(str(WeightFormat.parse(part)) for part in text.split(",")))
    except WeightFormatError as err:
        raise argparse.ArgumentTypeError(f"expected 'auto' or comma-separated formats: {err.reason}") from None
    return formats


def c_range(text: str) -> tuple[float, float]:
    values = float_list(1e-6, 1e6)(text)
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX with 1e-06 <= MIN < MAX <= 1e+06, got {text!r}")
    return values


def n_points_mode(text: str) -> str | tuple[int, ...]:
    if text in ("auto", "all"):
        return text
    try:
        return int_list(1, 4096)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto', 'all' or increasing integers in [1, 4096], got {text!r}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: …)`` unless the help already says it or there is none;
    lists print as they are typed (``1,4,16``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        default = action.default
        stated = "default" in (action.help or "")
        if stated or default is None or default is False or default in ("", argparse.SUPPRESS):
            return action.help
        if isinstance(default, tuple):
            return f"{action.help} (default: {','.join(map(str, default))})"
        return super()._get_help_string(action)


class Parser(OneLineParser):
    """Bad input → one line on stderr naming the flag, exit 2 (no usage dump)."""

    hint = " (see --help)"


# ------------------------------------------------------------------ flag groups several commands share
def add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", type=Path, default=default_db_path(),
                        help="SQLite database (measurements, traces, Optuna studies, publications); its directory "
                             "is created if missing; default under $SGLANG_CAST_CACHE or ~/.cache/sglang_cast")
    parser.add_argument("--db-timeout", type=float_in(0.01, 3600), default=DEFAULT_TIMEOUT_S,
                        help="seconds to wait for another process's write lock before giving up")


def add_models(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-path", default=None,
                        help="target model: HF directory or .gguf (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--draft-path", default=None,
                        help="EAGLE/EAGLE-3 head directory (default: the shipped head of the embedded model; a "
                             "random-weight EAGLE head while none is shipped)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where to run (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                        help="model dtype (as EngineArgs)")
    parser.add_argument("--random-draft-seed", type=int_in(0, 2**31 - 1), default=0,
                        help="seed of the random-weight head used when no trained head exists")
    parser.add_argument("--threads", type=int_in(1, 4096), default=None,
                        help="torch intra-op threads (default: torch's, as the server runs); part of the "
                             "measurement setup, since 1 and 2 threads are different machines")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_backend(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0], help=help_text)


def add_weight_formats(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--weight-format", dest="weight_formats", metavar="FORMATS", type=weight_formats,
                        default="auto",
                        help=f"target weight formats to {what}: 'auto' (on the CPU every candidate "
                             "sglang_cast/engine/format_choice.py knows: fp32, bf16, int8, int4/int8, and int4amx/int8amx on "
                             "AMX CPUs, int4vnni/int8vnni on AVX512-VNNI CPUs; on CUDA the "
                             "dense --dtype) or a comma-separated list such as fp32,int4/int8. Each format is its own "
                             "cost curve (target id '<model>@<format>') (default: auto)")


def add_tp_size(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--tp-size", type=int_in(1, MAX_TP_SIZE), default=1, help=help_text)


def add_runtime_states(parser: argparse.ArgumentParser) -> None:
    """The cap and the deployment ``tune --backend sglang`` sizes runtime states for."""
    cap = StateCap()
    group = parser.add_argument_group(
        "SGLang runtime states (--backend sglang)",
        "The published profile names the (depth, verify width) states SGLang builds: the fewest that run the "
        "tuned policy's replayed iterations exactly, under this cap (stated in the profile).")
    group.add_argument("--max-states", type=int_in(2, 64), default=cap.max_states,
                       help="most runtime states, SGLang's startup state and the width-2 floor included")
    group.add_argument("--max-state-memory", type=float_in(0.001, 1), default=cap.max_memory_share,
                       help="share of one GPU's memory the states beyond the startup one may take")
    group.add_argument("--state-coverage", type=float_in(0.5, 1), default=cap.coverage,
                       help="share of replayed iterations to run in exactly their own state (the rest round up)")
    group.add_argument("--gpu-memory-gb", type=float_in(1, 4096), default=None,
                       help="one serving GPU's total memory in GiB, as nvidia-smi reports it (default: this "
                            "machine's CUDA GPU 0; without one, the states are sized for SGLang's CPU engine, "
                            "where they hold no graphs or attention workspaces)")
    group.add_argument("--serve-context-length", type=int_in(1, 1 << 24), default=None,
                       help="SGLang --context-length of the deployment; the states' buffers grow with it (default: "
                            "the target config.json's max_position_embeddings, as SGLang)")
    group.add_argument("--max-running-requests", type=int_in(1, 1 << 16), default=DEFAULT_MAX_RUNNING_REQUESTS,
                       help="SGLang --max-running-requests of the deployment: sets the graph batch sizes each "
                            f"state is captured at (default: {DEFAULT_MAX_RUNNING_REQUESTS}, CAST's)")


def add_label(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--gpu", "--label", dest="label", required=required,
                        help=f"profile label; published as profiles/<label>.yaml. Known labels: "
                             f"{', '.join(sorted(KNOWN_LABELS))}")
    parser.add_argument("--force-label", action="store_true",
                        help="accept a label that does not match the detected hardware (or an unknown label)")


def add_grid(parser: argparse.ArgumentParser) -> None:
    defaults = ProfileGrid()
    parser.add_argument("--batch-sizes", type=int_list(1, 1024), default=defaults.batch_sizes,
                        help="batch sizes B to profile, comma-separated")
    parser.add_argument("--ctx-bucket", type=int_in(1, 1 << 20), default=defaults.ctx_bucket,
                        help="context bucket width L (contexts L, 2L, ..., M*L are timed)")
    parser.add_argument("--ctx-buckets", type=int_in(1, 256), default=defaults.ctx_buckets,
                        help="number of context buckets M")
    parser.add_argument("--max-n", type=int_in(2, 4096), default=defaults.max_n,
                        help="largest n (new tokens per sequence) for the target; verifying k draft tokens feeds k+1")
    parser.add_argument("--draft-max-n", type=int_in(2, 4096), default=defaults.draft_max_n,
                        help="largest n for the draft (widest layer = top-k; catch-up = depth + 1)")
    parser.add_argument("--n-points", type=n_points_mode, default=defaults.n_mode,
                        help=f"which n to time: 'auto' (every n up to 16, where kernels step in blocks of rows, "
                             f"then {','.join(str(n) for n in AUTO_N if n > 16)} up to N, plus N), 'all' (1..N), "
                             "or a list; other n are interpolated linearly")
    parser.add_argument("--warmup", type=int_in(0, 100), default=defaults.warmup,
                        help="untimed rounds per row (a row = one role, B and c; a round times each of its n once)")
    parser.add_argument("--repeats", type=int_in(1, 1000), default=defaults.repeats,
                        help="timed rounds per row: samples per point (median, p10, p90 stored)")
    parser.add_argument("--quick", action="store_true",
                        help="small grid: B 1,2; one bucket of 256; n in 1,2,4,8,16; 1 warm-up and 3 timed rounds")
    parser.add_argument("--max-age", type=float_in(0, 1e9), default=None,
                        help="re-measure points older than this many seconds (default: never; a rerun only "
                             "measures points missing for this device/model pair/threads/software versions)")


def add_overhead(parser: argparse.ArgumentParser, dataset: bool = True) -> None:
    parser.add_argument("--overhead-steps", type=int_in(0, 10000), default=8,
                        help="timed whole engine steps per run of the host-overhead step design (plain decoding and "
                             "EAGLE-2 shapes of depth 1..6 at every batch size; --backend sglang times SGLang's own "
                             "iterations of the CAST worker, one SGLang engine per shape); 0 skips it")
    parser.add_argument("--overhead-warmup", type=int_in(0, 1000), default=2,
                        help="untimed steps at the start of every step-design run (first use of its shapes)")
    if not dataset:  # the subcommand has its own --dataset (the daemon's tuning prompts serve both)
        return
    parser.add_argument("--dataset", type=Path, default=None,
                        help="prompts the host-overhead steps decode (default: autotune/prompts.txt, disjoint from "
                             "the benchmarks)")


def add_space(parser: argparse.ArgumentParser) -> None:
    defaults = SearchSpace()
    parser.add_argument("--buckets", type=int_list(1, 4096), default=(1, 4, 16),
                        help="max_batch_size of each batch-size bucket; traces go to the first bucket covering "
                             "their batch size")
    parser.add_argument("--trials", type=int_in(1, 100000), default=100, help="Optuna trials per bucket")
    parser.add_argument("--c-range", type=c_range, default=(defaults.c_min, defaults.c_max),
                        help="MIN,MAX of the log-uniform search range of C1, C2 and C3")
    parser.add_argument("--top-k", type=int_in(1, 256), default=defaults.top_k, help="largest top-k searched")
    parser.add_argument("--max-depth", type=int_in(1, 256), default=defaults.max_depth, help="largest depth searched")
    parser.add_argument("--max-tokens", type=int_in(2, 4096), default=defaults.max_tokens,
                        help="largest token budget m (num_verify_tokens, root included) searched")
    parser.add_argument("--fifo-max", type=int_in(1, 1024), default=defaults.fifo_max,
                        help="largest depth-pruning FIFO length searched")
    parser.add_argument("--max-lookup-depth", type=int_in(0, MAX_LOOKUP_DEPTH), default=defaults.lookup_depth,
                        help="longest prompt-lookup branch searched (tokens copied from the context into every "
                             "tree, docs/design/cast.md §4); each bucket picks 0..N; needs traces collected with "
                             "a branch at least this deep (collect --lookup-depth); 0: never a branch")
    parser.add_argument("--study", default="",
                        help="study name prefix (studies are <prefix>-b<bucket>); reuse one to resume it "
                             "(default: <label>-<UTC time>)")
    parser.add_argument("--seed", type=int_in(0, 2**31 - 1), default=0, help="TPE sampler seed")
    parser.add_argument("--max-traces", type=int_in(1, 10**7), default=200,
                        help="traces replayed per bucket (evenly spaced sample); trial time is linear in it")
    parser.add_argument("--trace-dataset", default=None, help="tune only on traces of this dataset name")
    add_confirm(parser, default_prompts=4, default_tokens=32)
    parser.add_argument("--live-margin", type=float_in(0.001, 10), default=0.15,
                        help="when a bucket's live CAST or plain steps take more than this fraction off what the "
                             "cost model charges for those same steps, the host overhead is refitted from the live "
                             "steps, the bucket re-tuned and confirmed once more")
    parser.add_argument("--live-min-speedup", type=float_in(0.5, 10), default=1.0 + SPECULATION_WIN_MARGIN,
                        help="a bucket is published speculating only if CAST decoded at least this many times "
                             "plain decoding's rate live (medians of the interleaved rounds); the default asks "
                             "for the win the server's live gate asks before it switches speculation on, since "
                             "smaller differences are within a shared machine's round-to-round noise; 1 keeps "
                             "any win")
    parser.add_argument("--confirm-sets", type=int_in(1, 100), default=3,
                        help="the live gate decodes N disjoint slices of --confirm-prompts prompts per bucket, "
                             "whole batches only (fewer slices when the prompt set does not hold N), and publishes "
                             "a bucket speculating only if CAST reaches --live-min-speedup over all of them and "
                             "does not lose to plain decoding on any one: a win over all can be a few prompts'")
    parser.add_argument("--output", type=Path, default=None,
                        help="profile path (default: <repo>/profiles/<label>.yaml, where the server looks)")


def add_confirm(parser: argparse.ArgumentParser, default_prompts: int, default_tokens: int) -> None:
    parser.add_argument("--dataset", type=Path, default=None,
                        help="prompts for the live run: .jsonl (first of 'turns', or prompt/instruction/text) or "
                             "one prompt per line, \\n for a line break (default: autotune/prompts.txt)")
    parser.add_argument("--confirm-prompts", type=int_in(0, 10000), default=default_prompts,
                        help="prompts decoded live per bucket (per slice of --confirm-sets where it applies), with "
                             "the tuned CAST settings and with plain decoding (at least the batch size; 0 skips the "
                             "live gate)")
    parser.add_argument("--live-rounds", type=int_in(2, 100), default=3,
                        help="interleaved live rounds of CAST and of plain decoding per bucket (medians compared)")
    parser.add_argument("--confirm-max-new-tokens", type=int_in(1, 100000), default=default_tokens,
                        help="tokens generated per prompt in the live run")
    parser.add_argument("--context-length", type=int_in(16, 1 << 20), default=2048,
                        help="engine context length (prompt + generated tokens)")


# ------------------------------------------------------------------ the subcommands
def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    fmt = HelpFormatter

    p = commands.add_parser("profile", help="measure f_T and f_D on a grid into the database", formatter_class=fmt,
                            description="Time target and draft forwards over batch sizes x context buckets x n "
                                        "(warm-up, repeats, median and p10/p90); every point is committed at once, "
                                        "and a rerun measures only missing points.")
    add_label(p)
    add_models(p)
    add_weight_formats(p, "profile, one after another (each resumable)")
    add_grid(p)
    add_overhead(p)
    add_db(p)
    add_backend(p, "whose forwards to time: 'native' (this project's engine) or 'sglang' (SGLang's own target-verify "
                   "and draft-extend forwards through its model runner, on a CUDA GPU or SGLang's CPU engine; needs "
                   "SGLang 0.5.23, --model-path and --draft-path; see docs/gpu.md)")
    add_tp_size(p, "--backend sglang: GPUs of this machine each forward is sharded over (SGLang's --tp-size; one "
                   "rank per GPU; the model's attention and KV heads must divide over them); the rows are keyed by "
                   "it, as a TP-4 forward is another cost curve")

    p = commands.add_parser("collect", help="record full-expansion traces (greedy) into the database",
                            formatter_class=fmt,
                            description="Decode a prompt set with trace recording on (full EAGLE-2 expansion, every "
                                        "node verified); tune replays any CAST tree inside it.")
    add_models(p)
    p.add_argument("--dataset", type=Path, default=None,
                   help="prompts: .jsonl (first of 'turns', or prompt/instruction/text) or one prompt per line, "
                        "\\n for a line break (default: autotune/prompts.txt, written for tuning and disjoint from the "
                        "benchmarks)")
    p.add_argument("--num-prompts", type=int_in(1, 10**6), default=16, help="use the first N prompts")
    p.add_argument("--max-new-tokens", type=int_in(1, 100000), default=64, help="tokens generated per prompt")
    p.add_argument("--batch-size", type=int_list(1, 1024), default=(1,),
                   help="engine max batch size; a list records one run per size")
    p.add_argument("--top-k", type=int_in(1, 256), default=SearchSpace().top_k,
                   help="recorded top-k K (must be >= the tuning space's top-k)")
    p.add_argument("--max-depth", type=int_in(1, 256), default=SearchSpace().max_depth,
                   help="recorded depth H (must be >= the tuning space's depth)")
    p.add_argument("--lookup-depth", type=int_in(0, MAX_LOOKUP_DEPTH), default=SearchSpace().lookup_depth,
                   help="tokens of the prompt-lookup branch grafted onto every recorded tree and verified with "
                        "it (must be >= tune's --max-lookup-depth); 0: record none")
    p.add_argument("--context-length", type=int_in(16, 1 << 20), default=2048, help="engine context length")
    add_db(p)

    p = commands.add_parser("tune", help="Optuna over trace replay per bucket, live check, publish the profile",
                            formatter_class=fmt,
                            description="Objective: replay(traces, cast).tokens_per_s with the measured cost tables. "
                                        "The best trial is run live before the profile is written.")
    add_label(p)
    add_models(p)
    add_weight_formats(p, "tune on the same fp32 traces; the one whose tuned trees replay fastest (geometric "
                          "mean over buckets) is published; formats without measurements are skipped and named")
    add_space(p)
    add_db(p)
    add_backend(p, "whose measured cost curves to tune on (as `profile --backend` recorded them); 'sglang' also "
                   "writes the profile's runtime states and parallel layout, and runs the live gate on SGLang's "
                   "engine with the CAST worker (run with .venv-sglang/bin/python)")
    add_tp_size(p, "--backend sglang: the --tp-size the rows were profiled at and the profile will serve")
    add_runtime_states(p)
    p.add_argument("--calibrate-from", type=Path, default=None, metavar="PROFILE",
                   help="a quick re-tune for this machine from another machine's profile: its forward tables are "
                        "fitted to a few forwards timed here (seconds, as the server's --cast-calibrate does), in "
                        "its weight format, and the tuner and the live gate run on them and the traces already in "
                        "--db; nothing is profiled and no trace is recorded (native engine)")
    p.add_argument("--incumbent", type=Path, default=None, metavar="PROFILE",
                   help="the profile this tune would replace (e.g. the shipped one): each speculating bucket's tree "
                        "that fits the search space is one of its study's first trials, its replayed rate is "
                        "printed beside the pick, and its settings are kept unless the best trial replays more "
                        "than --incumbent-margin above it (default: none)")
    p.add_argument("--incumbent-margin", type=float_in(0, 1), default=INCUMBENT_MARGIN, metavar="FRACTION",
                   help="with --incumbent: how far above the incumbent's tree the best trial must replay to "
                        "replace it; picks a few per cent above it in replay ran level or slower live, as replay "
                        "on the tuning prompts resolves ~1 %% (default %(default)s; 0 keeps any replayed win)")

    p = commands.add_parser("daemon", help="re-profile and re-tune on a schedule or when traces arrive",
                            formatter_class=fmt,
                            description="Each step: profile missing/stale points, tune, confirm live, publish. "
                                        "SIGTERM stops after the current profile row or trial; an interrupted step "
                                        "publishes nothing.")
    add_label(p)
    add_models(p)
    add_weight_formats(p, "profile and tune at each step; the one whose tuned trees replay fastest is published")
    add_grid(p)
    add_overhead(p, dataset=False)
    add_space(p)
    add_db(p)
    p.add_argument("--interval", type=float_in(1, 1e9), default=3600.0, help="seconds between scheduled steps")
    p.add_argument("--poll", type=float_in(0.01, 1e6), default=30.0, help="seconds between trace-count checks")
    p.add_argument("--once", action="store_true", help="run one step and exit")
    p.add_argument("--server-url", default=None,
                   help="follow a running `python -m sglang_cast.launch_server` (http://host:port): when its "
                        "/server_info shows live / predicted iteration cost outside 1 ± --drift-margin in a bucket, "
                        "or its live gate switched a bucket off, re-profile every point and re-tune (once per "
                        "served profile version); the server hot-reloads what is published")
    p.add_argument("--drift-margin", type=float_in(0.01, 10.0), default=0.15,
                   help="live / predicted outside 1 ± this is drift (with --server-url)")
    p.add_argument("--server-api-key", default=None,
                   help="the server's --admin-api-key (or --api-key) when its /server_info is guarded")

    p = commands.add_parser("analytic", help="write a roofline profile for a GPU that cannot be measured here",
                            formatter_class=fmt,
                            description="f(B,c,n) = max(bytes/BW, flops/FLOPS) from published bandwidth and dense "
                                        "BF16 FLOP rate; with --tp-size N one GPU's shard plus the all-reduces "
                                        "between them; see docs/autotune.md.")
    p.add_argument("--gpu", "--label", dest="label", required=True,
                   help=f"the GPU whose published bandwidth and FLOP rate price the forwards: "
                        f"{', '.join(sorted(ANALYTIC_GPUS))}")
    add_tp_size(p, "GPUs the model is sharded over (SGLang's --tp-size): the profile prices one of them and serves "
                   "only that layout; the default output is then profiles/<label>-tp<N>.yaml")
    p.add_argument("--model-path", default=None, help="target model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft-path", default=None, help="draft head (default: shipped head, else an assumed EAGLE head)")
    p.add_argument("--output", type=Path, default=None,
                   help="profile path (default: <repo>/profiles/<label>.yaml, where the server looks, or "
                        "<label>-tp<N>.yaml with --tp-size N > 1)")
    p.add_argument("--record", action="store_true", help="also record the publication in --db")
    add_db(p)

    p = commands.add_parser("show", help="print cost curves, traces, tuning history and publications",
                            formatter_class=fmt)
    add_db(p)
    p.add_argument("--setup", type=int_in(0, 10**6), default=0,
                   help="which measurement setup's curves to print (0 = most recently measured)")
    p.add_argument("--study", default="", help="only studies whose name contains this")
    p.add_argument("--trials", action="store_true", help="print every trial with the best-so-far")

    p = commands.add_parser("plot", help="PNG plots of cost curves and tuning history", formatter_class=fmt)
    add_db(p)
    p.add_argument("--out", type=Path, default=Path("autotune-plots"), help="output directory")
    p.add_argument("--setup", type=int_in(0, 10**6), default=0, help="measurement setup (0 = most recent)")
    p.add_argument("--context", type=int_in(1, 1 << 20), default=None,
                   help="context of the cost curves (default: the smallest measured)")
    p.add_argument("--study", default="", help="only studies whose name contains this")
    p.add_argument("--max-studies", type=int_in(1, 100), default=6, help="plot at most this many (latest) studies")

    p = commands.add_parser("bench", help="tuner vs exhaustive grid, and replay vs live (JSON)", formatter_class=fmt,
                            description="Replays every configuration of a grid, runs the tuner with <= 10% as "
                                        "many evaluations for each seed, then runs the tuned settings live.")
    add_models(p)
    p.add_argument("--batch-sizes", type=int_list(1, 1024), default=(1,),
                   help="replay traces with batch size in [first, last]; the bucket's max_batch_size is the last")
    p.add_argument("--grid-c", type=float_list(1e-6, 1e6), default=(0.03, 0.3, 3.0),
                   help="values of each of C1, C2, C3 in the grid")
    p.add_argument("--grid-depths", type=int_list(1, 256), default=(2, 4, 6), help="max depths in the grid")
    p.add_argument("--grid-top-ks", type=int_list(1, 256), default=(2, 4, 8), help="top-k values in the grid")
    p.add_argument("--grid-budgets", type=int_list(2, 4096), default=(8, 16, 32), help="token budgets m in the grid")
    p.add_argument("--grid-fifo", type=int_list(1, 1024), default=(4,), help="FIFO lengths in the grid")
    p.add_argument("--trials", type=int_in(0, 10**6), default=0, help="tuner trials (default: 10%% of the grid)")
    p.add_argument("--seeds", type=int_list(0, 2**31 - 1), default=(0, 1, 2), help="tuner seeds (one study each)")
    p.add_argument("--max-traces", type=int_in(1, 10**7), default=60, help="traces replayed per configuration")
    p.add_argument("--study", default="", help="study name prefix (<prefix>-seed<seed>; default: bench-<UTC time>)")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON result here")
    add_confirm(p, default_prompts=4, default_tokens=48)
    add_db(p)

    p = commands.add_parser("preflight", help="check before launch that a profile's SGLang runtime states fit the GPU",
                            formatter_class=fmt, description=PREFLIGHT_DESCRIPTION)
    p.add_argument("--profile", type=Path, required=True, help="CAST profile YAML")
    p.add_argument("--model-config", type=Path, required=True, help="target model's config.json (or its directory)")
    p.add_argument("--draft-config", type=Path, default=None,
                   help="draft head's config.json (default: an EAGLE-3 head of the target's layer shape)")
    p.add_argument("--gpu-memory-gb", type=float_in(1, 4096), required=True,
                   help="one GPU's total memory in GiB, as nvidia-smi reports it (SGLang sizes from that)")
    p.add_argument("--tp-size", type=int_in(1, 64), default=None,
                   help="SGLang --tp-size: the model is sharded over this many GPUs; the check is per GPU (default: "
                        "the layout the profile was made for, provenance.sglang.parallel; another is refused, as "
                        "the server refuses it)")
    p.add_argument("--context-length", type=int_in(1, 1 << 24), default=None,
                   help="SGLang --context-length (default: the model's max_position_embeddings, as SGLang)")
    p.add_argument("--max-running-requests", type=int_in(1, 1 << 16), default=DEFAULT_MAX_RUNNING_REQUESTS,
                   help=f"SGLang --max-running-requests (CAST's default is {DEFAULT_MAX_RUNNING_REQUESTS})")
    p.add_argument("--mem-fraction-static", type=float_in(0.01, 0.99), default=None,
                   help="SGLang --mem-fraction-static (default: SGLang's own rule for this GPU)")
    p.add_argument("--chunked-prefill-size", type=int_in(1, 1 << 20), default=None,
                   help="SGLang --chunked-prefill-size (default: SGLang's own rule for this GPU)")
    p.add_argument("--speculative-num-steps", type=int_in(1, 256), default=None,
                   help="default: the profile's largest max_depth")
    p.add_argument("--speculative-eagle-topk", type=int_in(1, 256), default=None,
                   help="default: the profile's largest top_k")
    p.add_argument("--speculative-num-draft-tokens", type=int_in(2, 1024), default=None,
                   help="default: the profile's largest num_verify_tokens")
    return parser
