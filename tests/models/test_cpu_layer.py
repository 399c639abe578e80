"""The fused CPU layer ops (sglang_cast/models/cpu_layer.py, csrc/cpu_layer.cpp) against
their torch twins, and the models that run them."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sglang_cast.hardware import cpu_flags
from sglang_cast.models import LlamaModel, ModelConfig, cpu_layer
from sglang_cast.models.attention import AttentionBatch, causal_tree_mask
from sglang_cast.models.kv_cache import KVCache
from sglang_cast.models.llama import RMSNorm, apply_rope, rope_cos_sin
from sglang_cast.models.weights import DraftFormat, WeightFormat, apply_draft_format, apply_weight_format
from support.models import random_draft

needs_ops = pytest.mark.skipif(cpu_layer.unavailable_reason(cpu_flags()) is not None,
                               reason=f"fused CPU layer ops: {cpu_layer.unavailable_reason(cpu_flags())}")
needs_vnni = pytest.mark.skipif(WeightFormat.parse("int4vnni").linears.unavailable_reason(cpu_flags()) is not None,
                                reason="the VNNI kernels need AVX512-VNNI and AVX512-BF16")

H, KV, D = 4, 2, 32  # heads, KV heads, head width of the tests' attention and model


@pytest.fixture
def ops():
    cpu_layer.KERNEL.load()
    return torch.ops.sglang_cast_layer


def test_vnni_formats_ask_for_fused_layers_and_torch_formats_do_not() -> None:
    assert WeightFormat.parse("int4vnni/int8vnni").linears.fused_layers
    assert not WeightFormat.parse("int4/int8").linears.fused_layers
    assert not WeightFormat.parse("fp32").linears.fused_layers


@needs_ops
def test_the_norm_and_mlp_ops_compute_what_the_eager_layer_does(ops) -> None:
    torch.manual_seed(0)
    norm = RMSNorm(576, 1e-5)
    with torch.no_grad():
        norm.weight.normal_()
    x, delta, gate_up = torch.randn(5, 576), torch.randn(5, 576), torch.randn(5, 2 * 1536)
    torch.testing.assert_close(ops.rms_norm(x, norm.weight, norm.eps), norm(x), rtol=2e-6, atol=2e-6)
    h, normed = ops.add_rms_norm(x, delta, norm.weight, norm.eps)
    assert torch.equal(h, x + delta)
    torch.testing.assert_close(normed, norm(x + delta), rtol=2e-6, atol=2e-6)
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(ops.silu_mul(gate_up), F.silu(gate) * up, rtol=2e-6, atol=2e-6)


def attention_case(batch: int, n: int, s: int, seed: int):
    """Caches with random contents (slots 2 and 0, 17 and 30 committed tokens), a tree mask
    where each new token sees itself and random earlier scratch entries, and the stacked
    projection's output with cos/sin for it."""
    gen = torch.Generator().manual_seed(seed)
    cache = KVCache(2, 3, KV, 64, D, "cpu", torch.float32)
    cache.k.normal_(generator=gen)
    cache.v.normal_(generator=gen)
    slots = torch.tensor([2, 0][:batch])
    cache.lens[slots] = torch.tensor([17, 30][:batch])
    mask = (torch.rand(batch, n, s, generator=gen) < 0.5).tril(diagonal=s - n)
    mask[:, torch.arange(n), s - n + torch.arange(n)] = True
    qkv = torch.randn(batch * n, (H + 2 * KV) * D, generator=gen)
    angles = torch.randn(batch, 1, n, D, generator=gen)
    return cache, slots, mask, qkv, angles.cos(), angles.sin()


def eager_attention(cache: KVCache, slots, mask, qkv, cos, sin, layer: int) -> torch.Tensor:
    """`Attention.project`'s RoPE and `AttentionBatch.attend`: the eager layer's path."""
    batch, n = mask.shape[:2]
    qk, v = qkv.split(((H + KV) * D, KV * D), dim=-1)
    qk = apply_rope(qk.view(batch, n, H + KV, D).transpose(1, 2), cos, sin)
    attended = AttentionBatch.build(cache, slots, mask).attend(layer, qk[:, :H], qk[:, H:],
                                                              v.view(batch, n, KV, D).transpose(1, 2))
    return attended.transpose(1, 2).reshape(batch * n, H * D)


@needs_ops
@pytest.mark.parametrize("batch,n,s", [(1, 1, 1), (1, 13, 13), (2, 5, 5), (2, 3, 7)])
def test_rope_attention_computes_what_the_eager_layer_does(ops, batch: int, n: int, s: int) -> None:
    """Decode steps, verifies and a draft layer appending to earlier scratch (s > n), over
    two slots that are neither consecutive nor equally long."""
    cache, slots, mask, qkv, cos, sin = attention_case(batch, n, s, seed=n)
    eager_cache = KVCache(2, 3, KV, 64, D, "cpu", torch.float32)
    eager_cache.k.copy_(cache.k)
    eager_cache.v.copy_(cache.v)
    eager_cache.lens.copy_(cache.lens)
    want = eager_attention(eager_cache, slots, mask, qkv, cos, sin, layer=1)
    got = ops.rope_attention(qkv, cos, sin, cache.k, cache.v, 1, slots, cache.lens[slots], mask.contiguous(), H, KV)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)
    assert torch.equal(cache.k, eager_cache.k) and torch.equal(cache.v, eager_cache.v)  # the same K/V written


@needs_ops
def test_a_verify_rows_attention_equals_the_decode_step_of_its_path_bit_for_bit(ops) -> None:
    """A tree 0 -> {1, 2}, 1 -> 3: row 3 verified in the tree, and row 3 decoded one token
    at a time after 0 and 1 were committed, see the same keys in the same order."""
    cache, slots, _, qkv, _, _ = attention_case(1, 4, 4, seed=3)
    start = int(cache.lens[slots])
    tree = torch.tensor([[[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]], dtype=torch.bool)
    cos, sin = rope_cos_sin(start + torch.tensor([[0, 1, 1, 2]]), ModelConfig.from_hf(tiny_config()), torch.float32)
    verified = ops.rope_attention(qkv, cos, sin, cache.k, cache.v, 0, slots, cache.lens[slots], tree, H, KV)
    # decode the path 0, 1, 3 one token at a time, committing each
    for row, depth in ((0, 0), (1, 1), (3, 2)):
        c, s = cos[:, :, row:row + 1].contiguous(), sin[:, :, row:row + 1].contiguous()
        step = ops.rope_attention(qkv[row:row + 1], c, s, cache.k, cache.v, 0, slots, cache.lens[slots],
                                  torch.ones(1, 1, 1, dtype=torch.bool), H, KV)
        cache.lens[slots] += 1
    assert torch.equal(step, verified[3:4])


@needs_ops
def test_rope_attention_refuses_inputs_that_do_not_fit_naming_them(ops) -> None:
    cache, slots, mask, qkv, cos, sin = attention_case(1, 2, 2, seed=0)
    with pytest.raises(RuntimeError, match=r"rope_attention: qkv \[2, 240\] is not \[2, 256\]"):
        ops.rope_attention(qkv[:, :-16].contiguous(), cos, sin, cache.k, cache.v, 0, slots, cache.lens[slots],
                           mask.contiguous(), H, KV)
    with pytest.raises(RuntimeError, match="does not fit the cache"):
        ops.rope_attention(qkv, cos, sin, cache.k, cache.v, 0, slots, torch.tensor([63]), mask.contiguous(), H, KV)
    with pytest.raises(RuntimeError, match="layer 2 not in"):
        ops.rope_attention(qkv, cos, sin, cache.k, cache.v, 2, slots, cache.lens[slots], mask.contiguous(), H, KV)


def tiny_config() -> dict:
    """The smallest Llama our kernels hold: widths in whole blocks of 64 outputs and groups
    of 32 inputs, head width 32 (two of the fused ops' 16-float vectors per half)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128, "hidden_size": H * D,
            "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": H, "num_key_value_heads": KV,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512, "tie_word_embeddings": True}


def tiny_model(spec: str) -> LlamaModel:
    model = LlamaModel(ModelConfig.from_hf(tiny_config()))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(1 + 0.1 * torch.randn(param.shape, generator=gen) if "norm" in name
                        else 0.2 * torch.randn(param.shape, generator=gen))
    model = apply_weight_format(model.eval(), WeightFormat.parse(spec))
    model.layer_stack = cpu_layer.fused_layers_for(model)  # as `loader.load_target` does
    return model


def logits(model: LlamaModel, ids: list[int], cache: KVCache, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``[n, vocab]`` logits of ``ids`` appended to slot 0 of ``cache`` (committed after)."""
    n, start = len(ids), int(cache.lens[0])
    mask = causal_tree_mask(1, n, "cpu") if mask is None else mask
    with torch.inference_mode():
        out = model.logits(model(torch.tensor([ids]), start + torch.arange(n)[None], cache, torch.tensor([0]), mask).hidden)
    cache.lens[0] += n
    return out[0]


@needs_ops
@needs_vnni
def test_a_vnni_model_runs_fused_layers_close_to_its_eager_ones() -> None:
    model = tiny_model("int4vnni/int8vnni")
    assert isinstance(model.layer_stack, cpu_layer.FusedLayers)
    assert tiny_model("fp32").layer_stack is None
    ids = list(range(3, 40, 2))
    fused = logits(model, ids, KVCache.for_model(model.config, 1, 64, "cpu", torch.float32))
    model.layer_stack = None
    eager = logits(model, ids, KVCache.for_model(model.config, 1, 64, "cpu", torch.float32))
    torch.testing.assert_close(fused, eager, rtol=0, atol=0.05 * eager.abs().max().item())
    assert (fused.argmax(-1) == eager.argmax(-1)).float().mean() >= 0.9


@needs_ops
@needs_vnni
def test_a_fused_models_chain_forward_equals_its_one_token_steps_bit_for_bit() -> None:
    """Row independence end to end (VNNI linears and fused ops): what keeps CAST's greedy
    tokens plain decoding's without near-ties."""
    model = tiny_model("int4vnni/int8vnni")
    prompt, chain = [5, 9, 17, 33, 2], [40, 41, 7, 100]
    together_cache = KVCache.for_model(model.config, 1, 64, "cpu", torch.float32)
    logits(model, prompt, together_cache)
    together = logits(model, chain, together_cache)
    steps_cache = KVCache.for_model(model.config, 1, 64, "cpu", torch.float32)
    logits(model, prompt, steps_cache)
    steps = torch.cat([logits(model, [token], steps_cache) for token in chain])
    assert torch.equal(together, steps)


@needs_vnni
def test_a_cpu_that_cannot_build_the_ops_runs_the_eager_layers_with_a_warning(monkeypatch, caplog) -> None:
    monkeypatch.setattr(cpu_layer, "unavailable_reason", lambda flags=None: "this CPU lacks avx512f")
    with caplog.at_level(logging.WARNING, logger="sglang_cast.models.cpu_layer"):
        model = tiny_model("int4vnni/int8vnni")
    assert model.layer_stack is None
    assert "fused CPU layers unavailable (this CPU lacks avx512f)" in caplog.text


@needs_vnni
def test_a_model_whose_widths_the_ops_cannot_hold_runs_the_eager_layers() -> None:
    narrow = dict(tiny_config(), hidden_size=64, intermediate_size=128)  # head width 16
    model = LlamaModel(ModelConfig.from_hf(narrow))
    model = apply_weight_format(model.eval(), WeightFormat.parse("int4vnni/int8vnni"))
    assert not cpu_layer.fits(model.config) and cpu_layer.fused_layers_for(model) is None
    assert cpu_layer.fits(ModelConfig.from_hf(tiny_config()))


def tiny_head(target: LlamaModel, spec: str):
    """A random EAGLE-3 head of the tiny model's layer shape, its linears in ``spec``, with
    the target's fused stack where `load_draft` would give it one."""
    head = random_draft("eagle3", target)
    head = apply_draft_format(head, DraftFormat.parse(spec))
    head.layer_stack = cpu_layer.fused_draft_for(head, target)
    return head


@needs_ops
@needs_vnni
@pytest.mark.parametrize("spec", ["int8", "int8vnni"])
def test_an_eagle3_head_of_a_fused_target_runs_fused_close_to_its_eager_layer(spec: str) -> None:
    """Target features then its own hidden states (a tree layer appending to scratch, s > n),
    logits at every row and at the last one only (a catch-up)."""
    target = tiny_model("int4vnni/int8vnni")
    head = tiny_head(target, spec)
    assert head.layer_stack is target.layer_stack
    assert tiny_head(tiny_model("int4/int8"), spec).layer_stack is None
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 128, (2, 3), generator=gen)
    features = torch.randn(2, 3, 3 * H * D, generator=gen)
    positions = 9 + torch.arange(3).expand(2, 3)
    outputs = {}
    for name, stack in (("fused", head.layer_stack), ("eager", None)):
        head.layer_stack = stack
        cache = KVCache.for_model(head.config.layer, 3, 32, "cpu", torch.float32, num_layers=1)
        cache.lens[:] = 9
        slots = torch.tensor([2, 0])
        with torch.inference_mode():
            first = head(ids, features, positions, cache, slots, causal_tree_mask(2, 3, "cpu"), last=torch.tensor([2, 1]))
            tree = torch.tensor([[1, 0, 0, 1, 0], [0, 1, 0, 0, 1]], dtype=torch.bool).expand(2, 2, 5)  # s = 5 > n = 2
            second = head(ids[:, :2], first.hidden[:, :2], positions[:, :2] + 1, cache, slots, tree)
        outputs[name] = (first, second)
    for fused, eager in zip(outputs["fused"], outputs["eager"]):
        torch.testing.assert_close(fused.hidden, eager.hidden, rtol=0, atol=0.02 * eager.hidden.abs().max().item())
        torch.testing.assert_close(fused.logits, eager.logits, rtol=0, atol=0.02 * eager.logits.abs().max().item())
    assert outputs["fused"][0].logits.shape == (2, 1, 40)


@needs_ops
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("vocab", [1, 17, 64, 1000, 49152])
def test_the_greedy_op_answers_what_argmax_does_with_ties_nans_and_any_split(ops, vocab: int, threads: int) -> None:
    """One row on the calling thread, more split across threads: the first maximum of each
    row either way, ties and NaNs as `torch.argmax` has them."""
    greedy = cpu_layer.step_op("greedy_tokens")
    gen = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(4, 3, vocab, generator=gen) * 2).round()  # many exact ties
    logits[0, 1] = -math.inf  # every entry the maximum
    logits[1, 0, vocab // 2] = math.nan  # argmax answers the first NaN's index
    logits[1, 0, vocab - 1] = math.nan
    logits[2, 2, vocab - 1] = 99.0  # the maximum in the very last entry
    logits[3, 1, [0, vocab - 1]] = 99.0  # a tie across the row's first and last entries
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert torch.equal(greedy(logits), torch.argmax(logits, dim=-1))
        for row in (logits[1, 0], logits[2, 2], logits[3, 1]):  # one row [V] -> []
            assert torch.equal(greedy(row), torch.argmax(row))
        strided = logits.transpose(0, 1)
        assert torch.equal(greedy(strided), torch.argmax(strided, dim=-1))
    finally:
        torch.set_num_threads(saved)


def test_an_engine_reads_greedy_tokens_with_the_op_where_it_builds(monkeypatch) -> None:
    from sglang_cast.cast import sampling
    cpu = torch.device("cpu")
    monkeypatch.setattr(cpu_layer, "unavailable_reason", lambda flags=None: None)
    assert cpu_layer.greedy_tokens_for(cpu, torch.bfloat16) is sampling.greedy_tokens  # fp32 logits only
    assert cpu_layer.greedy_tokens_for(torch.device("cuda"), torch.float32) is sampling.greedy_tokens
    monkeypatch.setattr(cpu_layer, "unavailable_reason", lambda flags=None: "this CPU lacks avx512f")
    assert cpu_layer.greedy_tokens_for(cpu, torch.float32) is sampling.greedy_tokens


@needs_ops
def test_where_the_ops_build_an_fp32_cpu_engine_reads_with_them(monkeypatch) -> None:
    from sglang_cast.engine.draft_expander import child_reader_for
    greedy = cpu_layer.greedy_tokens_for(torch.device("cpu"), torch.float32)
    assert greedy is cpu_layer.step_op("greedy_tokens")
    resolved, step_op = [], cpu_layer.step_op
    monkeypatch.setattr(cpu_layer, "step_op", lambda name: resolved.append(name) or step_op(name))
    draft = random_draft("eagle3", tiny_model("int8"))
    read = child_reader_for(draft, torch.device("cpu"), torch.float32)
    assert resolved == ["top_children"]
    probs, ids = read(torch.randn(1, 2, draft.output_vocab_size), 3)
    assert probs.shape == ids.shape == (1, 2, 3) and ids.dtype == np.int64


class _Head:
    """What `child_reader_for` asks of a draft head: its id map two ways."""

    def __init__(self, offsets: torch.Tensor | None) -> None:
        self.target_offsets = offsets

    def draft_to_target(self, ids: torch.Tensor) -> torch.Tensor:
        return ids if self.target_offsets is None else ids + self.target_offsets[ids]


@needs_ops
@pytest.mark.parametrize("vocab", [5, 100, 8192])
@pytest.mark.parametrize("top_k", [1, 4, 10])
def test_the_children_op_reads_what_the_torch_reader_does(ops, vocab: int, top_k: int) -> None:
    from sglang_cast.engine.draft_expander import child_reader_for
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    top_k = min(top_k, vocab)
    gen = torch.Generator().manual_seed(vocab + top_k)
    logits = torch.randn(2, 7, vocab, generator=gen) * 4
    logits[1, 3, vocab - 1] = 30.0  # the best child in the very last entry
    for head in (_Head(torch.randint(0, 1000, (vocab,), generator=gen)), _Head(None)):
        want_probs, want_ids = child_reader_for(head, gpu, torch.float32)(logits, top_k)  # torch's read
        probs, ids = child_reader_for(head, cpu, torch.float32)(logits, top_k)
        assert probs.shape == ids.shape == (2, 7, top_k)
        assert (ids == want_ids).all()
        assert abs(probs - want_probs).max() < 1e-6


@needs_ops
def test_the_children_op_takes_the_lower_id_among_equal_logits_and_refuses_bad_k(ops) -> None:
    children = cpu_layer.step_op("top_children")
    logits = torch.zeros(1, 1, 40)
    logits[0, 0, [3, 9, 30]] = 1.0
    probs, ids = children(logits, 4, cpu_layer.NO_OFFSETS).split(4, dim=-1)
    assert ids.flatten().tolist() == [3, 9, 30, 0]
    assert torch.allclose(probs.sum(), torch.tensor(3 * math.e + 1, dtype=torch.float64) / (3 * math.e + 37))
    with pytest.raises(RuntimeError, match=r"k must be in \[1, 40\], got 41"):
        children(logits, 41, cpu_layer.NO_OFFSETS)
