"""Weight formats (`models/weights.py`): exact Q4_1 decoding, each packed kernel against the
dense matmul of the weights it stands for, and whole models in every format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, dequantize

from sglang_cast.hardware import cpu_flags
from sglang_cast.models import KVCache, LlamaModel, causal_tree_mask
from sglang_cast.models.amx_tiles import unavailable_reason
from sglang_cast.models.numerics import judge_by_kernel_paths
from sglang_cast.models.weights import (
    GROUP_SIZE,
    Bf16Linear,
    DenseFromRows,
    DenseSwitch,
    DraftFormat,
    Format,
    Int4Groups,
    Int4Linear,
    Int8Linear,
    WeightFormat,
    apply_weight_format,
    int4_from_q4_1,
    int4_quantize,
)
from support.models import make_pair, random_q4_1

AMX_MISSING = unavailable_reason(cpu_flags())  # why this CPU cannot run the int4amx/int8amx kernels, or None

BF16_EPS = torch.finfo(torch.bfloat16).eps  # 2^-7: spacing of bf16 numbers at 1.0


def test_q4_1_blocks_decode_exactly_like_gguf() -> None:
    raw = random_q4_1(48, 128, seed=0)
    reference = np.asarray(dequantize(raw, GGMLQuantizationType.Q4_1), dtype=np.float32)
    groups = int4_from_q4_1(raw)
    assert groups.codes.shape == (48, 128) and int(groups.codes.max()) <= 15
    assert torch.equal(groups.dequantize(), torch.from_numpy(reference))


def test_int4_quantize_error_is_within_half_a_step() -> None:
    weight = torch.randn(64, 96, generator=torch.Generator().manual_seed(1))
    groups = int4_quantize(weight)
    step = groups.scales.repeat_interleave(GROUP_SIZE, dim=1)
    assert ((groups.dequantize() - weight).abs() <= step / 2 + 1e-6).all()
    with pytest.raises(ValueError, match="multiple of 32"):
        int4_quantize(torch.randn(4, 40))


def _bf16_matmul_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per-output error bound of a bf16 matmul: inputs, weights and the output each round
    once (relative 2^-8), so |error| <= 3 · 2^-8 · sum_k |x_k| |w_nk| (+ accumulation slack)."""
    return 4 * (BF16_EPS / 2) * (x.abs() @ weight.abs().t()) + 1e-6


@pytest.mark.parametrize("kind", ["bf16", "int8", "int4"])
def test_packed_linear_matches_its_dequantised_weights(kind: str) -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 128, generator=gen)
    if kind == "int4":
        groups = int4_from_q4_1(random_q4_1(64, 128, seed=3))
        # The kernel reads scales/zeros in bf16: that is the one rounding of stored weights.
        rounded = Int4Groups(
            groups.codes, groups.scales.bfloat16().float(), groups.zeros.bfloat16().float()
        )
        layer, weight = Int4Linear(groups), rounded.dequantize()
    else:
        w = torch.randn(64, 128, generator=gen) * 0.05
        layer = Bf16Linear(w) if kind == "bf16" else Int8Linear(w)
        weight = stored_weight(Format(kind), w)
    out = layer.forward(x)
    assert out.dtype == torch.float32 and out.shape == (5, 64)
    error = (out - x @ weight.t()).abs()
    assert (error <= _bf16_matmul_bound(x, weight)).all(), error.max()
    # A wrong weight layout (transposed groups, swapped nibbles) is far outside the bound.
    assert not torch.allclose(out, x @ weight.flip(1).t(), atol=1e-2)


def test_weight_format_parse() -> None:
    assert WeightFormat.parse("int4") == WeightFormat(Format.INT4, Format.INT4)
    assert WeightFormat.parse("int4/bf16") == WeightFormat(Format.INT4, Format.BF16)
    assert str(WeightFormat.parse("int4/bf16")) == "int4/bf16"
    assert WeightFormat.parse("int4/int8+int8") == WeightFormat(Format.INT4, Format.INT8, DraftFormat(Format.INT8))
    assert WeightFormat.parse("int4+bf16") == WeightFormat(Format.INT4, Format.INT4, DraftFormat(Format.BF16))
    assert str(WeightFormat.parse("int4/int8+int8")) == "int4/int8+int8"
    assert str(WeightFormat.parse("int4/int8+fp32")) == "int4/int8"  # a dense draft is the default
    for bad in ("int3", "int4/bf16/fp32", "", "int4+", "+int8", "int4+int9", "int4/int8/int8+int8"):
        with pytest.raises(ValueError, match="weight_format"):
            WeightFormat.parse(bad)


def test_weight_format_parse_dense_from() -> None:
    fmt = WeightFormat.parse("int4/int8:dense32+int8")
    assert fmt == WeightFormat(Format.INT4, Format.INT8, DraftFormat(Format.INT8), DenseSwitch(32))
    assert str(fmt) == "int4/int8:dense32+int8" and str(WeightFormat.parse("int8:dense4")) == "int8:dense4"
    assert WeightFormat.parse("int4/int8").dense.rows == 0  # no suffix: never switches
    for bad in ("int4:dense0", "int4:dense", "int4:densex", "int4:dense-3", "int4:dense9999999"):
        with pytest.raises(ValueError, match=r"weight_format.*integer in \[1, \d+\]"):
            WeightFormat.parse(bad)
    with pytest.raises(ValueError, match="weight_format.*needs a packed target part"):
        WeightFormat.parse("fp32:dense32+int8")


def test_weight_format_parse_the_draft_parts_own_dense_switch() -> None:
    fmt = WeightFormat.parse("int4/int8:dense16:bf16+int8:dense8:bf16")
    assert fmt == WeightFormat(Format.INT4, Format.INT8, DraftFormat(Format.INT8, DenseSwitch(8, Format.BF16)),
                               DenseSwitch(16, Format.BF16))
    assert str(fmt) == "int4/int8:dense16:bf16+int8:dense8:bf16"
    assert WeightFormat.parse("int4+int8:dense32") == WeightFormat(Format.INT4, Format.INT4,
                                                                   DraftFormat(Format.INT8, DenseSwitch(32)))
    assert WeightFormat.parse("int4:dense16+int8").draft.dense == DenseSwitch()  # not the target's switch
    with pytest.raises(ValueError, match="weight_format.*needs a packed draft part"):
        WeightFormat.parse("int4+bf16:dense8")
    with pytest.raises(ValueError, match=r"weight_format.*integer in \[1, \d+\]"):
        WeightFormat.parse("int4+int8:dense0")
    with pytest.raises(ValueError, match="weight_format.*draft part must be one of"):
        WeightFormat.parse("int4+int9:dense8")


def test_weight_format_parse_a_bf16_dense_side() -> None:
    fmt = WeightFormat.parse("int4/int8:dense16:bf16+int8")
    assert fmt == WeightFormat(Format.INT4, Format.INT8, DraftFormat(Format.INT8), DenseSwitch(16, Format.BF16))
    assert str(fmt) == "int4/int8:dense16:bf16+int8"
    assert str(WeightFormat.parse("int8:dense4:fp32")) == "int8:dense4"  # fp32 is the default side
    for bad in ("int4:dense16:int8", "int4:dense16:", "int4:dense16:bf16:bf16"):
        with pytest.raises(ValueError, match=r"weight_format.*dense side after ':dense16:' must be one of fp32, bf16"):
            WeightFormat.parse(bad)


STACKED_AS = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
              "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}


def stacked_names(names) -> list[str]:
    """Linear names as a packed format has them: each attention's q, k and v as one
    ``qkv_proj``, each MLP's gate and up as one ``gate_up_proj`` (`weights.StacksLinears`)."""
    out: list[str] = []
    for name in names:
        parent, _, leaf = name.rpartition(".")
        name = f"{parent}.{STACKED_AS[leaf]}" if leaf in STACKED_AS else name
        out += [] if name in out else [name]
    return out


PACKED_FORMATS = [Format.INT4, Format.INT8, Format.BF16] + [
    pytest.param(fmt, marks=pytest.mark.skipif(AMX_MISSING is not None, reason=f"AMX tile kernels: {AMX_MISSING}"))
    for fmt in (Format.INT4_AMX, Format.INT8_AMX)]


@pytest.mark.parametrize("fmt", PACKED_FORMATS)
@pytest.mark.parametrize("doubled", [False, True])  # a target layer's input, an EAGLE-3 layer's doubled one
def test_stacked_q_k_v_project_as_the_three_packed_linears_do_bit_for_bit(fmt: Format, doubled: bool) -> None:
    """A packed format runs an attention's q, k and v as one linear over their stacked
    weights (`weights.StacksLinears`): the rotated q, k and v equal those of the three
    linears packed apart, bit for bit, at 1 and at 17 rows, biases included."""
    from sglang_cast.models.llama import Attention, rope_cos_sin
    from sglang_cast.models.weights import _stack_linears, pack_linear

    config = make_pair("qwen2", seed=4)[1].config  # q/k/v biases
    width = config.hidden_size * (2 if doubled else 1)
    torch.manual_seed(3)
    apart, stacked = Attention(config, 0, width), Attention(config, 0, width)
    stacked.load_state_dict(apart.state_dict())
    for name in apart.stacked_parts():
        part = getattr(apart, name)
        setattr(apart, name, pack_linear(fmt, part.weight, part.bias))
    _stack_linears(stacked, {})
    stacked.qkv_proj = pack_linear(fmt, stacked.qkv_proj.weight, stacked.qkv_proj.bias)
    q_out, kv_out = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    assert stacked.q_proj is None and stacked.qkv_proj.out_features == q_out + 2 * kv_out
    for n in (1, 17):
        x = torch.randn(n, width)
        cos, sin = rope_cos_sin(torch.arange(n)[None], config, torch.float32)
        for got, expected in zip(stacked.project(x, cos, sin), apart.project(x, cos, sin), strict=True):
            assert torch.equal(got, expected), (fmt, n)


@pytest.mark.parametrize("fmt", PACKED_FORMATS)
def test_stacked_gate_up_run_the_mlp_as_the_two_packed_linears_do_bit_for_bit(fmt: Format) -> None:
    """A packed format runs an MLP's gate and up as one linear over their stacked weights:
    the block's output equals that of the two linears packed apart, bit for bit."""
    from sglang_cast.models.llama import MLP
    from sglang_cast.models.weights import _stack_linears, pack_linear

    config = make_pair("llama", seed=4)[1].config
    torch.manual_seed(3)
    apart, stacked = MLP(config), MLP(config)
    stacked.load_state_dict(apart.state_dict())
    _stack_linears(stacked, {})
    assert stacked.gate_proj is None and stacked.gate_up_proj.out_features == 2 * config.intermediate_size
    for module in (apart, stacked):
        for name, part in list(module.named_children()):
            setattr(module, name, pack_linear(fmt, part.weight, part.bias))
    for n in (1, 17):
        x = torch.randn(n, config.hidden_size)
        assert torch.equal(stacked(x), apart(x)), (fmt, n)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
@pytest.mark.parametrize("fmt", [Format.INT8, Format.BF16])
def test_a_draft_head_in_a_packed_format_packs_its_own_linears_only(kind: str, fmt: Format, tmp_path: Path) -> None:
    from torch import nn

    from sglang_cast.models import load_draft, save_draft
    from support.models import draft_inputs, draft_run, random_draft

    _, target = make_pair("llama")
    save_draft(random_draft(kind, target), tmp_path)
    dense = load_draft(tmp_path, target, "cpu", torch.float32)
    packed = load_draft(tmp_path, target, "cpu", torch.float32, DraftFormat(fmt))
    linears = stacked_names(name for name, module in dense.named_modules() if type(module) is nn.Linear)
    assert "fc" in linears and (kind == "eagle" or "lm_head" in linears)
    assert all(type(packed.get_submodule(name)) is {Format.INT8: Int8Linear, Format.BF16: Bf16Linear}[fmt]
               for name in linears)
    assert not any(type(m) is nn.Linear for m in packed.modules())
    assert all(type(m) is nn.Linear for m in target.layers.modules() if "Linear" in type(m).__name__)
    inputs = draft_inputs(dense, target)
    reference, out = draft_run(dense, *inputs), draft_run(packed, *inputs)
    error = (out.logits - reference.logits).abs().max() / reference.logits.abs().max()
    assert 0 < error < 0.05  # the format's rounding, nothing more


def test_a_draft_heads_dense_switch_runs_large_forwards_as_the_bf16_head_does(tmp_path: Path) -> None:
    """``+int8:dense8:bf16``: a draft forward of 8+ rows (2 sequences x 4 tokens) equals
    the bf16 head's bit for bit, one of fewer rows the plain int8 head's: the switch is
    the draft's own, by the rows of each draft forward."""
    from sglang_cast.models import load_draft, save_draft
    from support.models import draft_inputs, draft_run, random_draft

    _, target = make_pair("llama")
    save_draft(random_draft("eagle3", target), tmp_path)
    heads = {spec: load_draft(tmp_path, target, "cpu", torch.float32, WeightFormat.parse(f"fp32+{spec}").draft)
             for spec in ("int8", "bf16", "int8:dense8:bf16")}
    switched = heads["int8:dense8:bf16"]
    assert {type(m.large) for m in switched.modules() if isinstance(m, DenseFromRows)} == {Bf16Linear}
    for n, same, other in ((4, "bf16", "int8"), (3, "int8", "bf16")):
        inputs = draft_inputs(switched, target, n=n)
        out = draft_run(switched, *inputs).logits
        assert torch.equal(out, draft_run(heads[same], *inputs).logits), n
        assert not torch.equal(out, draft_run(heads[other], *inputs).logits), n


def _logits(model: LlamaModel, tokens: torch.Tensor) -> torch.Tensor:
    config = model.config
    cache = KVCache.for_model(config, 1, 64, torch.device("cpu"), torch.float32)
    slots = torch.tensor([0])
    positions = torch.arange(tokens.shape[1])[None]
    with torch.no_grad():
        out = model(tokens, positions, cache, slots, causal_tree_mask(1, tokens.shape[1], "cpu"))
        return model.logits(out.hidden)


def stored_weight(fmt: Format, weight: torch.Tensor) -> torch.Tensor:
    """The float32 weight a format actually multiplies by (its rounding, nothing else)."""
    if fmt == Format.BF16:
        return weight.bfloat16().float()
    if fmt == Format.INT8:
        layer = Int8Linear(weight)
        return layer.codes.float() * layer.scales.float()[:, None]
    if fmt == Format.INT4:
        g = int4_quantize(weight)
        return Int4Groups(
            g.codes, g.scales.bfloat16().float(), g.zeros.bfloat16().float()
        ).dequantize()
    return weight


@pytest.mark.parametrize("spec", ["fp32", "bf16", "int8", "int4", "int4/bf16"])
def test_model_in_each_format_matches_its_stored_weights(spec: str) -> None:
    """A packed model equals an fp32 model holding the format's rounded weights, up to
    the bf16 rounding of activations; the rounded weights themselves are tested above."""
    fmt = WeightFormat.parse(spec)
    _, reference = make_pair("qwen2", seed=4)  # has q/k/v biases and an untied LM head
    _, model = make_pair("qwen2", seed=4)
    apply_weight_format(model, fmt)
    with torch.no_grad():
        for name, param in reference.named_parameters():
            if name.startswith("layers.") and "proj.weight" in name:
                param.copy_(stored_weight(fmt.linears, param))
            elif name == "lm_head.weight":
                param.copy_(stored_weight(fmt.lm_head, param))
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, model.config.vocab_size, (1, 12), generator=gen)
    expected, got = _logits(reference, tokens), _logits(model, tokens)
    if spec == "fp32":
        assert torch.equal(got, expected)  # the reference path is untouched
        return
    packed = [m for m in model.modules() if isinstance(m, (Bf16Linear, Int8Linear, Int4Linear))]
    assert len(packed) == 4 * 4 + 1  # 4 linears per layer (q/k/v and gate/up stacked), plus the LM head
    # bf16 activations: each stage (a layer's linears, the head, the output cast) rounds
    # at unit roundoff u = 2^-8 relative; allow 2u per stage for the random weights'
    # amplification.  Measured ~0.01 here; a wrong weight layout is O(1).
    stages = model.config.num_layers + 2
    relative = (got - expected).norm() / expected.norm()
    assert relative < 2 * stages * BF16_EPS / 2, relative


def test_dense_from_runs_large_forwards_on_the_dense_weights_and_small_ones_packed() -> None:
    """``int4:dense8``: a forward of 8+ rows through every linear and the LM head equals
    the fp32 model bit for bit (the dense weights are the model's own, shared, not
    copied); one of fewer rows equals the plain ``int4`` model's, so the switch is by rows."""
    _, reference = make_pair("qwen2", seed=4)  # q/k/v biases: the dense path keeps them
    _, packed = make_pair("qwen2", seed=4)
    _, switched = make_pair("qwen2", seed=4)
    storages = {param.data_ptr() for param in switched.parameters()}
    apply_weight_format(packed, WeightFormat.parse("int4"))
    apply_weight_format(switched, WeightFormat.parse("int4:dense8"))
    wrapped = [m for m in switched.modules() if isinstance(m, DenseFromRows)]
    assert len(wrapped) == 4 * 4 + 1 and switched.packed_head in wrapped  # every linear (some stacked) and the head
    # no copies but the stacked weights (the parts' released)
    stacked = {m for layer in switched.layers for m in (layer.self_attn.qkv_proj, layer.mlp.gate_up_proj)}
    assert all((m.large.weight.data_ptr() in storages) == (m not in stacked) for m in wrapped)
    gen = torch.Generator().manual_seed(5)
    long, short = (torch.randint(0, reference.config.vocab_size, (1, n), generator=gen) for n in (8, 7))  # the edge
    assert torch.equal(_logits(switched, long), _logits(reference, long))
    assert not torch.equal(_logits(packed, long), _logits(reference, long))
    assert torch.equal(_logits(switched, short), _logits(packed, short))
    assert not torch.equal(_logits(switched, short), _logits(reference, short))


def test_a_bf16_dense_side_runs_large_forwards_as_the_bf16_format_does() -> None:
    """``int4:dense8:bf16``: a forward of 8+ rows equals the ``bf16`` model's bit for bit
    (biases included), one of fewer rows the plain ``int4`` model's."""
    models = {spec: make_pair("qwen2", seed=4)[1] for spec in ("bf16", "int4", "int4:dense8:bf16", "fp32")}
    for spec, model in models.items():
        apply_weight_format(model, WeightFormat.parse(spec))
    switched = models["int4:dense8:bf16"]
    assert all(isinstance(m.large, Bf16Linear) for m in switched.modules() if isinstance(m, DenseFromRows))
    gen = torch.Generator().manual_seed(5)
    long, short = (torch.randint(0, switched.config.vocab_size, (1, n), generator=gen) for n in (8, 7))
    assert torch.equal(_logits(switched, long), _logits(models["bf16"], long))
    assert not torch.equal(_logits(switched, long), _logits(models["fp32"], long))
    assert torch.equal(_logits(switched, short), _logits(models["int4"], short))
    assert not torch.equal(_logits(switched, short), _logits(models["bf16"], short))


@pytest.mark.slow
def test_embedded_int4_holds_the_gguf_blocks_exactly() -> None:
    """The int4 linears of the embedded model are its Q4_1 blocks: with the kernel's
    bf16 scales/zeros set aside (tested above), they dequantise to the fp32 conversion."""
    from sglang_cast.models import load_target
    from sglang_cast.models.gguf_convert import read_q4_1_linears
    from sglang_cast.models.loader import embedded_gguf_path

    fp32, config, _ = load_target(None, "cpu", torch.float32)
    exact = read_q4_1_linears(embedded_gguf_path())
    assert len(exact) == 7 * config.num_layers
    dense = fp32.state_dict()
    for name, groups in exact.items():
        assert torch.equal(groups.dequantize(), dense[f"layers.{name}.weight"]), name
    int4, _, _ = load_target(None, "cpu", torch.float32, weight_format="int4/bf16")
    assert str(int4.weight_format) == "int4/bf16"
    for name in ("self_attn", "mlp"):  # the GGUF's q, k and v blocks, and gate and up, stacked
        module = int4.layers[0].get_submodule(name)
        linear = getattr(module, module.STACKED)
        assert isinstance(linear, Int4Linear)
        parts = [f"0.{name}.{part}" for part in module.stacked_parts()]
        stacked = Int4Groups.stacked([exact[part] for part in parts])
        assert torch.equal(stacked.dequantize(), torch.cat([dense[f"layers.{part}.weight"] for part in parts]))
        expected = Int4Linear(stacked)
        assert torch.equal(linear.packed, expected.packed) and torch.equal(linear.scales_and_zeros,
                                                                             expected.scales_and_zeros)
    assert isinstance(int4.packed_head, Bf16Linear)


# --------------------------------------------------------------------------- bench tool


@pytest.fixture(scope="module")
def bench_kernels():
    from tools import bench_kernels

    return bench_kernels


def test_bench_variant_specs(bench_kernels) -> None:
    assert bench_kernels.parse_variant("int4/bf16@bf16") == (
        WeightFormat(Format.INT4, Format.BF16),
        torch.bfloat16,
    )
    assert bench_kernels.parse_variant("int8")[1] == torch.float32
    with pytest.raises(ValueError, match="residual dtype"):
        bench_kernels.parse_variant("int4@fp16")


def test_bench_forward_and_agreement_on_a_tiny_model(bench_kernels) -> None:
    _, fp32 = make_pair("llama", seed=8)
    _, int4 = make_pair("llama", seed=8)
    models = {"fp32": fp32, "int4": apply_weight_format(int4, WeightFormat.parse("int4"))}
    timings = bench_kernels.bench_forward(models, context=16, reps=2, iters=1)
    for spec in models:
        for rows in ("1", "8", "16"):
            entry = timings[spec][rows]
            assert 0 < entry["min"] <= entry["median"]
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 96, (1, 10), generator=gen) for _ in range(2)]
    agree = bench_kernels.agreement(models, prompts)
    assert agree["fp32"]["max_abs_logit_diff"] == 0 and agree["fp32"]["top1_agreement"] == 1
    assert agree["int4"]["positions"] == 20 and agree["int4"]["max_abs_logit_diff"] > 0
    disagreements = agree["int4"]["disagreements"]
    assert disagreements == round((1 - agree["int4"]["top1_agreement"]) * 20)
    assert agree["fp32"]["largest_disagreement_gap"] == 0
    with torch.no_grad():
        reference = [bench_kernels.prompt_logits(fp32, ids) for ids in prompts]
        packed = [bench_kernels.prompt_logits(models["int4"], ids) for ids in prompts]
    gaps = [float(ref[pos].max() - ref[pos, got[pos].argmax()])
            for ref, got in zip(reference, packed) for pos in range(ref.shape[0])]
    assert agree["int4"]["largest_disagreement_gap"] == pytest.approx(max(gaps), abs=1e-4)
    assert (max(gaps) > 0) is (disagreements > 0)
    bf16 = make_pair("llama", seed=8)[1].to(torch.bfloat16)
    spread = bench_kernels.kernel_path_spread({**models, "bf16": bf16}, prompts)
    assert {entry["positions"] for entry in spread.values()} == {20}
    assert spread["fp32"]["max_abs_spread"] < 1e-4 and spread["fp32"]["argmax_flips"] == 0
    if bf16.embed_tokens.weight.is_cpu:  # packed and bf16 rows: the one-token forwards' bit for bit (attention.py)
        assert spread["int4"]["max_abs_spread"] == spread["bf16"]["max_abs_spread"] == 0
    else:  # a GPU's small-query attention kernels round the two paths differently in bf16
        assert 0 < spread["bf16"]["median_abs_spread"] <= spread["bf16"]["max_abs_spread"] < 1.0
    for entry in spread.values():
        assert 0 <= entry["argmax_flips"] <= entry["positions"]
        assert 0 <= entry["top2_near_ties"] <= entry["positions"]


def test_load_target_packs_an_hf_checkpoint(tmp_path: Path) -> None:
    """Non-GGUF weights are re-quantised group-wise; bad requests name the field."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from sglang_cast.models import load_target

    hf, reference = make_pair("llama", seed=10)
    hf.save_pretrained(tmp_path)
    words = models.WordLevel({f"w{i}": i for i in range(96)}, unk_token="w0")
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(words), eos_token="w2").save_pretrained(
        tmp_path
    )
    model, _, _ = load_target(tmp_path, "cpu", torch.float32, weight_format="int4/int8")
    assert isinstance(model.layers[1].mlp.down_proj, Int4Linear)
    assert isinstance(model.packed_head, Int8Linear)
    tokens = torch.randint(0, 96, (1, 8), generator=torch.Generator().manual_seed(11))
    got, expected = _logits(model, tokens), _logits(reference, tokens)
    assert (got.argmax(-1) == expected.argmax(-1)).float().mean() >= 0.5
    with pytest.raises(ValueError, match="weight_format"):
        load_target(tmp_path, "cpu", torch.float32, weight_format="int2")
    with pytest.raises(ValueError, match="weight_format: int4 runs on the CPU only"):
        load_target(tmp_path, "meta", torch.float32, weight_format="int4")


# ------------------------------------------------------- greedy decoding in a packed format

@pytest.mark.parametrize("spec", ["int4/int8", "bf16"])
def test_greedy_speculation_in_a_packed_format_diverges_only_at_near_ties(spec: str) -> None:
    """Speculative greedy decoding of a packed target verifies many tokens per forward,
    vanilla decodes one: different kernels, so an argmax may flip, but only at a
    near-tie by the measured kernel-path judge (numerics.py).  A planted wrong token is not one."""
    from sglang_cast.cast import SamplingParams
    from support.tiny import PROMPTS, engine, tiny_target

    target = apply_weight_format(tiny_target(), WeightFormat.parse(spec))
    params = SamplingParams(max_new_tokens=40)
    tokenizer = engine("vanilla", target, 4).tokenizer
    reference = [r.token_ids for r in engine("vanilla", target, 4).generate(PROMPTS, params)]
    speculative = [r.token_ids for r in engine("eagle2", target, 4).generate(PROMPTS, params)]
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    verdicts = [judge_by_kernel_paths(target, p, ref, out) for p, ref, out in zip(prompts, reference, speculative)]
    assert all(v is None or v.near_tie for v in verdicts), verdicts
    # The check can fail: the token vanilla ranked last at its first step is no near-tie.
    logits = target.logits(target.causal_hidden(prompts[0]))[-1]
    planted = [int(logits.argmin())] + reference[0][1:]
    verdict = judge_by_kernel_paths(target, prompts[0], reference[0], planted)
    assert verdict is not None and not verdict.near_tie and verdict.gap > verdict.tolerance
