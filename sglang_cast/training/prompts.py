"""The self_instruct and prompts stages: which requests the target will answer."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sglang_cast.cast import SamplingParams, TreeShape

from . import data, tasks
from .config import DataConfig, PipelineConfig
from .target import Target
from .workspace import write_jsonl


def build_self_instruct(target: Target, cfg: PipelineConfig, out: Path) -> dict[str, Any]:
    """The target invents user requests for itself; resumable per shard."""
    metas = data.self_instruct_requests(cfg.data.self_instruct, cfg.seed)
    rows = []
    for gen in _generate_requests(target, metas, out, cfg.data, cfg.seed):
        text = target.tokenizer.decode(_strip_eos(gen.output_ids, target.eos_token_ids), skip_special_tokens=True)
        request = data.clean_request(text, gen.truncated)
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
    invented = [row["prompt"] for row in data.read_jsonl(self_instruct_dir / "requests.jsonl")]
    documented = data.doc_prompts(data.stdlib_doc_items(), cfg.data.doc_prompts, cfg.seed)
    templated = data.template_prompts(cfg.data.template_prompts, cfg.seed)
    multi_part = tasks.task_prompts(cfg.data.task_prompts, cfg.seed)
    benchmark = data.BenchmarkFilter.from_prompts(data.load_benchmark_prompts(cfg.benchmark_dir))
    candidates = [(p, "self_instruct") for p in invented] + [(p, "docs") for p in documented]
    random.Random(cfg.seed).shuffle(candidates)
    candidates += [(p, "templates") for p in templated] + [(p, "tasks") for p in multi_part]
    source: dict[str, str] = {}
    for prompt, name in candidates:
        source.setdefault(prompt, name)
    kept, report = data.filter_prompts(
        (p for p, _ in candidates), benchmark,
        fits=lambda p: len(data.chat_ids(target.tokenizer, p)) <= cfg.data.max_prompt_tokens)
    write_jsonl(out / "prompts.jsonl", [{"prompt": p, "source": source[p]} for p in kept])
    names = ("self_instruct", "docs", "templates", "tasks")
    by_source = {name: sum(source[p] == name for p in kept) for name in names}
    counts = (len(invented), len(documented), len(templated), len(multi_part))
    return {"candidates": dict(zip(names, counts)), "kept_by_source": by_source, **report.to_dict()}



def _strip_eos(ids: list[int], eos: tuple[int, ...]) -> list[int]:
    return ids[:-1] if ids and ids[-1] in eos else ids


def _generate_requests(target: Target, prompts: list[str], out: Path, cfg: DataConfig,
                       seed: int) -> list[data.Generation]:
    """Sampled generation with the vanilla engine in shards of ``cfg.shard_prompts``; a
    shard file is written atomically once complete and read back on a rerun."""
    encoded = [data.chat_ids(target.tokenizer, p) for p in prompts]
    context = max((len(ids) for ids in encoded), default=1) + cfg.request_tokens
    engine = target.engine(None, TreeShape(), cfg.gen_batch, context)
    results: list[data.Generation] = []
    starts = range(0, len(encoded), cfg.shard_prompts)
    for shard, start in enumerate(tqdm(starts, desc="self-instruct shards", unit="shard")):
        path = out / f"shard_{shard:05d}.jsonl"
        if not path.is_file():
            batch = encoded[start : start + cfg.shard_prompts]
            params = [SamplingParams(temperature=cfg.request_temperature, top_p=0.95,
                                     max_new_tokens=cfg.request_tokens, seed=seed * 1_000_003 + start + i)
                      for i in range(len(batch))]
            gens = data.generate(engine, batch, params, desc=f"self-instruct shard {shard}")
            write_jsonl(path, [dataclasses.asdict(g) for g in gens])
        results += [data.Generation(**row) for row in data.read_jsonl(path)]
    return results

