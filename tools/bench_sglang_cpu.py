"""CAST against SGLang's own speculation, inside SGLang 0.5.23 on the CPU, with SGLang's
``bench_serving`` as the load: plain decoding, SGLang's EAGLE-3 at a static tree, SGLang's
adaptive speculation (``--speculative-adaptive``: an EMA over chain steps) and CAST (with
``--cast-profile``, also ``cast-nolookup``: the same trees without the profile's prompt-lookup
branch), the same shipped head for all, one server at a time, the configurations interleaved
per round.

    .venv-sglang/bin/python tools/bench_sglang_cpu.py --rounds 2 --concurrency 1 4 \\
        --out docs/results/sglang_cpu/<date>

``--cast-ab NAME=PROFILE`` adds a configuration ``cast@NAME``: CAST under another profile
(the one shipped before a re-tune, say), in the same rounds, so two profiles are compared
minutes apart rather than in two runs the machine's drift separates.

Each (round, configuration, concurrency) writes bench_serving's JSON line to
``<out>/bench.jsonl`` with the configuration added; ``<out>/summary.json`` holds the medians
and each configuration's throughput over plain decoding's and over ``cast``'s, round by round
(``vs_plain_rounds``, ``vs_cast_rounds``), where those ran.
Numbers compare algorithms on the project's CPU stand-ins for SGLang's kernels
(docs/gpu.md, "CAST inside SGLang on a CPU"), never SGLang's CPU speed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sglang_cast.cast import CostModel  # noqa: E402
from sglang_cast.sglang_plugin.step_log import STEP_PROFILE_ENV, LoggedStep, StepProfileMode, read_steps  # noqa: E402
from tools.benchkit.sglang_server import SGLangServer, cpu_launcher  # noqa: E402

CONTEXT, MAX_RUNNING = 2048, 16  # every server's --context-length and --max-running-requests
EAGLE_TREE = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")


def without_branch(profile: str, out: Path) -> str:
    """A copy of ``profile`` (in ``out``) whose buckets have no prompt-lookup branch."""
    import yaml

    data = yaml.safe_load(Path(profile).read_text())
    for bucket in data["buckets"]:
        bucket["lookup_depth"] = 0
    path = out / "profile_nolookup.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def cast_profiles(profile: str | None, ab: list[tuple[str, str]], out: Path) -> dict[str, str]:
    """The profile each CAST configuration serves with a given profile: ``cast`` with
    ``profile``, ``cast-nolookup`` with its copy without the branch, ``cast@NAME`` with
    each ``--cast-ab`` entry's."""
    named = {f"cast@{name}": path for name, path in ab}
    if profile is None:
        return named
    return {"cast": profile, "cast-nolookup": without_branch(profile, out), **named}


def parse_ab(entry: str) -> tuple[str, str]:
    """``NAME=PROFILE`` of ``--cast-ab``, the profile file checked to exist."""
    name, sep, path = entry.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"takes NAME=PROFILE (e.g. run23lr=profiles/sglang/cpu.yaml); got {entry!r}")
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"{path}: no such profile file")
    return name, path


def per_round_ratios(rows: list[dict], name: str, baseline: str, dataset: str, concurrency: int) -> list[float]:
    """``name``'s output throughput over ``baseline``'s in the same round, round by round
    (rounds where either is missing are skipped)."""
    def by_round(config: str) -> dict[int, float]:
        return {r["round"]: r["output_throughput"] for r in rows if r["config"] == config
                and r.get("dataset") == dataset and r["concurrency"] == concurrency and r.get("output_throughput")}

    mine, theirs = by_round(name), by_round(baseline)
    return [mine[k] / theirs[k] for k in sorted(mine) if k in theirs]


def configurations(model: str, head: str, profiles: dict[str, str]) -> dict[str, list[str]]:
    """Each configuration's server command (after ``python -m``); ``profiles`` are the CAST
    configurations' (`cast_profiles`), plain ``cast`` taking the launcher's choice without one."""
    # The same batch limit and KV pool for every configuration (the launcher's default
    # --max-running-requests would cap a concurrency of 16 below SGLang's own default).
    limits = ("--context-length", str(CONTEXT), "--max-running-requests", str(MAX_RUNNING))
    return {
        "plain": cpu_launcher("--speculative-algorithm", "NONE", *limits),
        "eagle3": cpu_launcher("--speculative-algorithm", "EAGLE", *EAGLE_TREE, *limits),
        # SGLang's own flags: the project's launcher does not expose --speculative-adaptive
        "adaptive": ["sglang_cast.sglang_plugin.cpu_serve", "--model-path", model, "--speculative-algorithm", "EAGLE3",
                     "--speculative-draft-model-path", head, "--speculative-adaptive", "--dtype", "float32", *limits,
                     "--max-total-tokens", str(MAX_RUNNING * CONTEXT)],
        "cast": cpu_launcher("--speculative-algorithm", "CAST", *limits),
        **{name: cpu_launcher("--speculative-algorithm", "CAST", "--cast-profile", path, *limits)
           for name, path in profiles.items()},
    }


def dataset_flags(dataset: str, tmp: Path, args: argparse.Namespace) -> list[str]:
    """bench_serving's flags for ``dataset``: ``random-ids`` (random token prompts of
    ``--input-len``) or ``mt_bench`` (datasets/mt_bench.jsonl's first turns under the chat
    template, as bench_serving's ``custom`` dataset reads conversations)."""
    if dataset == "random-ids":
        return ["--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
                "--random-output-len", str(args.output_len), "--random-range-ratio", "1.0"]
    path = tmp / "mt_bench_conversations.jsonl"
    turns = [json.loads(line)["turns"][0] for line in (ROOT / "datasets" / "mt_bench.jsonl").read_text().splitlines()]
    path.write_text("".join(json.dumps({"conversations": [{"content": t}, {"content": "(unused reply)"}]}) + "\n"
                            for t in turns))
    return ["--dataset-name", "custom", "--dataset-path", str(path), "--sharegpt-output-len", str(args.output_len),
            "--apply-chat-template"]


def bench(server: SGLangServer, model: str, concurrency: int, dataset: str, args: argparse.Namespace) -> dict:
    """One ``python -m sglang.bench_serving`` run; its JSON line.  Run from a temporary
    folder: the repository's ``datasets/`` would shadow the ``datasets`` package."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", server.url,
               *dataset_flags(dataset, Path(tmp), args), "--tokenizer", model,
               "--num-prompts", str(max(args.prompts_per_level, concurrency * 2)), "--max-concurrency",
               str(concurrency), "--seed", str(args.seed), "--warmup-requests", "1", "--disable-tqdm",
               "--output-file", str(out)]
        subprocess.run(cmd, cwd=tmp, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text().splitlines()[-1])


def probe_accept_length(server: SGLangServer, new_tokens: int) -> float | None:
    """SGLang's per-request ``spec_accept_length`` (tokens per verify) of one greedy chat
    request (bench_serving reads the server's running average, which SGLang's adaptive
    mode does not report); None for plain decoding."""
    prompt = ("<|im_start|>user\nExplain how a bicycle stays upright, in a few paragraphs.<|im_end|>\n"
              "<|im_start|>assistant\n")
    meta = server.post("/generate", {"text": prompt, "sampling_params": {
        "max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}})["meta_info"]
    return meta.get("spec_accept_length")


def predicted_ms(step: LoggedStep, costs: CostModel) -> float:
    """What CAST's cost model charges a logged iteration: its forwards (the worker
    charged them from the profile's tables) plus the profile's host terms."""
    host = costs.overhead.terms(step.batch_size, step.context_len).iteration_ms(step.depth, step.verified) \
        if costs.overhead is not None else 0.0
    return step.forward_ms + host


def step_cost_check(steps: list[LoggedStep], costs: CostModel) -> dict:
    """Measured over predicted step cost of CAST's decode iterations (the worker's step
    log, ``sglang_plugin.step_log``): medians and spread, speculating and zero-step apart."""
    summary = {}
    for name, kept in (("speculating", [s for s in steps if s.depth > 0]),
                       ("zero_step", [s for s in steps if s.depth == 0])):
        ratios = sorted(s.step_ms / predicted_ms(s, costs) for s in kept)
        if ratios:
            summary[name] = {"steps": len(ratios), "measured_over_predicted": statistics.median(ratios),
                             "p10": ratios[len(ratios) // 10], "p90": ratios[(9 * len(ratios)) // 10],
                             "median_measured_ms": statistics.median(s.step_ms for s in kept),
                             "median_predicted_ms": statistics.median(predicted_ms(s, costs) for s in kept),
                             "batch_sizes": sorted({s.batch_size for s in kept})}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--configs", nargs="+", default=["plain", "eagle3", "adaptive", "cast"])
    parser.add_argument("--datasets", nargs="+", choices=["random-ids", "mt_bench"], default=["random-ids", "mt_bench"])
    parser.add_argument("--prompts-per-level", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cast-profile", default=None,
                        help="default: the launcher's choice for this CPU; given, CAST's iterations are logged and "
                             "its predicted step cost is set against the measured one")
    parser.add_argument("--cast-ab", type=parse_ab, action="append", default=[], metavar="NAME=PROFILE",
                        help="also serve CAST with this profile as configuration cast@NAME, in the same rounds "
                             "(repeatable)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from sglang_cast.engine.build import default_draft_path
    from sglang_cast.models.loader import resolve_model_dir
    from sglang_cast.profile import load_profile

    model, head = str(resolve_model_dir(None)), str(default_draft_path(None))
    args.out.mkdir(parents=True, exist_ok=True)
    profiles = cast_profiles(args.cast_profile, args.cast_ab, args.out)
    commands = configurations(model, head, profiles)
    configs = list(dict.fromkeys(args.configs + [f"cast@{name}" for name, _ in args.cast_ab]))
    unknown = set(configs) - set(commands)
    if unknown:
        parser.error(f"--configs: unknown {sorted(unknown)}; known: {sorted(commands)} (cast-nolookup needs "
                     "--cast-profile)")
    records = args.out / "bench.jsonl"
    rows = []
    costs = {name: load_profile(path).profile.settings.costs for name, path in profiles.items() if name in configs}
    for round_ in range(args.rounds):
        for name in configs:
            step_log = args.out / f"steps_{name}_{round_}.jsonl" if name in costs else None
            env = {STEP_PROFILE_ENV: StepProfileMode(str(step_log)).to_env()} if step_log else None
            offset = 0
            with SGLangServer(args.out / f"server_{name}_{round_}.log", commands[name], env) as server:
                for dataset, concurrency in itertools.product(args.datasets, args.concurrency):
                    row = {**bench(server, model, concurrency, dataset, args), "config": name, "round": round_,
                           "dataset": dataset, "concurrency": concurrency}
                    if step_log:
                        steps, offset = read_steps(step_log, offset)
                        row["step_cost"] = step_cost_check(steps, costs[name])
                    rows.append(row)
                    with records.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(f"round {round_} {name:8s} {dataset:10s} c={concurrency:2d}: "
                          f"{row['output_throughput']:.2f} tok/s, TPOT {row['median_tpot_ms']:.1f} ms"
                          + (f", measured/predicted step {row['step_cost']}" if step_log else ""), flush=True)
                probe = probe_accept_length(server, args.output_len)
                rows.append({"config": name, "round": round_, "concurrency": 1, "probe_accept_length": probe})
                with records.open("a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
                print(f"round {round_} {name:8s} accept length (one greedy mt_bench-style request): {probe}",
                      flush=True)
    summary = {}
    for name, dataset, concurrency in itertools.product(configs, args.datasets, args.concurrency):
        mine = [r for r in rows if r["config"] == name and r.get("dataset") == dataset
                and r["concurrency"] == concurrency]
        cell = {key: statistics.median(r[key] for r in mine)
                for key in ("output_throughput", "median_tpot_ms", "accept_length") if all(r.get(key) for r in mine)}
        ratios = [r["step_cost"]["speculating"]["measured_over_predicted"] for r in mine
                  if "speculating" in r.get("step_cost", {})]
        if ratios:
            cell["step_measured_over_predicted"] = statistics.median(ratios)
        for baseline in ("plain", "cast"):  # an A/B profile (cast@NAME) is set against cast's as well
            paired = per_round_ratios(rows, name, baseline, dataset, concurrency) if name != baseline else []
            if paired:
                cell[f"vs_{baseline}_rounds"] = paired
                cell[f"vs_{baseline}_median"] = statistics.median(paired)
        summary[f"{name}@{dataset}@{concurrency}"] = cell
    for name in configs:
        probes = [r["probe_accept_length"] for r in rows if r["config"] == name and r.get("probe_accept_length")]
        if probes:
            summary[f"{name}@probe_accept_length"] = statistics.median(probes)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
