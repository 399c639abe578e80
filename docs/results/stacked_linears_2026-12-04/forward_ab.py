"""Stacked linears (`weights.StacksLinears`) against apart, one forward at a time: the target in
int4/int8 at 1, 8 and 17 tokens (a plain step, a small and a large verify) and the shipped draft
head in int8 at 1 and 8 rows, batch 1 at a 256-token context, every (model, layout, rows) timed
round-robin (`measure_costs`), so load on a shared machine hits all alike.  Layouts: `stacked`
(each attention's q/k/v and each MLP's gate/up as one linear, what main does), `qkv` (q/k/v only)
and `apart` (every linear apart, main before stacking).  Each layout's logits are compared with
`stacked`'s first (identical up to fp32 summation order is not enough: bitwise).

Usage (repository root):
    .venv/bin/python docs/results/stacked_linears_2026-12-04/forward_ab.py ROUNDS JSON [LAYOUTS]
LAYOUTS (default apart,stacked) names the layouts in the order they are loaded: a forward's time
moves a few per cent with load order on this EPYC, so runs rotate it."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from sglang_cast.models.attention import causal_tree_mask  # noqa: E402
from sglang_cast.engine.format_choice import MEASURE_CONTEXT, measure_costs  # noqa: E402
from sglang_cast.engine.runner import feature_width  # noqa: E402
from sglang_cast.engine.timing import ForwardTimer  # noqa: E402
from sglang_cast.hardware import cpu_name, isa_class  # noqa: E402
from sglang_cast.models import KVCache, load_draft, load_target, weights  # noqa: E402
from sglang_cast.models.llama import MLP  # noqa: E402
from sglang_cast.models.weights import DraftFormat  # noqa: E402
from sglang_cast.training.config import DEFAULT_OUTPUT  # noqa: E402

rounds, out = int(sys.argv[1]), Path(sys.argv[2])
LAYOUTS = (sys.argv[3] if len(sys.argv) > 3 else "apart,stacked").split(",")
OTHERS = [layout for layout in LAYOUTS if layout != "stacked"]
torch.set_num_threads(2)
ROWS = {"target": (1, 8, 17), "draft": (1, 8)}


def load(layout: str):
    """Target int4/int8 and draft int8 in ``layout`` (module docstring), by switching off what
    main stacks: all of it (`_stack_linears`) or the MLPs' (`MLP.stack`)."""
    stack, stack_mlp = weights._stack_linears, MLP.stack
    if layout == "apart":
        weights._stack_linears = lambda root, exact: dict(exact)
    if layout == "qkv":
        MLP.stack = lambda self, gate_up: None
    try:
        target, config, _ = load_target(None, "cpu", torch.float32, "int4/int8")
        draft = load_draft(DEFAULT_OUTPUT, target, "cpu", torch.float32, DraftFormat.parse("int8"))
    finally:
        weights._stack_linears, MLP.stack = stack, stack_mlp
    assert (target.layers[0].self_attn.qkv_proj is not None) == (layout != "apart")
    assert (target.layers[0].mlp.gate_up_proj is not None) == (layout == "stacked")
    return target, config, draft


timers, outputs = {}, {}
for layout in LAYOUTS:
    target, config, draft = load(layout)
    cache = KVCache.for_model(config, 1, MEASURE_CONTEXT + 17, torch.device("cpu"), torch.float32)
    draft_cache = KVCache.for_model(config, 1, MEASURE_CONTEXT + 8, torch.device("cpu"), torch.float32, num_layers=1)
    models = {"target": ForwardTimer(lambda *a, t=target: t.logits(t(*a).hidden), cache, config.vocab_size),
              "draft": ForwardTimer(draft, draft_cache, config.vocab_size, feature_width(target, draft))}
    for role, timer in models.items():
        for rows in ROWS[role]:
            timers[f"{role}:{layout}:{rows}"] = (timer, rows)
            generator = torch.Generator().manual_seed(rows)
            tokens = torch.randint(0, config.vocab_size, (1, rows), generator=generator)
            feats = (torch.randn(1, rows, timer.features_width, generator=generator)
                     if timer.features_width else None)
            positions = torch.arange(rows).expand(1, rows)
            with torch.inference_mode():
                got = timer.call(tokens, feats, positions, torch.arange(1), causal_tree_mask(1, rows, timer.device))()
            outputs[f"{role}:{layout}:{rows}"] = got if isinstance(got, torch.Tensor) else got.logits
identical = {key: bool(torch.equal(value, outputs[key.replace(key.split(":")[1], "stacked")]))
             for key, value in outputs.items() if ":stacked:" not in key}
print("bitwise identical to stacked:", identical, flush=True)
costs = measure_costs(lambda key, _: timers[key][0].time_once(1, MEASURE_CONTEXT, timers[key][1]), list(timers), [0],
                      rounds=rounds, warmup=3, budget_s=float("inf"))
ms = {key: costs[key][0] for key in timers}
over_stacked = {f"{layout}_over_stacked": {f"{role}:{rows}": ms[f"{role}:{layout}:{rows}"] / ms[f"{role}:stacked:{rows}"]
                                           for role in ROWS for rows in ROWS[role]} for layout in OTHERS}
record = {"layouts_in_load_order": LAYOUTS, "cpu": cpu_name(), "isa_class": isa_class(), "threads": 2,
          "rounds": rounds, "context": MEASURE_CONTEXT, "identical": identical, "median_ms": ms, **over_stacked}
for role in ROWS:
    for rows in ROWS[role]:
        s = ms[f"{role}:stacked:{rows}"]
        print(f"{role:6} rows {rows:2}: stacked {s:.3f} ms; " + ", ".join(
            f"{layout} {ms[f'{role}:{layout}:{rows}']:.3f} ms ({ms[f'{role}:{layout}:{rows}'] / s:.3f}x)"
            for layout in OTHERS))
out.write_text(json.dumps(record, indent=1))
