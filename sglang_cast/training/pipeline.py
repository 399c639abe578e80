"""Every stage in order, each reused when finished with the same settings."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

from .config import PipelineConfig
from .evaluate import build_eval
from .head import export_head
from .prompts import build_prompts, build_self_instruct
from .responses import build_responses
from .target import Target
from .train import build_train
from .vocab import build_vocab
from .workspace import run_stage, stage_settings, stage_summary, write_json

STAGES = ("self_instruct", "prompts", "responses", "vocab", "train", "eval")
STOPS = ("responses", "train", "eval")  # where a run may stop: data only, a head without its evaluation, all


def run_pipeline(target: Target, cfg: PipelineConfig, until: str = "eval",
                 answerer: Target | None = None) -> dict[str, Any]:
    """Every stage in order up to ``until`` (one of `STOPS`), skipping completed ones;
    returns the report it writes.  Stopping after ``responses`` builds data only (a
    held-out set for `gap`, or data several recipes' runs share); after ``train`` the
    head is exported but not evaluated.  ``answerer``, the same model stored in
    ``cfg.target_format``, answers the training prompts when that format is not fp32
    (the responses stage's settings name it)."""
    if (answerer is None) != (cfg.target_format == "fp32"):
        raise ValueError(f"target_format {cfg.target_format}: pass the target stored in it as answerer "
                         "(and none for fp32)")
    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    work = cfg.work_dir.expanduser()
    work.mkdir(parents=True, exist_ok=True)
    s = stage_settings(cfg)
    requests = run_stage(work, "self_instruct", s["self_instruct"], lambda out: build_self_instruct(target, cfg, out))
    prompts = run_stage(work, "prompts", s["prompts"], lambda out: build_prompts(target, cfg, requests, out))
    responses = run_stage(work, "responses", s["responses"],
                          lambda out: build_responses(answerer or target, cfg, prompts, out))
    if until == "responses":
        return finish(work, STAGES[:3], {})
    vocab = run_stage(work, "vocab", s["vocab"], lambda out: build_vocab(target, cfg, responses, out))
    trained = run_stage(work, "train", s["train"], lambda out: build_train(target, cfg, vocab, responses, out))
    output = cfg.output_dir.expanduser()
    export = {"export": {"path": str(cfg.output_dir), "bytes": export_head(target, vocab, trained, output)}}
    if until == "train":
        return finish(work, STAGES[:5], export)
    run_stage(work, "eval", s["eval"], lambda out: build_eval(target, cfg, output, out))
    return finish(work, STAGES, export)


def finish(work: Path, stages: tuple[str, ...], extra: dict[str, Any]) -> dict[str, Any]:
    """The report of the ``stages`` run: each one's ``meta.json`` (and ``extra``), written
    to ``report.json`` and printed."""
    report = {**{name: stage_summary(work, name) for name in stages}, **extra}
    write_json(work / "report.json", report)
    print_report(report)
    return report


def print_report(report: dict[str, Any]) -> None:
    """One line per stage: minutes taken and the start of its summary."""
    for name, entry in report.items():
        seconds = entry.get("seconds")
        timing = f" ({seconds / 60:.1f} min)" if seconds is not None else ""
        print(f"{name}{timing}: {json.dumps(entry.get('summary', entry))[:600]}")
