"""The responses stage: the target's greedy answers and the features it computed for them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from . import data
from .config import PipelineConfig
from .target import Target
from .workspace import write_jsonl


def build_responses(target: Target, cfg: PipelineConfig, prompts_dir: Path, out: Path) -> dict[str, Any]:
    """The target's greedy answer to every kept prompt, with the target features of
    every token; resumable per shard (``shard_N.npy`` features, with ``--soft-top-k``
    ``shard_N.soft.npz`` soft labels, then ``shard_N.jsonl`` ids, whose presence marks
    the shard complete)."""
    prompts = [data.chat_ids(target.tokenizer, row["prompt"]) for row in data.read_jsonl(prompts_dir / "prompts.jsonl")]
    if cfg.data.max_answers:
        prompts = prompts[: cfg.data.max_answers]
    size = cfg.data.shard_prompts
    done = sum(1 for start in range(0, len(prompts), size) if (out / f"shard_{start // size:05d}.jsonl").is_file())
    with tqdm(total=len(prompts), initial=min(done * size, len(prompts)), desc="responses", unit="answer") as bar:
        for start in range(0, len(prompts), size):
            marker = out / f"shard_{start // size:05d}.jsonl"
            if marker.is_file():
                continue
            chunk = prompts[start : start + size]
            answers = []
            for answer in data.greedy_with_features(target.model, chunk, cfg.data.response_tokens, cfg.data.gen_batch,
                                                    target.feature_layers, target.eos_token_ids,
                                                    cfg.data.soft_top_k):
                answers.append(answer)
                bar.update(1)
            answers.sort(key=lambda answer: answer.index)
            tmp = marker.with_name(marker.stem + ".tmp.npy")
            np.save(tmp, np.concatenate([a.features for a in answers]))
            os.replace(tmp, marker.with_suffix(".npy"))
            if cfg.data.soft_top_k:
                with open(tmp, "wb") as handle:
                    np.savez(handle, logprobs=np.concatenate([a.top_logprobs for a in answers]),
                             ids=np.concatenate([a.top_ids for a in answers]))
                os.replace(tmp, soft_path(marker))
            write_jsonl(marker, [{"prompt_ids": chunk[a.index], "output_ids": a.output_ids, "truncated": a.truncated}
                                 for a in answers])
    gens = read_generations(out)
    return {"sequences": len(gens), "prompt_tokens": sum(len(g.prompt_ids) for g in gens),
            "response_tokens": sum(len(g.output_ids) for g in gens), "truncated": sum(g.truncated for g in gens),
            "feature_bytes": sum(p.stat().st_size for p in out.glob("shard_*.npy"))}


def soft_path(shard_jsonl: Path) -> Path:
    """The soft-label file that goes with an answer shard."""
    return shard_jsonl.with_suffix(".soft.npz")


def read_generations(stage_dir: Path) -> list[data.Generation]:
    """Every answer of a stage directory, shard by shard."""
    return [data.Generation(**row) for path in sorted(stage_dir.glob("shard_*.jsonl"))
            for row in data.read_jsonl(path)]

