"""Cost curves of the weight formats (`sglang_cast/models/weights.py`) on this machine.

    python tools/bench_kernels.py --json docs/results/kernels_amx.json

Measurements on the embedded SmolLM2-135M's real weights, all in this process:

1. kernels: the 30 layers' 210 linears, and the LM head ``[49152, 576]`` separately, in
   each format at M = 1, 2, 4, 8, 16, 32 activation rows (kernel calls only);
2. forward: the whole target (`LlamaModel` with its KV cache, batch 1, ``--context``
   committed tokens) running M = 1, 8, 16 new tokens, plus the LM head on every token,
   for each model variant (``<linears>[/<lm_head>][@<residual dtype>]``);
3. agreement: each variant's logits against fp32 on a few real prompts (max abs diff,
   top-1 agreement, and how far behind fp32's top the variant's token lies where they
   disagree);
4. breakdown: where an eager forward's time goes (GEMM, casts, attention, elementwise,
   Python/dispatch), target at M = 1 and 16 and one call of the shipped draft head;
5. spread: each variant's two kernel paths (one forward over a prompt vs token by
   token, `models/numerics.py`) on two prompts: the logit spread the near-tie judge
   measures, and how many positions' top two tokens it would call a near-tie;
6. compile (``--compile <variants>``): eager vs compiled layers (`models/compiled.py`);
7. greedy: ``torch.argmax`` against `cast.greedy_tokens` (blocked on the CPU) over
   fp32 logits of the target's vocabulary, M = 1, 9, 32 rows: the greedy read of a
   verification.

The machine may be shared, so variants are interleaved round-robin within each
repetition and the record keeps the median over ``--reps`` repetitions.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tools.benchkit

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor  # noqa: E402

from sglang_cast.cast import greedy_tokens  # noqa: E402
from sglang_cast.flags import int_list  # noqa: E402
from sglang_cast.hardware import cpu_name, isa_class  # noqa: E402
from sglang_cast.engine.build import EMBEDDED_DRAFT  # noqa: E402
from sglang_cast.models import KVCache, LlamaModel, causal_tree_mask, load_draft, load_target  # noqa: E402
from sglang_cast.models import llama  # noqa: E402
from sglang_cast.models.attention import AttentionBatch  # noqa: E402
from sglang_cast.models.compiled import compile_models  # noqa: E402
from sglang_cast.models.gguf_convert import read_q4_1_linears  # noqa: E402
from sglang_cast.models.loader import apply_target_format, embedded_gguf_path  # noqa: E402
from sglang_cast.models.numerics import judge_paths, kernel_paths_per_position  # noqa: E402
from sglang_cast.models.weights import (  # noqa: E402
    ACTIVATION_DTYPE,
    Format,
    Int4Groups,
    WeightFormat,
    pack_linear,
)
from tools.benchkit.cli import require_positive  # noqa: E402

KERNEL_ROWS = (1, 2, 4, 8, 16, 32)
FORWARD_ROWS = (1, 8, 16)
DEFAULT_VARIANTS = ("fp32", "bf16", "int8", "int4", "int4/bf16", "int4/int8", "int4/bf16@bf16")
GREEDY_ROWS = (1, 9, 32)
DATASET = Path(__file__).resolve().parents[1] / "datasets" / "mt_bench.jsonl"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def medians(samples: dict[str, dict[int, list[float]]]) -> dict[str, dict[str, dict]]:
    """``{name: {M: [seconds]}}`` -> ``{name: {"M": {"median": ms, "min": ms}}}``.

    The median is the reported number; the minimum is kept beside it because on a shared
    machine it is the closest sample to an unloaded run.
    """
    return {
        name: {
            str(rows): {
                "median": round(statistics.median(s) * 1000, 3),
                "min": round(min(s) * 1000, 3),
            }
            for rows, s in by_rows.items()
        }
        for name, by_rows in samples.items()
    }


def time_call(call: Callable[[], object], iters: int) -> float:
    """Seconds per call, averaged over ``iters`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters


def kernel_passes(model: LlamaModel, exact: dict[str, Int4Groups]) -> dict[str, dict[str, list]]:
    """Per format: ``{"linears": [call on x [M, K]], "lm_head": [call]}`` on real weights.

    fp32 is ``F.linear`` on fp32 activations (today's path); the packed formats call
    their kernel on bf16 activations, so casts are excluded (the forward includes them).
    """
    linears = [
        (name, module)
        for name, module in model.layers.named_modules()
        if isinstance(module, torch.nn.Linear)
    ]
    head = model.lm_head_weight
    passes: dict[str, dict[str, list]] = {}
    for fmt in Format:
        if fmt == Format.FP32:
            dense = [(m.weight, m.bias) for _, m in linears]
            passes[fmt.value] = {
                "linears": [(w.shape[1], lambda x, w=w, b=b: F.linear(x, w, b)) for w, b in dense],
                "lm_head": [(head.shape[1], lambda x: F.linear(x, head))],
            }
            continue
        packed = [pack_linear(fmt, m.weight, m.bias, exact.get(name)) for name, m in linears]
        packed_head = pack_linear(fmt, head, None)
        passes[fmt.value] = {
            "linears": [(p.in_features, p._matmul) for p in packed],
            "lm_head": [(packed_head.in_features, packed_head._matmul)],
        }
    return passes


def bench_kernels(model: LlamaModel, reps: int, iters: int) -> dict[str, dict[str, dict]]:
    """``{part: {format: {M: median ms}}}`` for part in linears / lm_head."""
    exact = read_q4_1_linears(embedded_gguf_path())
    passes = kernel_passes(model, exact)
    samples: dict = {
        part: {fmt: {rows: [] for rows in KERNEL_ROWS} for fmt in passes}
        for part in ("linears", "lm_head")
    }
    with torch.no_grad():
        for rep in range(reps + 1):  # repetition 0 warms every kernel up and is dropped
            for rows in KERNEL_ROWS:
                for fmt, parts in passes.items():
                    dtype = torch.float32 if fmt == "fp32" else ACTIVATION_DTYPE
                    for part, calls in parts.items():
                        inputs = {k: torch.randn(rows, k, dtype=dtype) for k, _ in calls}

                        def run(calls=calls, inputs=inputs) -> None:
                            for k, call in calls:
                                call(inputs[k])

                        seconds = time_call(run, iters)
                        if rep:
                            samples[part][fmt][rows].append(seconds)
    return {part: medians(by_format) for part, by_format in samples.items()}


def parse_variant(spec: str) -> tuple[WeightFormat, torch.dtype]:
    """``"int4/bf16@bf16"`` -> (WeightFormat int4/bf16, residual dtype bf16); default fp32."""
    fmt, _, dtype = spec.partition("@")
    if dtype and dtype not in DTYPES:
        raise ValueError(f"--variants: residual dtype {dtype!r} not one of {', '.join(DTYPES)}")
    return WeightFormat.parse(fmt), DTYPES[dtype or "fp32"]


def build_variants(fp32: LlamaModel, specs: list[str]) -> dict[str, LlamaModel]:
    """One model per variant; packed ones start as copies of the fp32 model."""
    exact = read_q4_1_linears(embedded_gguf_path())
    models = {}
    for spec in specs:
        fmt, dtype = parse_variant(spec)
        if fmt == WeightFormat() and dtype == torch.float32:
            models[spec] = fp32
            continue
        model = copy.deepcopy(fp32).to(dtype)
        int4_blocks = exact if fmt.linears.is_int4 else None
        models[spec] = apply_target_format(model, fmt, int4_blocks)
    return models


def prefilled_cache(model: LlamaModel, prefix: Tensor, scratch: int = 64) -> KVCache:
    """A one-slot cache in the model's dtype holding ``prefix`` ``[1, context]``, committed,
    with ``scratch`` free entries after it."""
    context = prefix.shape[1]
    dtype = model.embed_tokens.weight.dtype
    cache = KVCache.for_model(model.config, 1, context + scratch, "cpu", dtype)
    slots = torch.tensor([0])
    model(prefix, torch.arange(context)[None], cache, slots, causal_tree_mask(1, context, "cpu"))
    cache.commit(slots, torch.arange(context)[None], torch.tensor([context]))
    return cache


def bench_forward(models: dict[str, LlamaModel], context: int, reps: int, iters: int,
                  forward_rows: tuple[int, ...] = FORWARD_ROWS) -> dict:
    """``{variant: {M: median ms}}`` for one forward of M new tokens (each M of
    ``forward_rows``) after ``context`` committed ones, LM head included (the new tokens
    are written to scratch, never committed, so every call sees the same cache)."""
    config = next(iter(models.values())).config
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, config.vocab_size, (1, context), generator=gen)
    slots = torch.tensor([0])
    with torch.no_grad():
        caches = {spec: prefilled_cache(model, prefix, max(forward_rows)) for spec, model in models.items()}
        samples = {spec: {m: [] for m in forward_rows} for spec in models}
        for rep in range(reps + 1):
            for rows in forward_rows:
                tokens = torch.randint(0, config.vocab_size, (1, rows), generator=gen)
                positions = context + torch.arange(rows)[None]
                mask = causal_tree_mask(1, rows, "cpu")
                for spec, model in models.items():
                    cache = caches[spec]

                    def run(model=model, cache=cache) -> Tensor:
                        return model.logits(model(tokens, positions, cache, slots, mask).hidden)

                    seconds = time_call(run, iters)
                    if rep:
                        samples[spec][rows].append(seconds)
    return medians(samples)


def bench_compile(models: dict[str, LlamaModel], context: int, reps: int, iters: int) -> dict:
    """Each variant's forward eager vs with its layers compiled (`models/compiled.py`).

    Per variant: the seconds `compile_models` took (the engine's start-up cost; cold or
    warm depending on inductor's on-disk cache), then eager and compiled ms per forward
    at each M of ``FORWARD_ROWS`` (medians over ``reps``, interleaved) and the max
    |Δlogit| between them.  The compiled copy shares nothing mutable with the eager model.
    """
    config = next(iter(models.values())).config
    gen = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, config.vocab_size, (1, context), generator=gen)
    slots = torch.tensor([0])
    result: dict = {}
    with torch.inference_mode():
        for spec, model in models.items():
            twin = copy.deepcopy(model)
            start = time.perf_counter()
            compile_models(twin, None, max_batch_size=1)
            result[spec] = {"compile_s": round(time.perf_counter() - start, 1)}
            caches = {"eager": prefilled_cache(model, prefix), "compiled": prefilled_cache(twin, prefix)}
            runs = {"eager": model, "compiled": twin}
            samples: dict[str, dict[int, list[float]]] = {name: {m: [] for m in FORWARD_ROWS} for name in runs}
            for rep in range(reps + 1):
                for rows in FORWARD_ROWS:
                    tokens = torch.randint(0, config.vocab_size, (1, rows), generator=gen)
                    args = (tokens, context + torch.arange(rows)[None])
                    mask = causal_tree_mask(1, rows, "cpu")
                    logits = {}
                    for name, run in runs.items():

                        def step(run=run, cache=caches[name]) -> Tensor:
                            return run.logits(run(*args, cache, slots, mask).hidden)

                        samples[name][rows].append(time_call(step, iters))
                        logits[name] = step()
                    diff = float((logits["compiled"] - logits["eager"]).abs().max())
                    key = f"max_abs_logit_diff_m{rows}"
                    result[spec][key] = max(result[spec].get(key, 0.0), diff)
            for name, by_rows in samples.items():
                for rows in by_rows:
                    by_rows[rows] = by_rows[rows][1:]  # the first repetition is a warm-up
            result[spec].update({f"{name}_ms": ms for name, ms in medians(samples).items()})
            print(spec, json.dumps(result[spec]), flush=True)
    return result


# Profiler labels: the linears' ops and the LM head's count as GEMM (their dtype casts
# apart), ops inside `AttentionBatch.attend` as attention, every other op as elementwise.
_GEMM_LABELS = ("linear", "lm_head")
_CAST_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")


@contextlib.contextmanager
def stage_labels(model: LlamaModel, draft) -> Iterator[None]:
    """Wrap the linears, the LM head and attention in profiler ranges for `op_ms_by_stage`
    (patched here, for the duration of one profile, so the model code carries no labels)."""

    def labelled(fn: Callable, label: str) -> Callable:
        def run(*args, **kwargs):
            with torch.profiler.record_function(label):
                return fn(*args, **kwargs)
        return run

    originals = (llama.linear, AttentionBatch.attend, LlamaModel.logits)
    llama.linear = labelled(llama.linear, "linear")
    AttentionBatch.attend = labelled(AttentionBatch.attend, "attention")
    LlamaModel.logits = labelled(LlamaModel.logits, "lm_head")
    heads = [draft.fc] + ([draft.lm_head] if hasattr(draft, "lm_head") else [])
    for head in heads:
        head.forward = labelled(head.forward, "linear")
    try:
        yield
    finally:
        llama.linear, AttentionBatch.attend, LlamaModel.logits = originals
        for head in heads:
            del head.forward


def op_ms_by_stage(prof: torch.profiler.profile, calls: int) -> dict[str, float]:
    """ms per call of the ops run directly from Python, by stage (`stage_labels`)."""
    stages = {"gemm": 0.0, "casts": 0.0, "attention": 0.0, "elementwise": 0.0}
    for event in prof.events():
        parent = event.cpu_parent
        if not event.name.startswith("aten::") or (parent is not None and parent.name.startswith("aten::")):
            continue  # a nested op: its time is in its caller's
        label = parent.name if parent is not None else None
        if label in _GEMM_LABELS:
            stage = "casts" if event.name in _CAST_OPS else "gemm"
        else:
            stage = "attention" if label == "attention" else "elementwise"
        stages[stage] += event.cpu_time_total / 1000 / calls
    return stages


def breakdown(models: dict[str, LlamaModel], context: int, reps: int, iters: int) -> dict:
    """Where one eager forward's time goes, per variant: the target at M = 1 and 16 and
    one call of the shipped draft head.  Per repetition: the wall time (no profiler),
    then one profiled pass for the op time per stage; ``python_dispatch`` is the wall
    time minus all op time (the profiler's own overhead lands in the op times, so it is
    an underestimate).  Medians over ``reps``."""
    config = next(iter(models.values())).config
    gen = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, config.vocab_size, (1, context), generator=gen)
    slots = torch.tensor([0])
    result: dict = {}
    with torch.inference_mode():
        for spec, model in models.items():
            draft = load_draft(EMBEDDED_DRAFT, model, "cpu", model.embed_tokens.weight.dtype)
            cache = prefilled_cache(model, prefix)
            draft_cache = KVCache.for_model(config, 1, context + 64, "cpu", model.embed_tokens.weight.dtype, 1)
            draft_cache.lens[0] = context
            steps = {}
            for rows in (1, 16):
                tokens = torch.randint(0, config.vocab_size, (1, rows), generator=gen)
                positions, mask = context + torch.arange(rows)[None], causal_tree_mask(1, rows, "cpu")
                features = torch.randn(1, rows, config.hidden_size, generator=gen)
                steps[f"target_m{rows}"] = lambda t=tokens, p=positions, m=mask: model.logits(
                    model(t, p, cache, slots, m).hidden)
                steps[f"draft_m{rows}"] = lambda t=tokens, f=features, p=positions, m=mask: draft(
                    t, f, p, draft_cache, slots, m)
            for name, step in steps.items():
                rounds = []
                for _ in range(reps):
                    wall = time_call(step, iters) * 1000
                    with stage_labels(model, draft), torch.profiler.profile() as prof:
                        for _ in range(iters):
                            step()
                    rounds.append({"wall": wall, **op_ms_by_stage(prof, iters)})
                row = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
                row["python_dispatch"] = row["wall"] - sum(v for k, v in row.items() if k != "wall")
                result.setdefault(spec, {})[name] = {k: round(v, 2) for k, v in row.items()}
                print(spec, name, result[spec][name], flush=True)
    return result


def prompt_ids(tokenizer, path: Path, count: int) -> list[Tensor]:
    with path.open() as handle:
        turns = [json.loads(line)["turns"][0] for line in handle][:count]
    ids = []
    for turn in turns:
        messages = [{"role": "user", "content": turn}]
        encoded = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True
        )
        ids.append(torch.tensor([encoded["input_ids"]]))
    return ids


def prompt_logits(model: LlamaModel, ids: Tensor) -> Tensor:
    """fp32 logits ``[n, vocab]`` of every position of one prompt."""
    n = ids.shape[1]
    cache = KVCache.for_model(model.config, 1, n, "cpu", model.embed_tokens.weight.dtype)
    out = model(ids, torch.arange(n)[None], cache, torch.tensor([0]), causal_tree_mask(1, n, "cpu"))
    return model.logits(out.hidden)[0].float()


def agreement(models: dict[str, LlamaModel], prompts: list[Tensor]) -> dict:
    """Per variant vs fp32: max |Δlogit| and top-1 agreement over all prompt positions,
    and where the top-1 tokens differ, the largest gap in fp32's own logits between
    fp32's top and the variant's token.  These compare different weights, so the
    near-tie judge does not apply (it judges two kernel paths of one model); the gap is
    to be read against the kernel-path spread (`kernel_path_spread`)."""
    reference = models["fp32"]
    result = {}
    with torch.no_grad():
        expected = [prompt_logits(reference, ids) for ids in prompts]
        for spec, model in models.items():
            max_diff, agree, total, largest_gap = 0.0, 0, 0, 0.0
            for ids, ref in zip(prompts, expected):
                got = prompt_logits(model, ids)
                max_diff = max(max_diff, float((got - ref).abs().max()))
                top_ref, top_got = ref.argmax(-1), got.argmax(-1)
                agree += int((top_ref == top_got).sum())
                total += top_ref.numel()
                gaps = ref.max(-1).values - ref.gather(-1, top_got[:, None])[:, 0]  # [n], 0 where they agree
                largest_gap = max(largest_gap, float(gaps.max()))
            result[spec] = {
                "max_abs_logit_diff": round(max_diff, 4),
                "top1_agreement": round(agree / total, 4),
                "positions": total,
                "disagreements": total - agree,
                "largest_disagreement_gap": round(largest_gap, 4),
            }
    return result


def kernel_path_spread(models: dict[str, LlamaModel], prompts: list[Tensor]) -> dict:
    """Per variant: each prompt through one forward and token by token (the M = n vs
    M = 1 kernel paths, `numerics.kernel_paths_per_position`): the paths' largest and
    median spread (max |Δlogit| at a position), the median top-1/top-2 gap, the positions
    whose top two tokens the near-tie judge (`numerics.judge_paths`) would accept as a
    divergence, and the positions where the two paths' argmaxes actually differ."""
    result = {}
    for spec, model in models.items():
        spreads, gaps, near_ties, flips = [], [], 0, 0
        for ids in prompts:
            for paths in kernel_paths_per_position(model, ids[0].tolist()):
                spreads.append(paths.spread)
                top2 = paths.verify.float().topk(2)
                gaps.append(float(top2.values[0] - top2.values[1]))
                first, second = top2.indices.tolist()
                near_ties += judge_paths(paths, first, second).near_tie
                flips += int(paths.verify.argmax() != paths.stepwise.argmax())
        result[spec] = {
            "positions": len(spreads),
            "max_abs_spread": round(max(spreads), 7),
            "median_abs_spread": round(statistics.median(spreads), 7),
            "median_top2_gap": round(statistics.median(gaps), 4),
            "top2_near_ties": near_ties,
            "argmax_flips": flips,
        }
        print(spec, result[spec], flush=True)
    return result


@torch.inference_mode()
def bench_greedy(vocab: int, reps: int, iters: int) -> dict[str, dict[str, dict]]:
    """ms per call of ``torch.argmax`` and `greedy_tokens` over ``[1, M, vocab]`` fp32
    logits, interleaved within each repetition."""
    calls = {"torch.argmax": lambda x: torch.argmax(x, dim=-1), "greedy_tokens": greedy_tokens}
    inputs = {rows: torch.randn(1, rows, vocab) for rows in GREEDY_ROWS}
    samples: dict[str, dict[int, list[float]]] = {name: {rows: [] for rows in inputs} for name in calls}
    for _ in range(reps):
        for rows, logits in inputs.items():
            for name, call in calls.items():
                samples[name][rows].append(time_call(lambda: call(logits), iters))
    return medians(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="where to write the record")
    parser.add_argument("--reps", type=int, default=7, help="repetitions (medians reported)")
    parser.add_argument("--iters", type=int, default=5, help="back-to-back calls per sample")
    parser.add_argument("--context", type=int, default=256, help="committed tokens (forward)")
    parser.add_argument("--forward-rows", type=int_list(1, increasing=False), default=FORWARD_ROWS,
                        help="comma list of new-token counts M the forward stage times (default: "
                             f"{','.join(map(str, FORWARD_ROWS))})")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--prompts", type=Path, default=DATASET, help="mt_bench-style jsonl")
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--skip", default="",
                        help="comma list of kernels,forward,agreement,breakdown,spread,greedy")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--compile", default="", help="comma list of variants to also run with compiled layers"
    )
    args = parser.parse_args()
    require_positive(parser, args, "reps", "iters", "context", "num_prompts", "threads")
    skip = set(filter(None, args.skip.split(",")))
    specs = args.variants.split(",")
    if "fp32" not in specs:
        specs.insert(0, "fp32")  # the reference of the agreement check
    compile_specs = list(filter(None, args.compile.split(",")))
    for spec in specs + compile_specs:
        parse_variant(spec)  # fail on a bad spec before minutes of work

    torch.set_num_threads(args.threads)
    fp32, config, tokenizer = load_target(None, "cpu", torch.float32)
    record: dict = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_name(),
        "isa_class": isa_class(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "command": "python tools/bench_kernels.py " + " ".join(sys.argv[1:]),
        "reps": args.reps,
        "iters": args.iters,
        "unit": "ms per pass: median and min over reps",
        "load_average_at_start": os.getloadavg(),
    }
    if "kernels" not in skip:
        print("kernels ...", flush=True)
        record["kernels"] = bench_kernels(fp32, args.reps, args.iters)
        print(json.dumps(record["kernels"], indent=1), flush=True)
    if not {"forward", "agreement", "breakdown", "spread"} <= skip:
        models = build_variants(fp32, specs)
    if "forward" not in skip:
        print("forward ...", flush=True)
        forward = bench_forward(models, args.context, args.reps, args.iters, args.forward_rows)
        record["forward"] = {"context": args.context, "ms": forward}
        print(json.dumps(record["forward"], indent=1), flush=True)
    if "agreement" not in skip:
        prompts = prompt_ids(tokenizer, args.prompts, args.num_prompts)
        record["agreement"] = agreement(models, prompts)
        print(json.dumps(record["agreement"], indent=1), flush=True)
    if "breakdown" not in skip:
        record["breakdown"] = breakdown(models, args.context, args.reps, args.iters)
    if "spread" not in skip:
        prompts = prompt_ids(tokenizer, args.prompts, 2)
        record["kernel_path_spread"] = kernel_path_spread(models, prompts)
    if "greedy" not in skip:
        record["greedy"] = bench_greedy(fp32.config.vocab_size, args.reps, args.iters)
        print(json.dumps(record["greedy"], indent=1), flush=True)
    if compile_specs:
        compiled = build_variants(fp32, compile_specs)
        record["compile"] = bench_compile(compiled, args.context, args.reps, args.iters)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
