"""The self_instruct and prompts stages: which requests the target will answer.

Four sources, each benchmark-filtered (`benchmark_filter`) before any answer is made:
requests the target invents for itself (self-instruct, below), requests about the
standard library's docstrings (`docstrings`), requests filled into our templates
(below, from the data of `templates`), and multi-part task requests (`tasks`).
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sglang_cast.cast import SamplingParams, TreeShape

from . import tasks
from .benchmark_filter import BenchmarkFilter, filter_prompts, load_benchmark_prompts
from .config import DataConfig, PipelineConfig
from .docstrings import doc_prompts, stdlib_doc_items
from .target import Generation, Target, chat_ids, generate
from .templates import (BROAD_TOPICS, CHAT_TEMPLATES, ITEMS, MATH_TEMPLATES, MORE_TOPICS, ROLES, TASK_TYPES, TOPICS,
                        WORLD_TOPICS)
from .workspace import read_jsonl, write_jsonl


def build_self_instruct(target: Target, cfg: PipelineConfig, out: Path) -> dict[str, Any]:
    """The target invents user requests for itself; resumable per shard."""
    metas = self_instruct_requests(cfg.data.self_instruct, cfg.seed)
    rows = []
    for gen in _generate_requests(target, metas, out, cfg.data, cfg.seed):
        text = target.tokenizer.decode(_strip_eos(gen.output_ids, target.eos_token_ids), skip_special_tokens=True)
        request = clean_request(text, gen.truncated)
        if request is not None:
            rows.append({"prompt": request})
    write_jsonl(out / "requests.jsonl", rows)
    return {"meta_prompts": len(metas), "usable_requests": len(rows)}


def build_prompts(target: Target, cfg: PipelineConfig, self_instruct_dir: Path, out: Path) -> dict[str, Any]:
    """Self-instruct, documentation, template and task requests, deduplicated and
    benchmark-filtered.

    Self-instruct and documentation requests are shuffled together; template requests
    follow them, then task requests, so the first prompts, and the answer shards of a
    work dir built without the later sources, stay the same when those are added.
    """
    invented = [row["prompt"] for row in read_jsonl(self_instruct_dir / "requests.jsonl")]
    documented = doc_prompts(stdlib_doc_items(), cfg.data.doc_prompts, cfg.seed)
    templated = template_prompts(cfg.data.template_prompts, cfg.seed)
    multi_part = tasks.task_prompts(cfg.data.task_prompts, cfg.seed)
    benchmark = BenchmarkFilter.from_prompts(load_benchmark_prompts(cfg.benchmark_dir))
    candidates = [(p, "self_instruct") for p in invented] + [(p, "docs") for p in documented]
    random.Random(cfg.seed).shuffle(candidates)
    candidates += [(p, "templates") for p in templated] + [(p, "tasks") for p in multi_part]
    source: dict[str, str] = {}
    for prompt, name in candidates:
        source.setdefault(prompt, name)
    kept, report = filter_prompts(
        (p for p, _ in candidates), benchmark,
        fits=lambda p: len(chat_ids(target.tokenizer, p)) <= cfg.data.max_prompt_tokens)
    write_jsonl(out / "prompts.jsonl", [{"prompt": p, "source": source[p]} for p in kept])
    names = ("self_instruct", "docs", "templates", "tasks")
    by_source = {name: sum(source[p] == name for p in kept) for name in names}
    counts = (len(invented), len(documented), len(templated), len(multi_part))
    return {"candidates": dict(zip(names, counts)), "kept_by_source": by_source, **report.to_dict()}


def _strip_eos(ids: list[int], eos: tuple[int, ...]) -> list[int]:
    return ids[:-1] if ids and ids[-1] in eos else ids


def _generate_requests(target: Target, prompts: list[str], out: Path, cfg: DataConfig,
                       seed: int) -> list[Generation]:
    """Sampled generation with the vanilla engine in shards of ``cfg.shard_prompts``; a
    shard file is written atomically once complete and read back on a rerun."""
    encoded = [chat_ids(target.tokenizer, p) for p in prompts]
    context = max((len(ids) for ids in encoded), default=1) + cfg.request_tokens
    engine = target.engine(None, TreeShape(), cfg.gen_batch, context)
    results: list[Generation] = []
    starts = range(0, len(encoded), cfg.shard_prompts)
    for shard, start in enumerate(tqdm(starts, desc="self-instruct shards", unit="shard")):
        path = out / f"shard_{shard:05d}.jsonl"
        if not path.is_file():
            batch = encoded[start : start + cfg.shard_prompts]
            params = [SamplingParams(temperature=cfg.request_temperature, top_p=0.95,
                                     max_new_tokens=cfg.request_tokens, seed=seed * 1_000_003 + start + i)
                      for i in range(len(batch))]
            gens = generate(engine, batch, params, desc=f"self-instruct shard {shard}")
            write_jsonl(path, [dataclasses.asdict(g) for g in gens])
        results += [Generation(**row) for row in read_jsonl(path)]
    return results


# ------------------------------------------------------------------ self-instruct
def self_instruct_requests(count: int, seed: int) -> list[str]:
    """Meta-prompts asking the target to invent one user request each.

    (task type, topic) pairs are drawn without replacement from the full grid so a
    small ``count`` still spreads over many task types and topics.
    """
    rng = random.Random(seed)
    grid = [(task, topic) for task in TASK_TYPES for topic in BROAD_TOPICS]
    rng.shuffle(grid)
    pairs = [grid[i % len(grid)] for i in range(count)]
    return [
        f"Write one {task} that a user might send to an AI assistant. The topic is {topic}. "
        "Reply with the user's request only, without answering it."
        for task, topic in pairs
    ]


_LABEL = re.compile(r"^\s*(?:\**\s*)?(?:user(?:'s)? request|request|user|question|prompt|task)\s*\**\s*[:\-]\s*",
                    re.IGNORECASE)
_NOT_A_REQUEST = ("sure", "certainly", "here is", "here's", "i'm sorry", "i am sorry", "as an ai", "i cannot",
                  "i can't", "of course")


def clean_request(text: str, truncated: bool) -> str | None:
    """The user request inside a self-instruct generation, or ``None`` if there is none.

    Keeps the first paragraph, strips labels and quotes, and for a generation cut by the
    token limit keeps only whole sentences.  Rejects answers-instead-of-requests and
    fragments too short or too long to be a real prompt.
    """
    text = _LABEL.sub("", text.strip().split("\n\n")[0]).strip().strip('"“”').strip()
    if truncated:
        end = max(text.rfind(mark) for mark in ".?!")
        text = text[: end + 1] if end >= 0 else ""
    words = text.split()
    if not 5 <= len(words) <= 150 or text.lower().startswith(_NOT_A_REQUEST):
        return None
    return text


# ------------------------------------------------------------------ templates
def template_prompts(count: int, seed: int) -> list[str]:
    """``count`` requests from `CHAT_TEMPLATES` (four in five) and `MATH_TEMPLATES`,
    with topics, roles and numbers drawn with ``seed``."""
    rng = random.Random(seed)
    topics = TOPICS + MORE_TOPICS + WORLD_TOPICS  # this order: run 12 drew its templates from it
    prompts = []
    for i in range(count):
        if i % 5 == 4:
            a, n = rng.randint(2, 30), rng.randint(2, 9)
            step = rng.randint(2, 9)
            template = rng.choice(MATH_TEMPLATES)
            prompts.append(template.format(
                a=a, b=rng.randint(10, 300), c=rng.randint(31, 400), n=n, m=rng.randint(2, 12),
                p=rng.choice((5, 10, 15, 20, 25, 40, 75)), bill=((a * n) // 10 + 1) * 10 + 10,
                item=rng.choice(ITEMS), a2=a + step, a3=a + 2 * step))
        else:
            topic, other = rng.sample(topics, 2)
            prompts.append(rng.choice(CHAT_TEMPLATES).format(topic=topic, other=other, role=rng.choice(ROLES)))
    return prompts
