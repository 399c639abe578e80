"""The responses stage: the target's greedy answers and the features it computed for them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from sglang_cast.models import KVCache, LlamaModel, causal_tree_mask

from .config import PipelineConfig
from .target import Generation, Target, chat_ids
from .workspace import read_jsonl, write_jsonl


def build_responses(target: Target, cfg: PipelineConfig, prompts_dir: Path, out: Path) -> dict[str, Any]:
    """The target's greedy answer to every kept prompt, with the target features of
    every token; resumable per shard (``shard_N.npy`` features, with ``--soft-top-k``
    ``shard_N.soft.npz`` soft labels, then ``shard_N.jsonl`` ids, whose presence marks
    the shard complete)."""
    prompts = [chat_ids(target.tokenizer, row["prompt"]) for row in read_jsonl(prompts_dir / "prompts.jsonl")]
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
            for answer in greedy_with_features(target.model, chunk, cfg.data.response_tokens, cfg.data.gen_batch,
                                                    target.feature_layers, target.eos_token_ids,
                                                    cfg.data.soft_top_k):
                answers.append(answer)
                bar.update(1)
            write_shard(marker, chunk, answers)
    gens = read_generations(out)
    return {"sequences": len(gens), "prompt_tokens": sum(len(g.prompt_ids) for g in gens),
            "response_tokens": sum(len(g.output_ids) for g in gens), "truncated": sum(g.truncated for g in gens),
            "feature_bytes": sum(p.stat().st_size for p in out.glob("shard_*.npy"))}


def write_shard(marker: Path, prompts: Sequence[list[int]], answers: list[Answer]) -> None:
    """One answer shard in prompt order: the features (``.npy``), the soft labels when the
    answers carry them (``.soft.npz``), then the ids (``marker``, a ``.jsonl``), whose
    presence marks the shard complete."""
    answers = sorted(answers, key=lambda answer: answer.index)
    tmp = marker.with_name(marker.stem + ".tmp.npy")
    np.save(tmp, np.concatenate([a.features for a in answers]))
    os.replace(tmp, marker.with_suffix(".npy"))
    if answers[0].top_ids is not None:
        with open(tmp, "wb") as handle:
            np.savez(handle, logprobs=np.concatenate([a.top_logprobs for a in answers]),
                     ids=np.concatenate([a.top_ids for a in answers]))
        os.replace(tmp, soft_path(marker))
    write_jsonl(marker, [{"prompt_ids": prompts[a.index], "output_ids": a.output_ids, "truncated": a.truncated}
                         for a in answers])


def soft_path(shard_jsonl: Path) -> Path:
    """The soft-label file that goes with an answer shard."""
    return shard_jsonl.with_suffix(".soft.npz")


def read_generations(stage_dir: Path) -> list[Generation]:
    """Every answer of a stage directory, shard by shard."""
    return [Generation(**row) for path in sorted(stage_dir.glob("shard_*.jsonl"))
            for row in read_jsonl(path)]


# ------------------------------------------------------------------ greedy answers with features
@dataclass
class _Running:
    index: int
    output_ids: list[int]
    features: list[torch.Tensor]  # [rows, width] chunks: the prompt's, then one per fed token
    top: list[tuple[torch.Tensor, torch.Tensor]]  # per output token: (log-probs [k], ids [k])


@dataclass(frozen=True)
class Answer:
    """A greedy answer and the target features of every token except the last.

    ``features[t]`` is the concatenated residual streams entering the capture layers at
    token ``t`` of ``prompt + output``; the last token is never fed back, and the draft
    never needs its feature (its pair would predict past the end).
    """

    index: int
    output_ids: list[int]
    truncated: bool
    features: np.ndarray  # [len(prompt) + len(output) - 1, width] float16
    top_logprobs: np.ndarray | None = None  # [len(output), k] float16: the target's k likeliest next
    top_ids: np.ndarray | None = None  # tokens when it chose output token j (row j), best first; int32


@torch.inference_mode()
def greedy_with_features(model: LlamaModel, prompts: Sequence[list[int]], max_new_tokens: int, max_batch: int,
                         layers: tuple[int, ...], eos_token_ids: Iterable[int], top_k: int = 0) -> Iterator[Answer]:
    """Continuous-batched greedy decoding that keeps the target features it computes.

    Generation already runs the target over every token of prompt + answer, so keeping
    the residual streams it passes through costs nothing, whereas a separate extraction
    pass would re-run the target over the whole corpus (a quarter of the CPU budget).
    With ``top_k`` it also keeps the target's ``top_k`` likeliest tokens and their
    log-probabilities at every answer token: the soft labels of distillation.
    Answers are yielded as they finish, not in prompt order.
    """
    eos = frozenset(eos_token_ids)
    capacity = max(len(p) for p in prompts) + max_new_tokens
    cache = KVCache.for_model(model.config, max_batch, capacity, "cpu", next(model.parameters()).dtype)
    queue = list(enumerate(prompts))[::-1]
    running: dict[int, _Running] = {}
    free = list(range(max_batch))[::-1]

    def step(slots: list[int], tokens: torch.Tensor, positions: torch.Tensor) -> Iterator[Answer]:
        slot_ids = torch.tensor(slots)
        n = tokens.shape[1]
        mask = causal_tree_mask(len(slots), n, "cpu")
        out = model(tokens, positions, cache, slot_ids, mask, layers)
        cache.commit(slot_ids, torch.arange(n).expand(len(slots), n), torch.full((len(slots),), n))
        features = torch.cat(out.captured, dim=-1)
        logits = model.logits(out.hidden[:, -1])
        next_ids = logits.argmax(-1).tolist()
        if top_k:
            top = torch.log_softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
        for row, slot in enumerate(slots):
            seq = running[slot]
            seq.features.append(features[row])
            seq.output_ids.append(next_ids[row])
            if top_k:
                seq.top.append((top.values[row], top.indices[row]))
            if next_ids[row] in eos or len(seq.output_ids) >= max_new_tokens:
                del running[slot]
                cache.reset(slot)
                free.append(slot)
                soft = {}
                if top_k:
                    soft = {"top_logprobs": torch.stack([v for v, _ in seq.top]).to(torch.float16).numpy(),
                            "top_ids": torch.stack([i for _, i in seq.top]).to(torch.int32).numpy()}
                yield Answer(seq.index, seq.output_ids, next_ids[row] not in eos,
                             torch.cat(seq.features).to(torch.float16).numpy(), **soft)

    while queue or running:
        while queue and free:
            index, ids = queue.pop()
            slot = free.pop()
            running[slot] = _Running(index, [], [], [])
            yield from step([slot], torch.tensor([ids]), torch.arange(len(ids)).view(1, -1))
        if running:
            slots = sorted(running)
            tokens = torch.tensor([[running[s].output_ids[-1]] for s in slots])
            yield from step(slots, tokens, cache.lens[torch.tensor(slots)].view(-1, 1).clone())
