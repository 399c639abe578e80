"""tools/bench.py on tiny models: every method is measured, greedy runs are checked
against vanilla, a divergence is reported, eagle2-best is the replayed argmax, and the
data of the paper's Fig. 3 and Fig. 4 is what the runs did."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from autotune.models import ModelPair
from autotune.store import Store
from autotune.tuner import replay_settings
from sglang_cast.cast import CostModel, PolicySettings, SamplingParams, Thresholds, TreeShape
from sglang_cast.engine import StepLog
from sglang_cast.engine.runner import PolicySpeculation
from test_engine import CharTokenizer, MirrorDraft, tiny_target
from tools import bench

SHAPE = TreeShape(top_k=3, max_depth=3, num_verify_tokens=8)


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    target = tiny_target()
    return ModelPair(target, MirrorDraft(target), CharTokenizer(), "tiny-target", "mirror-draft", "float32",
                     chat_template=False)


def settings() -> PolicySettings:
    return PolicySettings.single(CostModel.linear(per_token_ms=1.0, fixed_ms=5.0), shape=SHAPE,
                                 thresholds=Thresholds(0.2, 0.2, 0.2))


PROMPTS = ["hello there", "abc", "speculate", "tree of drafts", "x"]


def test_method_names_and_shape_sources():
    assert bench.Method.parse("eagle2").shape == "eagle2"
    assert bench.Method.parse("eagle2-best") == bench.Method("eagle2-best", "eagle2", "best")
    assert bench.Method.parse("cast").shape == "profile"
    assert bench.Method.parse("cast-rerank@eagle2") == bench.Method("cast-rerank@eagle2", "cast-rerank", "eagle2")
    with pytest.raises(bench.BenchError, match="unknown method 'fast'"):
        bench.Method.parse("fast")
    with pytest.raises(bench.BenchError, match="only shape suffix"):
        bench.Method.parse("cast@big")
    with pytest.raises(bench.BenchError, match=r"--batch-size: expected comma-separated integers in \[1, 256\], got '1,0'"):
        bench.parse_list("1,0", int, "--batch-size", 1, 256)


def test_ablation_runs_draft_on_eagle2s_tree_even_where_the_profile_switches_speculation_off():
    off = settings().with_shape(SHAPE, speculate=False)
    ablated, shape = bench.method_settings(bench.Method.parse("cast@eagle2"), off, {}, 4)
    assert shape == bench.EAGLE2_SHAPE
    assert all(b.speculate and b.shape == bench.EAGLE2_SHAPE for b in ablated.buckets)
    tuned, shape = bench.method_settings(bench.Method.parse("cast"), off, {}, 4)
    assert shape is None and not tuned.buckets[0].speculate  # the tuned method keeps the switch


def test_divergences_name_the_prompt_and_token():
    assert bench.divergences([[1, 2, 3], [4]], [[1, 2, 3], [4]]) == []
    assert bench.divergences([[1, 2, 3], [4, 5]], [[1, 9, 3], [4]]) == [
        {"prompt": 0, "first_diff_token": 1, "lengths": [3, 3]},
        {"prompt": 1, "first_diff_token": 1, "lengths": [2, 1]},
    ]


def test_bench_measures_every_method_and_checks_greedy_outputs(pair):
    methods = [bench.Method.parse(m) for m in ("vanilla", "eagle2", "cast", "goodput", "cast-rerank@eagle2")]
    records = bench.bench(pair, methods, settings(), {}, PROMPTS, [1, 2], [0.0, 1.0], 12, 64)
    assert len(records) == len(methods) * 2 * 2
    for record in records:
        assert record.tokens > 0 and record.tokens_per_s > 0 and record.iterations > 0
        if record.method == "vanilla":
            assert record.speedup_vs_vanilla == pytest.approx(1.0)
            assert record.tau == pytest.approx(1.0) and record.mean_verified_tokens == 0
        else:
            assert record.tau > 1.0  # the mirror draft is accepted
        assert record.lossless is (True if record.temperature == 0 else None)
    eagle2 = next(r for r in records if r.method == "eagle2")
    assert eagle2.shape == {"top_k": 10, "max_depth": 6, "num_verify_tokens": 60}
    assert eagle2.mean_verified_tokens == pytest.approx(59, abs=1)  # EAGLE-2's budget on a deep tree


def plant_wrong_cast_token(monkeypatch) -> None:
    """Make ``cast``'s output for prompt 1 differ from vanilla's at token 2."""
    real = bench.run_one

    def corrupt_cast(pair, method, *args):
        outputs, stats = real(pair, method, *args)
        if method.policy == "cast":
            outputs[1] = outputs[1][:2] + [(outputs[1][2] + 1) % 48] + outputs[1][3:]
        return outputs, stats

    monkeypatch.setattr(bench, "run_one", corrupt_cast)


def test_a_divergence_is_reported_loudly(pair, monkeypatch, capsys):
    plant_wrong_cast_token(monkeypatch)
    methods = [bench.Method.parse(m) for m in ("vanilla", "cast")]
    records = bench.bench(pair, methods, settings(), {}, PROMPTS, [2], [0.0], 12, 64)
    cast = records[1]
    assert cast.lossless is False and cast.mismatches == [{"prompt": 1, "first_diff_token": 2, "lengths": [12, 12]}]
    assert "LOSSLESS CHECK FAILED: cast at batch 2" in capsys.readouterr().err
    assert "not lossless" in bench.markdown(records, "tiny")


def test_eagle2_best_is_the_replayed_argmax(pair, tmp_path):
    engine = pair.engine(bench.make_policy("eagle2", settings()), 2, 64)
    engine.record_traces(SHAPE)
    log = StepLog()
    engine.generate(PROMPTS[:4], SamplingParams(max_new_tokens=16, ignore_eos=True), on_step=log)
    store = Store(tmp_path / "t.db")
    store.add_traces("cpu", pair.target_id, pair.draft_id, "tiny", "run", [(i, ("p",), t) for i, t in
                                                                            enumerate(log.traces)])
    store.close()
    best = bench.best_static_shapes(pair, settings(), [2], tmp_path / "t.db", max_traces=40)
    rate = replay_settings(log.traces, settings().with_shape(best[2]), "eagle2").tokens_per_s
    for shape in (TreeShape(1, 1, 2), TreeShape(3, 3, 8), TreeShape(2, 2, 4)):
        assert rate >= replay_settings(log.traces, settings().with_shape(shape), "eagle2").tokens_per_s
    with pytest.raises(bench.BenchError, match="no traces for draft other"):
        bench.best_static_shapes(ModelPair(pair.target, pair.draft, pair.tokenizer, "tiny-target", "other",
                                           "float32"), settings(), [2], tmp_path / "t.db", 40)


def test_bad_flags_exit_2_with_one_line(tmp_path, capsys):
    assert bench.main(["--dataset", str(tmp_path / "none.jsonl"), "--json", str(tmp_path / "o.json"),
                       "--methods", "vanilla,nope"]) == 2
    assert "unknown method 'nope'" in capsys.readouterr().err
    assert bench.main(["--dataset", str(tmp_path / "none.jsonl"), "--json", str(tmp_path / "o.json"),
                       "--temperature", "3"]) == 2
    assert "--temperature: expected comma-separated numbers in [0, 2], got '3'" in capsys.readouterr().err
    assert bench.main(["--dataset", str(tmp_path / "none.jsonl"), "--json", str(tmp_path / "o.json"),
                       "--batch-size", "1,8", "--num-prompts", "4"]) == 2
    assert "4 prompts cannot fill batch size 8" in capsys.readouterr().err
    assert bench.main(["--dataset", str(tmp_path / "none.jsonl"), "--json", str(tmp_path / "o.json"),
                       "--weight-format", "int3"]) == 2
    assert "--weight-format: 'int3' is not '<linears>' or '<linears>/<lm_head>'" in capsys.readouterr().err


# ------------------------------------------------------------ the llama.cpp anchor

def test_anchor_method_parses_and_refuses_a_shape():
    assert bench.Method.parse("llamacpp").is_anchor
    assert not bench.Method.parse("vanilla").is_anchor
    with pytest.raises(bench.BenchError, match="llama.cpp anchor has no tree shape"):
        bench.Method.parse("llamacpp@eagle2")


def test_anchor_is_skipped_with_one_line_without_the_extra(monkeypatch, capsys):
    methods = [bench.Method.parse(m) for m in ("vanilla", "llamacpp", "cast")]
    monkeypatch.setattr(bench, "llamacpp_missing", lambda: "llama-cpp-python is not installed (build it once)")
    gguf, kept = bench.anchor_model(methods, None)
    assert gguf is None and [m.label for m in kept] == ["vanilla", "cast"]
    assert capsys.readouterr().err == "skipping llamacpp: llama-cpp-python is not installed (build it once)\n"
    monkeypatch.setattr(bench, "llamacpp_missing", lambda: None)
    gguf, kept = bench.anchor_model(methods, "some/hf-dir")
    assert gguf is None and len(kept) == 2
    assert "skipping llamacpp: the target some/hf-dir is not a GGUF file" in capsys.readouterr().err
    gguf, kept = bench.anchor_model(methods, "model.Q4_1.gguf")
    assert gguf is not None and gguf.name == "model.Q4_1.gguf" and kept == methods


def test_anchor_runs_batch_1_greedy_only_and_every_record_there_carries_the_ratio(pair, monkeypatch):
    seen = {}

    def fake_llamacpp(gguf, token_ids, max_new_tokens, eos, threads, context_length):
        seen["token_ids"] = token_ids
        return bench.AnchorRun([[7] * max_new_tokens for _ in token_ids], 0.5, "test", threads)

    monkeypatch.setattr(bench, "run_llamacpp", fake_llamacpp)
    methods = [bench.Method.parse(m) for m in ("vanilla", "llamacpp", "cast")]
    records = bench.bench(pair, methods, settings(), {}, PROMPTS, [1, 2], [0.0, 1.0], 12, 64, gguf=Path("m.gguf"))
    anchors = [r for r in records if r.method == "llamacpp"]
    assert [(r.batch_size, r.temperature) for r in anchors] == [(1, 0.0)]
    assert anchors[0].tokens == 12 * len(PROMPTS) and anchors[0].tokens_per_s == pytest.approx(24 * len(PROMPTS))
    assert anchors[0].lossless is None  # other kernels: never checked against our vanilla
    assert seen["token_ids"] == [pair.tokenizer.encode(p) for p in PROMPTS]  # the engine's own tokens
    for record in records:
        there = (record.batch_size, record.temperature) == (1, 0.0)
        assert (record.speedup_vs_llamacpp is not None) is there
        if there:
            assert record.speedup_vs_llamacpp == pytest.approx(record.tokens_per_s / anchors[0].tokens_per_s)
        if record.method != "llamacpp" and record.temperature == 0:
            assert record.lossless is True
    table = bench.markdown(records, "tiny")
    assert "× llama.cpp" in table and "| 2 | " in table and "| –" in table  # no anchor cell at batch 2


@pytest.mark.skipif(bench.llamacpp_missing() is not None, reason="the anchors extra is not installed")
def test_llamacpp_decodes_the_embedded_gguf_greedily():
    from sglang_cast.models.loader import embedded_gguf_path

    prompt = [1, 9690, 198]  # any short token sequence
    first = bench.run_llamacpp(embedded_gguf_path(), [prompt], 6, (), threads=1)
    second = bench.run_llamacpp(embedded_gguf_path(), [prompt], 6, (), threads=1)
    assert len(first.token_ids[0]) == 6 and first.tokens_per_s > 0
    assert first.token_ids == second.token_ids  # greedy: deterministic


# ------------------------------------------------- the paper's Fig. 3 and Fig. 4

class KeepTrees(PolicySpeculation):
    """The live strategy, keeping every draft tree and verified set it produced."""

    def __init__(self) -> None:
        self.drafted = []

    def draft(self, runner, batch):
        drafted = super().draft(runner, batch)
        self.drafted.append(drafted)
        return drafted


def test_records_carry_the_cumulative_value_of_the_verified_set(pair):
    engine = pair.engine(bench.make_policy("eagle2", settings()), 2, 64)
    kept = KeepTrees()
    engine.runner.speculation = kept
    log = StepLog()
    engine.generate(PROMPTS[:3], SamplingParams(max_new_tokens=10, ignore_eos=True), on_step=log)
    assert len(log.records) == len(kept.drafted) > 0
    for record, drafted in zip(log.records, kept.drafted):
        assert len(record.verified_value) == record.batch_size
        for b, value in enumerate(record.verified_value):
            # the verified nodes are the best `verified` of the tree by value, root excluded
            best = torch.sort(drafted.tree.values[b, 1:], descending=True).values[: record.verified]
            assert value == pytest.approx(float(best.sum()))
            assert value == pytest.approx(float(drafted.vtree.values[b, 1:].sum()))
            assert 0 < value <= record.verified
    assert bench.acceptance_points(log.records) == [
        (v, a + 1) for r in log.records for v, a in zip(r.verified_value, r.accepted)]


def test_vanilla_verifies_nothing_so_its_cumulative_value_is_zero(pair):
    engine = pair.engine(bench.make_policy("vanilla", settings()), 2, 64)
    log = StepLog()
    engine.generate(PROMPTS[:2], SamplingParams(max_new_tokens=4, ignore_eos=True), on_step=log)
    assert log.records and all(r.verified_value == [0.0] * r.batch_size for r in log.records)


def test_acceptance_bins_average_tau_per_value_bin():
    points = [(0.1, 1), (0.4, 2), (0.6, 2), (1.9, 3), (1.6, 4), (1.7, 2)]
    assert bench.acceptance_bins(points, width=0.5) == [
        pytest.approx((0.25, 1.5, 2)), pytest.approx((0.6, 2.0, 1)), pytest.approx((1.7333333, 3.0, 3))]
    assert bench.acceptance_bins([]) == []


def test_budget_sweep_runs_each_m_at_each_batch_size(pair):
    budgets, batch_sizes = (2, 4, 9), (1, 2)
    runs, vanilla = bench.budget_sweep(pair, settings(), PROMPTS, batch_sizes, budgets, 0.0, 12, 64)
    assert [(r.batch_size, r.num_verify_tokens) for r in runs] == [(b, m) for b in batch_sizes for m in budgets]
    assert set(vanilla) == set(batch_sizes) and all(rate > 0 for rate in vanilla.values())
    for run in runs:
        # EAGLE-2's pool (510 nodes) is far larger than m: exactly m - 1 draft tokens are verified
        assert run.mean_verified_tokens == pytest.approx(run.num_verify_tokens - 1)
        assert run.lossless is True and run.tokens_per_s > 0
        assert len(run.points) >= run.iterations  # one point per running sequence per iteration
        assert statistics.fmean(t for _, t in run.points) == pytest.approx(run.tau)
        assert all(0 < v <= run.num_verify_tokens - 1 and 1 <= t <= 7 for v, t in run.points)
    tau = {r.num_verify_tokens: r.tau for r in runs if r.batch_size == 1}
    assert tau[2] <= 2 and tau[9] > tau[2]  # one verified token commits at most two


def test_figures_write_json_and_png(pair, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "load_inputs", lambda args: (PROMPTS[:2], settings(), "test", pair))
    for figure in bench.FIGURES:
        out = tmp_path / f"{figure}.json"
        assert bench.main(["--figure", figure, "--dataset", "unused", "--num-prompts", "2", "--max-new-tokens", "8",
                           "--budgets", "2,5", "--batch-size", "1,2", "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["figure"] == figure and set(data["vanilla_tokens_per_s"]) == {"1", "2"}
        assert [(r["batch_size"], r["num_verify_tokens"]) for r in data["runs"]] == [(1, 2), (1, 5), (2, 2), (2, 5)]
        assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_figure_flags_exit_2_with_one_line(tmp_path, capsys):
    common = ["--dataset", str(tmp_path / "none.jsonl"), "--json", str(tmp_path / "o.json")]
    assert bench.main(common + ["--figure", "acceptance", "--budgets", "1,8"]) == 2
    assert "--budgets: expected comma-separated integers in [2, 511], got '1,8'" in capsys.readouterr().err
    assert bench.main(common + ["--figure", "verify-budget", "--temperature", "0,1"]) == 2
    assert "--temperature: --figure takes one temperature, got '0,1'" in capsys.readouterr().err
    assert bench.main(common + ["--figure", "acceptance", "--methods", "cast"]) == 2
    assert "--methods: not used with --figure" in capsys.readouterr().err


def test_packed_formats_accept_near_tie_divergences_only(pair, monkeypatch, capsys):
    """A divergence is judged on the target's logits: within a (huge) tolerance it is a
    near-tie and the run passes; under fp32's tolerance the same planted token fails."""
    import torch

    from sglang_cast.models import NearTieRule

    plant_wrong_cast_token(monkeypatch)
    methods = [bench.Method.parse(m) for m in ("vanilla", "cast")]
    loose = NearTieRule(torch.bfloat16, num_layers=10**6, inner_dim=1)
    cast = bench.bench(pair, methods, settings(), {}, PROMPTS, [2], [0.0], 12, 64, near_tie_rule=loose)[1]
    assert cast.lossless is False and cast.near_ties_only is True and not bench.check_failed(cast)
    assert cast.mismatches[0]["near_tie"] and cast.mismatches[0]["gap"] <= cast.mismatches[0]["tolerance"]
    assert "LOSSLESS CHECK FAILED" not in capsys.readouterr().err
    assert "near-tie divergence" in bench.markdown([cast], "tiny")
    strict = NearTieRule(torch.float32, num_layers=1, inner_dim=64)
    cast = bench.bench(pair, methods, settings(), {}, PROMPTS, [2], [0.0], 12, 64, near_tie_rule=strict)[1]
    assert cast.near_ties_only is False and bench.check_failed(cast)
    assert "LOSSLESS CHECK FAILED: cast at batch 2" in capsys.readouterr().err
