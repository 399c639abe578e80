"""Admission A/B: the time to prefill a queue of prompts three ways, interleaved in one process.

    python tools/prefill_ab.py --weight-format int4/int8 --num-prompts 16 --rounds 6

* ``per_prompt_full_head``: one forward per prompt, the LM head over every prompt
  position (the engine before 2026-11-26);
* ``per_prompt``: one forward per prompt, the LM head on the last position only;
* ``grouped``: the engine's own admission (``SpeculativeRunner.prefill_groups``:
  prompts share a padded forward where the policy's target cost table says it pays).

The rounds alternate the order of the three (A B C, C B A, ...) so a slow phase of a
shared machine lands on all of them.  Prints the medians and the per-round ratios
``grouped / per_prompt_full_head`` and ``grouped / per_prompt``; ``--json`` keeps
every round.  Prompts: the first ``--num-prompts`` of ``--dataset`` in the model's
chat template.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from autotune.models import load_model_pair  # noqa: E402
from autotune.prompts import load_prompts  # noqa: E402
from sglang_cast.cast import SamplingParams, make_policy  # noqa: E402
from tools.benchkit.cli import require_positive  # noqa: E402
from tools.benchkit.inputs import load_settings  # noqa: E402

VARIANTS = ("per_prompt_full_head", "per_prompt", "grouped")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weight-format", default="int4/int8", help="as the server's --weight-format")
    p.add_argument("--profile", default="profiles/cpu.yaml", help="CAST profile whose cost table groups prompts")
    p.add_argument("--dataset", type=Path, default=Path("datasets/mt_bench.jsonl"))
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    require_positive(p, args, "num_prompts", "rounds", "threads")
    return args


class Admission:
    """One engine whose admission can run each variant."""

    def __init__(self, args: argparse.Namespace) -> None:
        pair = load_model_pair(None, None, "cpu", "float32", weight_format=args.weight_format)
        settings = load_settings(args.profile, "cpu").profile.settings
        self.texts = [pair.format_prompt(t) for t in load_prompts(args.dataset).texts[: args.num_prompts]]
        self.lengths = [len(pair.tokenizer.encode(t)) for t in self.texts]
        self.engine = pair.engine(make_policy("vanilla", settings), len(self.texts), max(self.lengths) + 40)
        runner = self.engine.runner
        self.grouped, self.last_position_forward = runner.prefill_groups, runner._prefill_forward
        self.params = SamplingParams(max_new_tokens=2)

    def _full_head_forward(self, tokens, positions, slots, mask, last):
        """The prefill forward before 2026-11-26: logits at every prompt position, the
        last row picked afterwards."""
        runner = self.engine.runner
        out = runner.target(tokens, positions, runner.target_cache, slots, mask, runner.feature_layers)
        logits = runner.target.logits(out.hidden)
        return logits[torch.arange(tokens.shape[0]), last], out.draft_features()

    def group_sizes(self) -> list[int]:
        requests = [self.engine.add_request(t, self.params) for t in self.texts]
        sizes = [len(group) for group in self.grouped(requests)]
        self._admit_and_retire()
        return sizes

    def run(self, variant: str) -> float:
        """ms to admit every prompt with ``variant``."""
        runner = self.engine.runner
        one_each = lambda requests: [[r] for r in requests]  # noqa: E731
        runner.prefill_groups = self.grouped if variant == "grouped" else one_each
        runner._prefill_forward = (self._full_head_forward if variant == "per_prompt_full_head"
                                   else self.last_position_forward)
        for text in self.texts:
            self.engine.add_request(text, self.params)
        return self._admit_and_retire()

    def _admit_and_retire(self) -> float:
        started = time.perf_counter()
        self.engine._admit()
        ms = (time.perf_counter() - started) * 1e3
        for request in list(self.engine.scheduler.running):
            self.engine._retire(request)
        return ms


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    admission = Admission(args)
    sizes = admission.group_sizes()  # also the untimed first admission
    rounds = {name: [] for name in VARIANTS}
    for i in range(args.rounds):
        for name in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
            rounds[name].append(admission.run(name))
    medians = {name: statistics.median(ms) for name, ms in rounds.items()}
    ratios = {f"grouped/{base}": [g / b for g, b in zip(rounds["grouped"], rounds[base])]
              for base in ("per_prompt_full_head", "per_prompt")}
    print(f"prompt lengths {admission.lengths}; groups {sizes}")
    for name in VARIANTS:
        print(f"{name:>22}: median {medians[name]:.1f} ms  rounds {[round(ms, 1) for ms in rounds[name]]}")
    for name, values in ratios.items():
        print(f"{name}: median {statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]")
    if args.json is not None:
        args.json.write_text(json.dumps({"command": sys.argv, "weight_format": args.weight_format,
                                         "prompt_lengths": admission.lengths, "groups": sizes,
                                         "rounds_ms": rounds, "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
