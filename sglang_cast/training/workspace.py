"""Stage directories that make a run resumable, and the settings record that decides
whether a finished stage is reused.

A stage builds into ``<work-dir>/<stage>.partial`` and becomes ``<work-dir>/<stage>`` by
one rename, with ``meta.json`` holding its settings, summary and seconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .config import PipelineConfig

META = "meta.json"


def write_json(path: Path, payload: Any) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """One JSON object per line, written atomically like `write_json`."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


# Fields added to the configs after work dirs were first built are recorded in a stage's
# settings only when set, so a work dir built without them stays valid (a changed record
# would discard its finished stages and checkpoints).  `settings_of` applies this to the
# fields below; `stage_settings` adds the data stages' late fields (`task_prompts`,
# `soft_top_k`, `init_head`, `vocab_swap`, `vocab_grow`) the same way.
LATE_FIELDS = ("soft_labels", "vocab_swap", "vocab_grow", "lm_head_basis", "replay", "bf16_autocast")


def settings_of(config: Any) -> dict[str, Any]:
    """A JSON-comparable record of a config dataclass."""
    record = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    return {key: value for key, value in record.items() if not (key in LATE_FIELDS and not value)}


def run_stage(work_dir: Path, name: str, settings: dict[str, Any], build: Callable[[Path], dict[str, Any]]) -> Path:
    """Run ``build(partial_dir)`` unless ``<work_dir>/<name>`` is already complete.

    The finished directory appears by one rename, so it is either complete or absent.
    A partial directory from an interrupted run is reused (stages resume inside it)
    unless it was started with other settings; a finished stage built with other
    settings is an error rather than silently reused.
    """
    final, partial = work_dir / name, work_dir / f"{name}.partial"
    if (final / META).is_file():
        stored = json.loads((final / META).read_text())["settings"]
        if stored != settings:
            raise SystemExit(f"stage {name!r} in {final} was built with other settings; "
                             f"delete that directory (and later stages) or use another --work-dir")
        print(f"[{name}] already complete, skipped", flush=True)
        return final
    started_file = partial / "settings.json"
    if partial.is_dir() and (not started_file.is_file() or json.loads(started_file.read_text()) != settings):
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    write_json(started_file, settings)
    print(f"[{name}] running", flush=True)
    began = time.time()
    summary = build(partial)
    seconds = time.time() - began
    write_json(partial / META, {"settings": settings, "summary": summary, "seconds": seconds})
    os.replace(partial, final)
    print(f"[{name}] done in {seconds:.0f} s: {json.dumps(summary)[:300]}", flush=True)
    return final


def stage_summary(work_dir: Path, name: str) -> dict[str, Any]:
    """A finished stage's ``meta.json``: its settings, summary and seconds."""
    return json.loads((work_dir / name / META).read_text())


def stage_settings(cfg: PipelineConfig) -> dict[str, dict[str, Any]]:
    """The settings record of every stage, by stage name.

    Each stage's settings are its own parameters plus its input stage's settings, so
    changing a late parameter never invalidates earlier work.  Batch sizes are left
    out: they change the order of floating-point sums, not what a stage means.
    """
    d = cfg.data
    s_requests = {"seed": cfg.seed, "self_instruct": d.self_instruct, "request_tokens": d.request_tokens,
                  "request_temperature": d.request_temperature, "shard_prompts": d.shard_prompts}
    s_prompts = {**s_requests, "doc_prompts": d.doc_prompts, "template_prompts": d.template_prompts,
                 "max_prompt_tokens": d.max_prompt_tokens, "benchmarks": str(cfg.benchmark_dir)}
    if d.task_prompts:
        s_prompts["task_prompts"] = d.task_prompts
    s_responses = {**s_prompts, "response_tokens": d.response_tokens, "max_answers": d.max_answers}
    if d.soft_top_k:
        s_responses["soft_top_k"] = d.soft_top_k
    if cfg.target_format != "fp32":
        s_responses["target_format"] = cfg.target_format
    s_vocab = {**s_responses, "draft_vocab": cfg.train.draft_vocab}
    if cfg.init_head is not None:
        s_vocab["init_head"] = str(cfg.init_head)
    if cfg.train.vocab_swap:
        s_vocab["vocab_swap"] = cfg.train.vocab_swap
    if cfg.train.vocab_grow:
        s_vocab["vocab_grow"] = cfg.train.vocab_grow
    s_train = {**s_vocab, "train": settings_of(cfg.train)}
    s_eval = {**s_train, "eval": settings_of(cfg.eval)}
    return {"self_instruct": s_requests, "prompts": s_prompts, "responses": s_responses, "vocab": s_vocab,
            "train": s_train, "eval": s_eval}

