"""``cast-autotune analytic --tp-size N`` and ``--gpu h200``: one GPU's shard of a
tensor-parallel forward (weights, logits and KV heads over N; KV heads fewer than
N replicated) plus the activations exchanged between the GPUs."""

from __future__ import annotations


import pytest

from autotune.analytic import ANALYTIC_GPUS, BYTES_PER_ELEMENT, PLUGIN_GPUS, ForwardShape, GpuSpec, analytic_profile
from autotune.cli import main
from autotune.commands import analytic as analytic_command
from sglang_cast.hardware import GPU_LABELS
from sglang_cast.profile import load_profile
from sglang_cast.sglang_plugin.memory_plan import tp_size_problem
from sglang_cast.sglang_plugin.plugin_config import ParallelLayout, SGLangSection
from support import ROOT

LLAMA_70B = ROOT / "profiles" / "models" / "llama-3.1-70b"
# A memory-bound card (tiny FLOP rate would make it compute-bound): 1 TB/s, 1000 TFLOPS, 100 GB/s links.
CARD = GpuSpec("test card", 1.0, 1000.0, 100.0, "planted")
SHAPE = ForwardShape(weights=10**9, kv_per_token=1000, attention_width=100, logits_width=5000,
                     allreduce_width=300, kv_heads=8)


def memory_ms(weights: float, kv: float, logits: float) -> float:
    return 1000 * BYTES_PER_ELEMENT * (weights + kv + logits) / 1e12


def test_one_gpu_of_a_tp_group_reads_its_shard_and_pays_the_exchange():
    batch, context, n, tp = 2, 512, 4, 4
    tokens = batch * n
    kv = (batch * context + tokens) * SHAPE.kv_per_token
    exchange_ms = 1000 * BYTES_PER_ELEMENT * tokens * (2 * 3 / 4 * 300 + 3 / 4 * 5000) / 100e9
    assert SHAPE.ms(CARD, batch, context, n) == pytest.approx(memory_ms(1e9, kv, tokens * 5000))
    assert SHAPE.ms(CARD, batch, context, n, tp) == pytest.approx(
        memory_ms(1e9 / tp, kv / tp, tokens * 5000 / tp) + exchange_ms)
    assert SHAPE.exchange_s(CARD, tokens, 1) == 0.0


def test_kv_heads_fewer_than_the_gpus_are_replicated_not_divided():
    """8 KV heads over 16 GPUs: each holds one head (llama.py:186-193), 1/8 of the cache, not 1/16."""
    batch, context, n = 1, 4096, 1
    kv = (batch * context + batch * n) * SHAPE.kv_per_token
    exchange_ms = 1000 * SHAPE.exchange_s(CARD, batch * n, 16)
    assert SHAPE.ms(CARD, batch, context, n, 16) == pytest.approx(
        memory_ms(1e9 / 16, kv / 8, 5000 / 16) + exchange_ms)


@pytest.mark.parametrize("heads, kv_heads, tp_size, problem", [
    (64, 8, 4, None), (64, 8, 8, None), (32, 2, 4, None), (32, 8, 1, None),
    (9, 3, 2, "9 attention heads do not divide over 2 GPUs"),
    (32, 6, 4, "6 KV heads neither divide over 4 GPUs nor replicate evenly across them (4 is not a multiple of 6)"),
])
def test_sglangs_head_sharding_rule(heads, kv_heads, tp_size, problem):
    assert tp_size_problem(heads, kv_heads, tp_size) == problem


def test_h200_is_priced_and_its_label_is_one_the_hardware_table_knows():
    assert set(PLUGIN_GPUS) <= set(ANALYTIC_GPUS) and "h200" in ANALYTIC_GPUS
    assert set(ANALYTIC_GPUS) <= set(GPU_LABELS)  # a label the server and cast-autotune can match to a device
    h100, h200 = ANALYTIC_GPUS["h100"], ANALYTIC_GPUS["h200"]
    assert h200.memory_bandwidth_tb_s > h100.memory_bandwidth_tb_s and h200.dense_bf16_tflops == h100.dense_bf16_tflops


def test_analytic_tp4_on_h200_writes_a_profile_keyed_by_its_layout(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(analytic_command, "PROFILE_DIR", tmp_path)
    assert main(["analytic", "--gpu", "h200", "--tp-size", "4", "--model-path", str(LLAMA_70B)]) == 0
    assert "per GPU of --tp-size 4" in capsys.readouterr().out
    profile = load_profile(tmp_path / "h200-tp4.yaml").profile
    assert profile.device == PLUGIN_GPUS["h200"].name
    assert SGLangSection.of(profile).parallel == ParallelLayout(tp_size=4, pp_size=1)
    one = analytic_profile("h200", str(LLAMA_70B)).settings.costs
    four = profile.settings.costs
    assert SGLangSection.of(analytic_profile("h200", str(LLAMA_70B))).parallel == ParallelLayout(1, 1)
    # Batch 1 is memory-bound: four GPUs each read about a quarter of the 70B weights.
    assert 0.25 < four.target(1, 512, 1) / one.target(1, 512, 1) < 0.3


def test_a_tp_size_the_model_cannot_shard_is_one_line(tmp_path, capsys, monkeypatch):
    """On a fresh machine too: the check reads the embedded GGUF's sizes from its metadata,
    so no conversion runs (and prints its progress) before the one-line error."""
    monkeypatch.setenv("SGLANG_CAST_CACHE", str(tmp_path / "empty-cache"))
    # The embedded SmolLM2-135M has 9 attention heads.
    assert main(["analytic", "--gpu", "h100", "--tp-size", "2", "--output", str(tmp_path / "x.yaml")]) == 2
    assert capsys.readouterr().err.strip() == (
        "cast-autotune analytic: error: --tp-size: 9 attention heads do not divide over 2 GPUs (SGLang shards "
        "attention by heads); use a --tp-size that divides 9")
    assert not (tmp_path / "x.yaml").exists()
    assert not (tmp_path / "empty-cache").exists()
