"""CAST against SGLang's own speculation, inside SGLang 0.5.23 on the CPU, with SGLang's
``bench_serving`` as the load: plain decoding, SGLang's EAGLE-3 at a static tree, SGLang's
adaptive speculation (``--speculative-adaptive``: an EMA over chain steps) and CAST, the same
shipped head for all, one server at a time, the configurations interleaved per round.

    .venv-sglang/bin/python tools/bench_sglang_cpu.py --rounds 2 --concurrency 1 4 \\
        --out docs/results/sglang_cpu/<date>

Each (round, configuration, concurrency) writes bench_serving's JSON line to
``<out>/bench.jsonl`` with the configuration added; ``<out>/summary.json`` holds the medians.
Numbers compare algorithms on the project's CPU stand-ins for SGLang's kernels
(docs/gpu.md, "CAST inside SGLang on a CPU"), never SGLang's CPU speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.benchkit.sglang_server import SGLangServer, cpu_launcher  # noqa: E402

EAGLE_TREE = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")


def configurations(model: str, head: str, profile: str | None) -> dict[str, list[str]]:
    """Each configuration's server command (after ``python -m``)."""
    profile_flags = ("--cast-profile", profile) if profile else ()
    return {
        "plain": cpu_launcher("--speculative-algorithm", "NONE"),
        "eagle3": cpu_launcher("--speculative-algorithm", "EAGLE", *EAGLE_TREE),
        # SGLang's own flags: the project's launcher does not expose --speculative-adaptive
        "adaptive": ["sglang_cast.sglang_plugin.cpu_serve", "--model-path", model, "--speculative-algorithm", "EAGLE3",
                     "--speculative-draft-model-path", head, "--speculative-adaptive", "--device", "cpu",
                     "--attention-backend", "intel_amx", "--disable-cuda-graph", "--sleep-on-idle",
                     "--dtype", "float32", "--context-length", "2048", "--max-running-requests", "16",
                     "--max-total-tokens", str(16 * 2048)],
        "cast": cpu_launcher("--speculative-algorithm", "CAST", *profile_flags),
    }


def bench(server: SGLangServer, model: str, concurrency: int, args: argparse.Namespace) -> dict:
    """One ``python -m sglang.bench_serving`` run; its JSON line.  Run from a temporary
    folder: the repository's ``datasets/`` would shadow the ``datasets`` package."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", server.url,
               "--dataset-name", "random-ids", "--tokenizer", model, "--random-input-len", str(args.input_len),
               "--random-output-len", str(args.output_len), "--random-range-ratio", "1.0",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--configs", nargs="+", default=["plain", "eagle3", "adaptive", "cast"])
    parser.add_argument("--prompts-per-level", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cast-profile", default=None, help="default: the launcher's choice for this CPU")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from sglang_cast.engine.build import default_draft_path
    from sglang_cast.models.loader import resolve_model_dir

    model, head = str(resolve_model_dir(None)), str(default_draft_path(None))
    commands = configurations(model, head, args.cast_profile)
    unknown = set(args.configs) - set(commands)
    if unknown:
        parser.error(f"--configs: unknown {sorted(unknown)}; known: {sorted(commands)}")
    args.out.mkdir(parents=True, exist_ok=True)
    records = args.out / "bench.jsonl"
    rows = []
    for round_ in range(args.rounds):
        for name in args.configs:
            with SGLangServer(args.out / f"server_{name}_{round_}.log", commands[name]) as server:
                for concurrency in args.concurrency:
                    row = {**bench(server, model, concurrency, args), "config": name, "round": round_,
                           "concurrency": concurrency}
                    rows.append(row)
                    with records.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(f"round {round_} {name:8s} c={concurrency:2d}: {row['output_throughput']:.2f} tok/s, "
                          f"TPOT {row['median_tpot_ms']:.1f} ms", flush=True)
                probe = probe_accept_length(server, args.output_len)
                rows.append({"config": name, "round": round_, "concurrency": 1, "probe_accept_length": probe})
                with records.open("a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
                print(f"round {round_} {name:8s} accept length (one greedy mt_bench-style request): {probe}",
                      flush=True)
    summary = {}
    for name in args.configs:
        for concurrency in args.concurrency:
            mine = [r for r in rows if r["config"] == name and r["concurrency"] == concurrency]
            summary[f"{name}@{concurrency}"] = {
                key: statistics.median(r[key] for r in mine if r.get(key) is not None)
                for key in ("output_throughput", "median_tpot_ms", "probe_accept_length")
                if any(r.get(key) is not None for r in mine)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
