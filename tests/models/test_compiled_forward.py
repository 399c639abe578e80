"""The compiled forward (sglang_cast/models/compiled.py) against the eager reference:
same outputs across row counts, cache lengths and tree masks, no recompilation as the
cache grows or after warm-up, and greedy engine output that differs from eager only at
near-ties of the target's own logits."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from sglang_cast.models import (
    DraftConfig,
    Eagle3Draft,
    EagleDraft,
    KVCache,
    LlamaModel,
    ModelConfig,
    WeightFormat,
    causal_tree_mask,
    judge_by_kernel_paths,
)
from sglang_cast.models.compiled import compile_models, compile_wanted
from sglang_cast.models.weights import apply_weight_format

# Four layers: the fewest an EAGLE-3 head reads features from (`eagle3_feature_layers`).
CONFIG = ModelConfig.from_hf({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": True,
})
# Row counts of one forward: decoding, small trees, a verify-sized one, a prefill.
ROWS = (1, 2, 5, 16, 40)


def randomized(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1 + 0.1 * noise if "norm" in name else 0.2 * noise)
    return module.eval()


def tiny_pair(layout: str, spec: str) -> tuple[LlamaModel, EagleDraft | Eagle3Draft]:
    target = randomized(LlamaModel(CONFIG), 0)
    layer = ModelConfig.from_hf({**CONFIG.to_hf(), "num_hidden_layers": 1})
    if layout == "eagle":
        draft = EagleDraft(DraftConfig("eagle", layer, True, layer.vocab_size), target)
    else:
        draft = Eagle3Draft(DraftConfig("eagle3", layer, False, draft_vocab_size=32), target)
    apply_weight_format(target, WeightFormat.parse(spec))
    return target, randomized(draft, 1)


def tolerance(spec: str) -> float:
    """fp32: last-bit differences of fused reductions; packed: bf16 activations, where
    the compiled graph rounds the residual stream's casts in other places than eager."""
    return 1e-4 if spec == "fp32" else 0.25


# int8:dense4 switches to its dense weights from 4 rows: warm-up compiles the packed side
# (n <= 3), so larger forwards fail the row guard and run eagerly, on the dense side.
@pytest.fixture(scope="module", params=[("eagle3", "fp32"), ("eagle", "int4/int8"), ("eagle3", "int8:dense4")],
                ids=lambda p: "-".join(p))
def compiled_pair(request):
    """An eager pair and a copy of it carrying the compiled path (same weights)."""
    layout, spec = request.param
    eager = tiny_pair(layout, spec)
    compiled = tiny_pair(layout, spec)
    compile_models(*compiled, max_batch_size=2)
    return spec, eager, compiled


def random_tree_mask(n: int, seed: int) -> torch.Tensor:
    """``[1, n, n]`` ancestor mask of a random tree (node i's parent is before it)."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        parent = int(torch.randint(0, i, (1,), generator=gen))
        mask[i] |= mask[parent]
    return mask[None]


def filled_cache(model: LlamaModel, length: int, seed: int) -> KVCache:
    cache = KVCache.for_model(CONFIG, 1, 128, "cpu", torch.float32)
    gen = torch.Generator().manual_seed(seed)
    cache.k.normal_(generator=gen)
    cache.v.normal_(generator=gen)
    cache.lens[0] = length
    return cache


@torch.inference_mode()
def test_compiled_target_matches_eager_across_rows_lengths_and_trees(compiled_pair) -> None:
    spec, (eager, _), (compiled, _) = compiled_pair
    graphs = counters["stats"]["unique_graphs"]
    for step, (rows, length) in enumerate([(r, length) for r in ROWS for length in (3, 17, 60)]):
        ids = torch.randint(0, CONFIG.vocab_size, (1, rows), generator=torch.Generator().manual_seed(step))
        mask = random_tree_mask(rows, step) if rows > 1 else causal_tree_mask(1, 1, "cpu")
        positions = length + mask.sum(-1) - 1
        outputs = []
        for model in (eager, compiled):
            cache = filled_cache(model, length, step)
            out = model(ids, positions, cache, torch.tensor([0]), mask, (1, 2))
            outputs.append((model.logits(out.hidden), out.captured, cache.k))
        (expected, expected_features, expected_k), (got, got_features, got_k) = outputs
        torch.testing.assert_close(got, expected, atol=tolerance(spec), rtol=0)
        for a, b in zip(got_features, expected_features):
            torch.testing.assert_close(a, b, atol=tolerance(spec), rtol=0)
        torch.testing.assert_close(got_k, expected_k, atol=tolerance(spec), rtol=0)  # same cache writes
    # Warm-up compiled every graph: no length, row count or tree shape compiles another.
    assert counters["stats"]["unique_graphs"] == graphs


@torch.inference_mode()
def test_compiled_draft_matches_eager(compiled_pair) -> None:
    spec, (_, eager), (_, compiled) = compiled_pair
    hidden = CONFIG.hidden_size
    for rows, width in ((1, hidden), (4, hidden), (7, 3 * hidden if eager.config.layout == "eagle3" else hidden)):
        gen = torch.Generator().manual_seed(rows)
        ids = torch.randint(0, CONFIG.vocab_size, (1, rows), generator=gen)
        features = torch.randn(1, rows, width, generator=gen)
        mask = random_tree_mask(rows, rows)
        outs = []
        for draft in (eager, compiled):
            cache = KVCache.for_model(CONFIG, 1, 64, "cpu", torch.float32, num_layers=1)
            cache.lens[0] = 9
            outs.append(draft(ids, features, 9 + mask.sum(-1) - 1, cache, torch.tensor([0]), mask))
        torch.testing.assert_close(outs[1].hidden, outs[0].hidden, atol=tolerance(spec), rtol=0)
        torch.testing.assert_close(outs[1].logits, outs[0].logits, atol=tolerance(spec), rtol=0)


@torch.inference_mode()
def test_a_shape_unseen_at_warm_up_runs_eagerly_without_compiling(compiled_pair) -> None:
    spec, (eager, _), (compiled, _) = compiled_pair
    graphs = counters["stats"]["unique_graphs"]
    ids = torch.randint(0, CONFIG.vocab_size, (4, 3), generator=torch.Generator().manual_seed(5))
    mask = causal_tree_mask(4, 3, "cpu")
    positions = torch.arange(3).expand(4, 3)
    outs = [model(ids, positions, KVCache.for_model(CONFIG, 4, 8, "cpu", torch.float32), torch.arange(4), mask)
            for model in (eager, compiled)]
    torch.testing.assert_close(outs[1].hidden, outs[0].hidden, atol=tolerance(spec), rtol=0)
    assert counters["stats"]["unique_graphs"] == graphs


def test_compile_modes() -> None:
    fp32, _ = tiny_pair("eagle", "fp32")
    packed, _ = tiny_pair("eagle", "int4/int8")
    assert not compile_wanted("auto", fp32) and compile_wanted("auto", packed)
    assert compile_wanted("on", fp32) and not compile_wanted("off", packed)
    with pytest.raises(ValueError, match="compile: 'yes' is not one of auto, on, off"):
        compile_wanted("yes", fp32)


@pytest.mark.parametrize("spec", ["fp32", "int4/int8"])
def test_greedy_engine_output_differs_from_eager_only_at_near_ties(spec: str) -> None:
    """Greedy speculative decoding on the compiled target against vanilla eager decoding
    of the same weights: every divergence must be a near-tie by the measured kernel-path
    judge (`numerics.judge_by_kernel_paths`, on the eager target; in fp32 its two paths
    agree to ~1e-6, so in practice none occurs).  A planted wrong token is not one."""
    from sglang_cast.cast import SamplingParams
    from support.tiny import PROMPTS, engine

    eager, _ = tiny_pair("eagle", spec)
    compiled, _ = tiny_pair("eagle", spec)
    compile_models(compiled, None, max_batch_size=4)
    params = SamplingParams(max_new_tokens=24)
    reference = [r.token_ids for r in engine("vanilla", eager, 4).generate(PROMPTS, params)]
    outputs = [r.token_ids for r in engine("eagle2", compiled, 4).generate(PROMPTS, params)]
    prompts = [engine("vanilla", eager, 1).tokenizer.encode(p) for p in PROMPTS]
    verdicts = [judge_by_kernel_paths(eager, p, ref, out) for p, ref, out in zip(prompts, reference, outputs)]
    assert all(v is None or v.near_tie for v in verdicts), verdicts
    # The check can fail: the token eager ranked last at the first step is no near-tie.
    with torch.no_grad():
        logits = eager.logits(eager.causal_hidden(prompts[0])[-1])
    planted = [int(logits.argmin())] + reference[0][1:]
    verdict = judge_by_kernel_paths(eager, prompts[0], reference[0], planted)
    assert verdict is not None and not verdict.near_tie and verdict.gap > verdict.tolerance
