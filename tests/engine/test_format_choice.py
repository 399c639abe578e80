"""``weight_format="auto"`` (sglang_cast/engine/format_choice.py): the profile's recorded
format, the ISA-mismatch warning, the measured choice on a planted cost table, the
profile fields that carry the choice, and cast-autotune publishing the faster format."""

import logging
import sqlite3
from dataclasses import replace

import pytest

from autotune.store import Setup, Store
from autotune.tuner import BucketResult
from autotune.workflow import FormatTuning, TuneConfig, fastest_format, tune_and_publish
from sglang_cast.cast import BucketSettings, TreeShape
from sglang_cast.engine import build
from sglang_cast.engine.format_choice import (AMX_CANDIDATES, AMX_DRAFT_CANDIDATES, CANDIDATES, DRAFT_CANDIDATES,
                                              VNNI_CANDIDATES, VNNI_DRAFT_CANDIDATES,
                                              candidates, choose_weight_format, cheapest, draft_candidates,
                                              draft_sizes, measure_costs, parse_requested, profile_format,
                                              running_format, verify_sizes)
from sglang_cast.engine.timing import Timing
from sglang_cast.hardware import isa_class
from sglang_cast.profile import Profile, ProfileError, find_profile, load_profile, save_profile
from support.autotune import FORMAT_SETTINGS, profile, tiny_prompts

# ms of one batch-1 forward per format and M: int4/int8 is cheapest at M=1, bf16 once M=16 counts too
# (the AMX and VNNI formats, timed where their kernels run only, never win here).
PLANTED = {"fp32": {1: 32.0, 16: 64.0}, "bf16": {1: 37.0, 16: 46.0}, "int8": {1: 20.0, 16: 70.0},
           "int4/int8": {1: 15.0, 16: 45.0 + 30.0}, "int4amx/int8amx": {1: 40.0, 16: 80.0},
           "int4vnni/int8vnni": {1: 40.0, 16: 80.0}}
AMX_FLAGS = frozenset({"amx_tile", "amx_bf16", "avx512_bf16", "avx512bw"})
VNNI_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"})


def planted_timer(calls=None):
    def time_once(fmt, m):
        if calls is not None:
            calls.append((fmt, m))
        return PLANTED[fmt][m]
    return time_once


def refusing_timer(fmt, m):
    raise AssertionError("nothing may be timed when the format is already decided")


def test_measured_choice_is_the_cheapest_summed_over_the_timed_sizes(caplog):
    calls = []
    with caplog.at_level(logging.INFO, logger="sglang_cast.engine.format_choice"):
        at_1 = choose_weight_format("auto", device="cpu", sizes=(1,), time_once=planted_timer(calls))
        at_16 = choose_weight_format("auto", device="cpu", sizes=(1, 16), time_once=planted_timer())
    assert (at_1.weight_format, at_1.reason) == ("int4/int8", "measured")
    assert at_16.weight_format == "bf16" and at_16.costs_ms == {fmt: PLANTED[fmt] for fmt in candidates()}
    assert {fmt for fmt, _ in calls} == set(candidates()) and {m for _, m in calls} == {1}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("measured" in line for line in lines)
    assert "weight format bf16" in lines[1] and all(f"{fmt} M=1" in lines[1] for fmt in candidates())


def test_the_amx_tile_formats_are_candidates_only_where_their_kernels_run():
    assert candidates(AMX_FLAGS) == CANDIDATES + AMX_CANDIDATES == ("fp32", "bf16", "int8", "int4/int8",
                                                                    "int4amx/int8amx")
    assert draft_candidates(AMX_FLAGS) == DRAFT_CANDIDATES + AMX_DRAFT_CANDIDATES
    without = AMX_FLAGS - {"amx_bf16"}
    assert candidates(without) == CANDIDATES and draft_candidates(without) == DRAFT_CANDIDATES


def test_the_vnni_formats_are_candidates_only_where_their_kernels_run():
    assert candidates(VNNI_FLAGS) == CANDIDATES + VNNI_CANDIDATES == ("fp32", "bf16", "int8", "int4/int8",
                                                                      "int4vnni/int8vnni")
    assert draft_candidates(VNNI_FLAGS) == DRAFT_CANDIDATES + VNNI_DRAFT_CANDIDATES
    assert candidates(VNNI_FLAGS | AMX_FLAGS) == CANDIDATES + AMX_CANDIDATES + VNNI_CANDIDATES
    without = VNNI_FLAGS - {"avx512_vnni"}
    assert candidates(without) == CANDIDATES and draft_candidates(without) == DRAFT_CANDIDATES


def test_candidates_are_timed_round_robin_and_the_budget_stops_new_rounds():
    calls = []
    ticks = iter(range(1000))
    costs = measure_costs(planted_timer(calls), ["fp32", "bf16"], (1, 16), rounds=5, warmup=1, budget_s=2.5,
                          clock=lambda: next(ticks))
    # the clock reads 0 at the start and ticks once per check before rounds 2, 3, 4:
    # rounds 0 (warm-up) to 3 run, round 4 finds 3 s > 2.5 s spent and is not started
    assert calls == [("fp32", 1), ("fp32", 16), ("bf16", 1), ("bf16", 16)] * 4
    assert costs == {"fp32": PLANTED["fp32"], "bf16": PLANTED["bf16"]}
    assert cheapest(costs) == "bf16"


def test_a_measured_profile_that_records_its_format_decides():
    choice = choose_weight_format("auto", device="cpu", profile=profile(), time_once=refusing_timer,
                                  this_isa="amx")
    assert (choice.weight_format, choice.reason) == ("int8", "profile")


def test_a_profile_in_an_amx_tile_format_runs_torch_kernels_where_amx_is_missing(caplog):
    tiles = profile(weight_format="int4amx/int8amx:dense32:bf16+int8amx")
    with caplog.at_level(logging.WARNING, logger="sglang_cast.engine.format_choice"):
        assert profile_format(tiles, "amx", AMX_FLAGS) == "int4amx/int8amx:dense32:bf16+int8amx"
        assert not caplog.records
        assert profile_format(tiles, "amx", frozenset({"avx2"})) == "int4/int8:dense32:bf16+int8"
        assert profile_format(profile(weight_format="int4/int8+int8"), "amx", frozenset({"avx2"})) == "int4/int8+int8"
    [warning] = [r.getMessage() for r in caplog.records]
    assert "int4amx/int8amx:dense32:bf16+int8amx" in warning and "lacks amx_bf16" in warning
    assert "running int4/int8:dense32:bf16+int8" in warning


def test_a_profile_in_a_vnni_format_runs_torch_kernels_where_vnni_is_missing(caplog):
    vnni = profile(weight_format="int4vnni/int8vnni+int8vnni")
    with caplog.at_level(logging.WARNING, logger="sglang_cast.engine.format_choice"):
        assert profile_format(vnni, "amx", VNNI_FLAGS) == "int4vnni/int8vnni+int8vnni"  # support's profile: amx
        assert not caplog.records
        assert profile_format(vnni, "amx", VNNI_FLAGS - {"avx512_vnni"}) == "int4/int8+int8"
    [warning] = [r.getMessage() for r in caplog.records]
    assert "int4vnni/int8vnni+int8vnni" in warning and "lacks avx512_vnni" in warning


def test_a_profile_whose_kernel_cannot_be_built_here_runs_torch_kernels(monkeypatch, caplog):
    """A CPU with the ISA but no compiler: the served profile falls back, it does not fail the model load."""
    from sglang_cast.models import cpu_kernel

    def no_compiler(kernel):
        raise RuntimeError("building its kernel (vnni_dot.cpp) failed; it needs g++ (GCC >= 11) and ninja: no g++")

    monkeypatch.setattr(cpu_kernel, "cpu_flags", lambda: VNNI_FLAGS)
    monkeypatch.setattr(cpu_kernel, "_load", no_compiler)
    with caplog.at_level(logging.WARNING, logger="sglang_cast.engine.format_choice"):
        assert profile_format(profile(weight_format="int4vnni/int8vnni+int8"), "amx") == "int4/int8+int8"
    [warning] = [r.getMessage() for r in caplog.records]
    assert "no g++" in warning and "running int4/int8+int8" in warning


@pytest.mark.parametrize("source,weight_format", [("analytic", "int8"), ("measured", None)])
def test_analytic_or_old_profiles_fall_back_to_measuring(source, weight_format):
    choice = choose_weight_format("auto", device="cpu", profile=profile(source, weight_format), sizes=(1,),
                                  time_once=planted_timer(), this_isa="amx")
    assert (choice.weight_format, choice.reason) == ("int4/int8", "measured")


def test_a_profile_from_another_isa_class_warns_once_naming_both_and_the_fix(caplog):
    with caplog.at_level(logging.WARNING):
        choice = choose_weight_format("auto", device="cpu", profile=profile(isa="amx"), time_once=refusing_timer,
                                      this_isa="avx2")
        choose_weight_format("auto", device="cpu", profile=profile(isa="avx2"), time_once=refusing_timer,
                             this_isa="avx2")
        choose_weight_format("auto", device="cpu", profile=profile(isa=None), time_once=refusing_timer,
                             this_isa="avx2")
    assert choice.weight_format == "int8"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "amx" in warnings[0] and "avx2" in warnings[0] and "cast-autotune profile" in warnings[0]


# ms of one batch-1 draft-head forward per draft format and row count: int8 cheapest at both.
DRAFT_PLANTED = {"fp32": {1: 1.3, 4: 1.9}, "bf16": {1: 1.5, 4: 1.6}, "int8": {1: 0.9, 4: 1.2},
                 "int8amx": {1: 1.4, 4: 1.3}, "int8vnni": {1: 1.4, 4: 1.3}}


def test_the_draft_heads_format_is_measured_too_when_a_draft_runs(caplog):
    calls = []

    def time_draft(fmt, m):
        calls.append((fmt, m))
        return DRAFT_PLANTED[fmt][m]

    with caplog.at_level(logging.INFO, logger="sglang_cast.engine.format_choice"):
        drafting = choose_weight_format("auto", device="cpu", sizes=(1,), time_once=planted_timer(),
                                        draft_rows=(1, 4), time_draft=time_draft)
    assert drafting.weight_format == "int4/int8+int8"
    assert drafting.draft_costs_ms == {fmt: DRAFT_PLANTED[fmt] for fmt in draft_candidates()}
    assert {fmt for fmt, _ in calls} == set(draft_candidates()) and {m for _, m in calls} == {1, 4}
    assert "draft head: fp32 M=1 1.3 ms" in caplog.records[-1].getMessage()
    plain = choose_weight_format("auto", device="cpu", sizes=(1,), time_once=planted_timer(), draft_rows=(),
                                 time_draft=refusing_timer)
    assert plain.weight_format == "int4/int8"  # no draft runs: it stays dense
    recorded = choose_weight_format("auto", device="cpu", profile=profile(weight_format="int4/int8+int8"),
                                    time_once=refusing_timer, draft_rows=(1, 4), time_draft=refusing_timer,
                                    this_isa="amx")
    assert recorded.weight_format == "int4/int8+int8"


def test_draft_sizes_are_one_row_and_the_widest_layer_of_a_speculating_bucket():
    off = replace(FORMAT_SETTINGS, buckets=tuple(replace(b, speculate=False) for b in FORMAT_SETTINGS.buckets))
    assert draft_sizes(FORMAT_SETTINGS, drafts=False) == () and draft_sizes(off, drafts=True) == ()
    assert draft_sizes(FORMAT_SETTINGS, drafts=True) == (1, 4) and draft_sizes(None, drafts=True) == ()


def test_explicit_formats_and_cuda_are_not_measured():
    assert choose_weight_format("int4", device="cpu", time_once=refusing_timer).weight_format == "int4"
    assert choose_weight_format("int4/int4", device="cpu", time_once=refusing_timer).reason == "explicit"
    cuda = choose_weight_format("auto", device="cuda:0", profile=profile(), time_once=refusing_timer)
    assert (cuda.weight_format, cuda.reason) == ("fp32", "cuda")
    with pytest.raises(ValueError, match=r"weight_format: 'int3' is not .* \(or 'auto'\)"):
        parse_requested("int3")


def test_verify_sizes_follow_the_policy_and_the_speculating_buckets():
    off = replace(FORMAT_SETTINGS, buckets=tuple(replace(b, speculate=False) for b in FORMAT_SETTINGS.buckets))
    assert verify_sizes(FORMAT_SETTINGS, drafts=False) == (1,)
    assert verify_sizes(FORMAT_SETTINGS, drafts=True) == (1, 16)
    assert verify_sizes(off, drafts=True) == (1,)


def test_build_engine_loads_the_format_auto_resolves_to(monkeypatch):
    loaded = []

    class Stop(Exception):
        pass

    def load_target(path, device, dtype, weight_format):
        loaded.append(weight_format)
        raise Stop

    monkeypatch.setattr(build, "load_target", load_target)
    monkeypatch.setattr("sglang_cast.engine.format_choice.isa_class", lambda: "amx")
    with pytest.raises(Stop):
        build.build_engine(build.EngineArgs(policy="cast", settings=FORMAT_SETTINGS, profile=profile()))
    assert build.EngineArgs().weight_format == "auto" and loaded == ["int8"]


# ------------------------------------------------------------------ profile fields

def test_profile_round_trip_keeps_the_format_and_isa_class(tmp_path):
    path = save_profile(profile(weight_format="int4/int8", isa="avx512"), tmp_path / "p.yaml")
    loaded = load_profile(path).profile
    assert (loaded.weight_format, loaded.isa_class) == ("int4/int8", "avx512")
    old = save_profile(profile(weight_format=None, isa=None), tmp_path / "old.yaml")
    assert (load_profile(old).profile.weight_format, load_profile(old).profile.isa_class) == (None, None)


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["model"].update(weight_format="int3"), "profile.model.weight_format: 'int3' is not '<linears>'"),
    (lambda d: d["model"].update(weight_format="auto"), "got 'auto'"),
    (lambda d: d["model"].update(weight_format=4), "profile.model.weight_format"),
    (lambda d: d["provenance"]["machine"].update(isa_class="sse"),
     "profile.provenance.machine.isa_class: expected one of ['amx', 'avx512', 'avx2', 'other'], got 'sse'"),
])
def test_bad_format_or_isa_class_is_a_one_line_error(edit, message):
    data = profile().to_dict()
    edit(data)
    with pytest.raises(ProfileError) as err:
        Profile.from_dict(data)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cpu_profiles_are_picked_per_isa_class(tmp_path):
    assert find_profile("cpu", tmp_path, isa="amx") is None
    save_profile(profile(), tmp_path / "cpu.yaml")
    save_profile(profile(isa="avx2"), tmp_path / "cpu-avx2.yaml")
    assert find_profile("cpu", tmp_path, isa="avx2") == tmp_path / "cpu-avx2.yaml"
    assert find_profile("cpu", tmp_path, isa="amx") == tmp_path / "cpu.yaml"
    assert find_profile("h100", tmp_path) is None


# ------------------------------------------------------------------ cast-autotune tune per format

def bucket_result(size: int, rate: float) -> BucketResult:
    return BucketResult(BucketSettings(size, TreeShape(2, 2, 4)), "s", 0, 1, 1, rate, 1.0, 0)


def test_the_objective_is_the_geometric_mean_over_buckets():
    fast_at_1 = FormatTuning("fp32", None, [bucket_result(1, 100.0), bucket_result(8, 10.0)])  # geomean 31.6
    balanced = FormatTuning("bf16", None, [bucket_result(1, 90.0), bucket_result(8, 20.0)])  # geomean 42.4
    assert fastest_format([fast_at_1, balanced]).weight_format == "bf16"
    assert fastest_format([balanced, replace(balanced, weight_format="int8")]).weight_format == "bf16"


def plant_format(store: Store, setup: Setup, weight_format: str, factor: float) -> Setup:
    """Copy ``setup``'s measurements as ``weight_format``'s, every time scaled by ``factor``."""
    planted = replace(setup, target_model=f"{setup.target_model}@{weight_format}")
    for row in store.measurements(setup):
        timing = Timing(row.median_ms * factor, row.p10_ms * factor, row.p90_ms * factor, row.repeats)
        store.add_measurement(planted, row.role, row.batch_size, row.context_len, row.n, timing, row.load_avg)
    return planted


@pytest.mark.parametrize("factor,published", [(0.5, "int8"), (2.0, "fp32")])
def test_tune_publishes_the_format_whose_trees_replay_fastest(tmp_path, factor, published):
    from support.autotune import SETUP, SPACE, fill, tiny_pair

    store, pair = Store(tmp_path / "a.db"), tiny_pair()
    fill(store, prompts=2, batch_sizes=(1,))
    plant_format(store, SETUP, "int8", factor)
    loads = []

    def load_format(fmt):
        loads.append(fmt)
        return replace(tiny_pair(), target_id=f"tiny-target@{fmt}")

    config = TuneConfig(label="tiny", output=tmp_path / "tiny.yaml", buckets=(1,), trials=3, space=SPACE,
                        confirm_prompts=1, confirm_max_new_tokens=16, context_length=128,
                        weight_formats=("fp32", "int8", "bf16"))
    outcome = tune_and_publish(pair, store, SETUP, config, tiny_prompts(), load_format=load_format, progress=False)
    rates = {t.weight_format: t.score for t in outcome.formats}
    assert (rates["int8"] > rates["fp32"]) == (factor < 1)
    assert outcome.weight_format == published and outcome.not_profiled == ("bf16",)
    assert loads == ([published] if published != "fp32" else [])
    loaded = load_profile(config.output).profile
    assert loaded.weight_format == published and loaded.isa_class == isa_class()
    assert loaded.model["target"] == ("tiny-target" if published == "fp32" else f"tiny-target@{published}")
    formats = loaded.provenance["weight_formats"]
    assert formats["published"] == published and formats["not_profiled"] == ["bf16"]
    assert [t["weight_format"] for t in formats["tuned"]] == ["fp32", "int8"]
    with sqlite3.connect(store.path) as db:  # each format has its own studies
        studies = {name for (name,) in db.execute("select study_name from studies")}
    assert any("-int8-b1" in name for name in studies) and any(name.endswith("-b1") and "-int8" not in name
                                                                for name in studies)


def test_a_tune_without_a_live_gate_publishes_another_format_without_loading_it(tmp_path):
    """`tune --confirm-prompts 0` (every `--backend sglang` tune) runs nothing live, so
    the fastest format is published without a loader for it."""
    from support.autotune import SETUP, SPACE, fill, tiny_pair

    store = Store(tmp_path / "a.db")
    fill(store, prompts=2, batch_sizes=(1,))
    plant_format(store, SETUP, "int8", 0.5)
    config = TuneConfig(label="tiny", output=tmp_path / "tiny.yaml", buckets=(1,), trials=3, space=SPACE,
                        confirm_prompts=0, weight_formats=("fp32", "int8"))
    outcome = tune_and_publish(tiny_pair(), store, SETUP, config, tiny_prompts(), load_format=None, progress=False)
    assert outcome.weight_format == "int8" and outcome.confirmations == {}
    assert load_profile(config.output).profile.weight_format == "int8"


# ------------------------------------------------------------------ tools/bench.py

def test_bench_auto_loads_the_profiles_format_and_names_it_in_every_record(monkeypatch, tmp_path):
    import json

    from autotune.models import ModelPair
    from autotune.prompts import PromptSet
    from sglang_cast.models.weights import WeightFormat, apply_weight_format
    from sglang_cast.profile import LoadedProfile
    from support.tiny import CharTokenizer, MirrorDraft, tiny_target
    from tools import bench
    from tools.benchkit import cli

    asked = []

    def load_model_pair(model_path, draft_path, device, dtype, weight_format):
        asked.append(weight_format)
        target = apply_weight_format(tiny_target(), WeightFormat.parse(weight_format))
        return ModelPair(target, MirrorDraft(target), CharTokenizer(), target_id="tiny", draft_id="mirror", dtype="float32",
                         chat_template=False)

    monkeypatch.setattr(cli, "load_prompts", lambda path: PromptSet("p", ("a", "b"), ("hello", "abc")))
    monkeypatch.setattr(cli, "load_settings", lambda path, device: LoadedProfile(
        profile(weight_format="int8", isa=isa_class()), tmp_path, "v1"))
    monkeypatch.setattr(cli, "load_model_pair", load_model_pair)
    out = tmp_path / "bench.json"
    assert bench.main(["--dataset", "unused", "--methods", "vanilla", "--num-prompts", "2", "--max-new-tokens", "4",
                       "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert asked == ["int8"]
    assert (data["model"]["weight_format"], data["model"]["weight_format_requested"],
            data["model"]["weight_format_reason"]) == ("int8", "auto", "profile")
    assert [r["weight_format"] for r in data["records"]] == ["int8"]


def test_the_format_is_named_for_what_runs():
    """The spec fp32 means "dense, no packing": in a bfloat16 model (CUDA's auto) that is bf16."""
    import torch

    assert running_format("fp32", torch.float32) == "fp32"
    assert running_format("fp32", torch.bfloat16) == "bf16" and running_format("fp32", torch.float16) == "fp16"
    assert running_format("int4/fp32", torch.bfloat16) == "int4/bf16"
    assert running_format("int4/int8", torch.bfloat16) == "int4/int8" and running_format("bf16", torch.float32) == "bf16"
    assert running_format("int4/int8+int8", torch.float32) == "int4/int8+int8"
    assert running_format("fp32+fp32", torch.bfloat16) == "bf16"  # a dense draft is not named
    assert running_format("int4/fp32:dense32+int8", torch.bfloat16) == "int4/bf16:dense32+int8"
    with pytest.raises(ValueError, match="dtype"):
        running_format("fp32", torch.int8)
    cuda = choose_weight_format("auto", device="cuda", dtype=torch.bfloat16, time_once=refusing_timer)
    assert (cuda.weight_format, cuda.reason) == ("fp32", "cuda")  # the spec load_target takes: no packing
    assert cuda.describe(torch.bfloat16) == "weight format bf16 (cuda)"


def test_a_draft_format_keys_its_own_cost_curves_and_shares_the_reference_traces():
    """The draft's format is part of the pair's weight format, so its forwards are their
    own setup (the target id carries the whole format) while ``collect``'s traces, keyed
    by the fp32 reference id and the draft's id, serve every format."""
    from autotune.models import format_target_id, reference_target_id

    packed = format_target_id("embedded:m", "int4/int8+int8")
    assert packed == "embedded:m@int4/int8+int8" != format_target_id("embedded:m", "int4/int8")
    assert reference_target_id(packed) == "embedded:m" and format_target_id(packed, "fp32") == "embedded:m"


def test_the_real_timers_load_and_time_every_candidate_of_a_checkpoint(tmp_path, monkeypatch):
    """What ``auto`` runs without a recorded profile format: `target_timer` and
    `draft_timer` load a tiny HF checkpoint (and an EAGLE-3 head saved beside it) in
    every candidate format and time its real forwards; the choice is their cheapest."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    import sglang_cast.models as models_module
    from sglang_cast.models import DraftConfig, DraftFormat, Eagle3Draft, ModelConfig, WeightFormat
    from sglang_cast.models.eagle import save_draft
    from support.models import make_pair

    hf, target = make_pair("llama", seed=3)
    hf.save_pretrained(tmp_path / "target")
    words = models.WordLevel({f"w{i}": i for i in range(target.config.vocab_size)}, unk_token="w0")
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(words), eos_token="w2").save_pretrained(tmp_path / "target")
    layer = ModelConfig.from_hf({**target.config.to_hf(), "num_hidden_layers": 1})
    save_draft(Eagle3Draft(DraftConfig("eagle3", layer, False, draft_vocab_size=32), target), tmp_path / "draft")
    loaded = []  # (what, format) of every model the timers load

    def spy(what, load):
        def loading(*args):
            loaded.append((what, str(args[-1])))
            return load(*args)
        return loading
    monkeypatch.setattr(models_module, "load_target", spy("target", models_module.load_target))
    monkeypatch.setattr(models_module, "load_draft", spy("draft", models_module.load_draft))
    choice = choose_weight_format("auto", device="cpu", sizes=(1, 4), model_path=str(tmp_path / "target"),
                                  draft_path=tmp_path / "draft", draft_rows=(1, 3))
    assert choice.reason == "measured"
    targets, drafts = candidates(), draft_candidates()
    assert loaded[:len(targets)] == [("target", fmt) for fmt in targets]
    assert loaded[len(targets):] == [("target", cheapest(choice.costs_ms))] + [
        ("draft", fmt) for fmt in drafts]  # the head on the chosen target, in each of its formats
    assert set(choice.costs_ms) == set(targets) and set(choice.draft_costs_ms) == set(drafts)
    timed = [ms for costs in (choice.costs_ms, choice.draft_costs_ms) for row in costs.values() for ms in row.values()]
    assert all(ms > 0 for ms in timed) and len(timed) == 2 * len(targets) + 2 * len(drafts)
    expected = WeightFormat.parse(cheapest(choice.costs_ms))
    assert choice.weight_format == str(replace(expected, draft=DraftFormat.parse(cheapest(choice.draft_costs_ms))))
