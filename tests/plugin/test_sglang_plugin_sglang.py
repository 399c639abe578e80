"""The plugin against real SGLang 0.5.23, on CPU.

Needs an interpreter where SGLang's modules import (``bash
tools/setup_sglang_env.sh`` builds ``.venv-sglang``); elsewhere the module is
skipped with the reason.  SGLang's Triton kernels run through Triton's
interpreter (``TRITON_INTERPRET=1``, set here before SGLang is imported).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from support.plugin import (Float32Model, PathDraftRunner, launch_args, no_draft_above_two, require_sglang,  # noqa: E402
                            steep_costs, unused_forwards, worker_iteration)

require_sglang("sglang.kernels.ops.speculative.spec_tree", "sglang.srt.server_args",
               "sglang.srt.speculative.eagle_utils", "sglang.srt.speculative.eagle_worker_v2",
               "sglang.srt.speculative.spec_info")

from sglang.kernels.ops.speculative import spec_tree  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.eagle_utils import build_tree_kernel_efficient  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from sglang_cast.cast import (ContextLookup, PolicySettings, Proposal, Thresholds, TreeShape, graft_proposals,  # noqa: E402
                              make_policy, verify_greedy)
from sglang_cast.sglang_plugin.decider import CastDecider  # noqa: E402
from sglang_cast.sglang_plugin.launch import translate_args  # noqa: E402
from sglang_cast.sglang_plugin.plugin_config import PROFILE_ENV, StaticShape  # noqa: E402
from sglang_cast.sglang_plugin.rank_sync import ProfileBroadcast  # noqa: E402
from sglang_cast.sglang_plugin.verify_layout import verifiable_ranking, verify_layout  # noqa: E402
from support import ROOT  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def plugins_loaded():
    from sglang.srt.plugins import load_plugins

    load_plugins()


# ------------------------------------------------------------ registration
def test_the_plugin_is_discovered_through_its_entry_point():
    from importlib.metadata import entry_points

    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group

    names = {ep.name: ep.value for ep in entry_points(group=GENERAL_PLUGINS_GROUP)}
    assert names["sglang_cast"] == "sglang_cast.sglang_plugin.register:register"
    assert "sglang_cast" in load_plugins_by_group(GENERAL_PLUGINS_GROUP)


@pytest.mark.parametrize("name, policy", [("CAST", "cast"), ("goodput", "goodput")])
@pytest.mark.parametrize("overlap", [True, False])
def test_algorithm_names_resolve_to_our_spec_and_worker(name, policy, overlap):
    from sglang_cast.sglang_plugin.spec import CastSpecAlgo
    from sglang_cast.sglang_plugin.worker import CastWorker

    spec = SpeculativeAlgorithm.from_string(name)
    assert isinstance(spec, CastSpecAlgo) and spec.policy_name == policy
    assert spec.is_eagle() and spec.need_topk() and spec.has_draft_kv() and not spec.is_ngram()
    server_args = ServerArgs(model_path="m", speculative_algorithm=name.upper(), speculative_draft_model_path="d",
                             speculative_num_steps=6, speculative_eagle_topk=4, speculative_num_draft_tokens=20,
                             disable_overlap_schedule=not overlap)
    worker = spec.create_worker(server_args)
    assert worker is CastWorker and issubclass(worker, EAGLEWorkerV2)


@pytest.mark.parametrize("builtin", ["EAGLE", "EAGLE3"])
def test_every_capability_question_is_answered_like_the_builtin(builtin):
    """SGLang dispatches on these without isinstance checks; CAST must take EAGLE's
    branches everywhere (EAGLE3's for an EAGLE-3 head)."""
    from sglang_cast.sglang_plugin.spec import CastSpecAlgo

    spec = CastSpecAlgo("CAST", lambda server_args: None)
    spec.__dict__["builtin"] = SpeculativeAlgorithm[builtin]  # what the draft's config.json would decide
    questions = [name for name in vars(SpeculativeAlgorithm)
                 if name.startswith(("is_", "supports_", "has_", "need_", "carries_"))]
    assert len(questions) >= 20
    for name in questions:
        assert getattr(spec, name)() == getattr(SpeculativeAlgorithm[builtin], name)(), name


def test_registering_twice_changes_nothing():
    from sglang_cast.sglang_plugin.register import register

    before = SpeculativeAlgorithm.from_string("CAST")
    register()
    assert SpeculativeAlgorithm.from_string("CAST") is before


# ------------------------------------------------------------ server args
def cast_server_args(**overrides) -> ServerArgs:
    values = dict(model_path="m", speculative_algorithm="CAST", speculative_draft_model_path="d",
                  speculative_num_steps=6, speculative_eagle_topk=4, speculative_num_draft_tokens=20,
                  attention_backend="flashinfer")
    values.update(overrides)
    return ServerArgs(**values)


def validate(server_args: ServerArgs) -> None:
    SpeculativeAlgorithm.from_string(server_args.speculative_algorithm).validate_server_args(server_args)


def test_valid_server_args_pass(profile_path, monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, str(profile_path))
    validate(cast_server_args())
    validate(cast_server_args(dp_size=2))  # replicas, each with the same profile
    validate(cast_server_args(device="cpu", attention_backend="intel_amx"))  # SGLang's CPU engine


def test_on_the_cpu_overlap_is_turned_off_as_for_sglangs_eagle(profile_path, monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, str(profile_path))
    algorithm = SpeculativeAlgorithm.from_string("CAST")
    on_cpu, on_gpu = (cast_server_args(device="cpu", attention_backend="intel_amx"), cast_server_args())
    for server_args in (on_cpu, on_gpu):
        algorithm.handle_server_args(server_args)
    assert on_cpu.disable_overlap_schedule and not on_gpu.disable_overlap_schedule


def test_a_tensor_parallel_server_takes_a_profile_made_for_its_layout_only(profile_path, monkeypatch):
    from sglang_cast.profile import load_profile, save_profile

    profile = load_profile(profile_path).profile
    tp4 = save_profile(replace(profile, provenance={"sglang": {"parallel": {"tp_size": 4}}}),
                       profile_path.parent / "tp4.yaml")
    monkeypatch.setenv(PROFILE_ENV, str(tp4))
    validate(cast_server_args(tp_size=4))
    with pytest.raises(ValueError) as refused:
        validate(cast_server_args(tp_size=2))
    assert "\n" not in str(refused.value)
    assert "was made for --tp-size 4 --pp-size 1 but this server runs --tp-size 2 --pp-size 1" in str(refused.value)
    monkeypatch.setenv(PROFILE_ENV, str(profile_path))
    with pytest.raises(ValueError, match="was made for --tp-size 1"):
        validate(cast_server_args(tp_size=4))


@pytest.mark.parametrize("overrides, message", [
    (dict(speculative_draft_model_path=None), "--speculative-draft-model-path .* is required"),
    (dict(speculative_num_steps=None), "are required"),
    (dict(attention_backend="triton"), "--attention-backend must be flashinfer"),
    (dict(device="cpu", attention_backend="torch_native"),
     "--attention-backend must be intel_amx on --device cpu .got 'torch_native'.*--backend sglang --device cpu"),
    (dict(tp_size=2), "was made for --tp-size 1 --pp-size 1 but this server runs --tp-size 2 --pp-size 1: "),
    (dict(pp_size=2), r"--pp-size must be 1 \(got 2\): SGLang 0.5.23's EAGLE worker .*eagle_worker_v2.py:1508-1545"),
    (dict(speculative_use_rejection_sampling=True), "--speculative-use-rejection-sampling is not supported"),
    (dict(speculative_num_steps=5), "max_depth=6 but SGLang runs with --speculative-num-steps 5"),
    (dict(speculative_num_draft_tokens=86), r"topk \+ topk\^2\*\(steps-1\) \+ 1 = 85\]"),
])
def test_invalid_server_args_fail_with_a_clear_message(overrides, message, profile_path, monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, str(profile_path))
    with pytest.raises(ValueError, match=message):
        validate(cast_server_args(**overrides))


def llama_8b_with_an_eagle3_head(tmp_path, monkeypatch, gpu_gib: float) -> dict:
    """Server args for Llama-3.1-8B (the hand-written config in profiles/models) with
    an EAGLE-3 head and profiles/h100.yaml, on a GPU of ``gpu_gib`` as SGLang sees it."""
    from sglang.srt.utils import common

    root = ROOT
    head = tmp_path / "eagle3-llama-8b"
    head.mkdir()
    target = json.loads((root / "profiles/models/llama-3.1-8b/config.json").read_text())
    (head / "config.json").write_text(json.dumps(dict(target, architectures=["LlamaForCausalLMEagle3"],
                                                      num_hidden_layers=1)))
    monkeypatch.setattr(common, "get_device_memory_capacity", lambda device=None: gpu_gib * 1024)
    monkeypatch.setenv(PROFILE_ENV, str(root / "profiles/h100.yaml"))
    return dict(model_path=str(root / "profiles/models/llama-3.1-8b"), speculative_draft_model_path=str(head),
                speculative_num_steps=13, speculative_eagle_topk=12, speculative_num_draft_tokens=72)


def test_a_launch_that_would_not_fit_is_refused_before_loading_with_the_fix(tmp_path, monkeypatch):
    args = llama_8b_with_an_eagle3_head(tmp_path, monkeypatch, gpu_gib=80)
    validate(cast_server_args(**args, context_length=8192))  # SGLang's default fraction
    with pytest.raises(ValueError, match=r"would not fit in 80 GiB of GPU memory: --mem-fraction-static 0\.950 "
                                         r"leaves SGLang .* drop the flag .* or pass (0\.\d{3}) or less") as refused:
        validate(cast_server_args(**args, context_length=8192, mem_fraction_static=0.95))
    fraction = float(str(refused.value).split("or pass ")[1].split()[0])
    validate(cast_server_args(**args, context_length=8192, mem_fraction_static=fraction))
    with pytest.raises(ValueError, match="leave no KV pool|pass --context-length \\d+ or less"):
        validate(cast_server_args(**args, context_length=1_000_000))


def test_the_memory_check_is_skipped_when_the_gpu_is_unknown(tmp_path, monkeypatch):
    args = llama_8b_with_an_eagle3_head(tmp_path, monkeypatch, gpu_gib=0)
    validate(cast_server_args(**args, context_length=8192))


def test_server_args_without_a_profile_say_how_to_give_one(monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    with pytest.raises(ValueError, match=f"set {PROFILE_ENV}"):
        validate(cast_server_args())


def test_translated_flags_parse_with_sglangs_own_parser(profile_path, eagle3_head):
    args = launch_args(speculative_algorithm="CAST", speculative_draft_model_path=str(eagle3_head),
                       cast_profile=profile_path, api_key="k", device="cuda:1")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    parsed = parser.parse_args(translate_args(args))
    assert (parsed.speculative_algorithm, parsed.speculative_num_steps, parsed.speculative_eagle_topk,
            parsed.speculative_num_draft_tokens) == ("CAST", 6, 4, 20)
    assert (parsed.attention_backend, parsed.device, parsed.base_gpu_id, parsed.port, parsed.api_key) == (
        "flashinfer", "cuda", 1, 30000, "k")


# ------------------------------------------------- SGLang's tree kernels
def target_path(model, root: int, length: int) -> list[int]:
    """The tokens the target would decode after ``root``: a proposal it accepts whole."""
    path = (root,)
    for _ in range(length):
        path += (model.target_argmax(path),)
    return list(path[1:])


def random_layout(seed: int, graft: bool = False):
    """A worker iteration's layout; with ``graft``, each sequence's tree also holds a
    prompt-lookup proposal (half of them the target's own continuation, so verify
    accepts grafted nodes), valued as an 8-token match so it ranks high."""
    rng = random.Random(seed)
    topk, depth = rng.choice([2, 3, 4]), rng.choice([1, 2, 4])
    shape = TreeShape(top_k=topk, max_depth=depth, num_verify_tokens=rng.choice([4, 8, 12]))
    settings = PolicySettings.single(steep_costs(), shape, Thresholds(rng.choice([0.1, 1.0]), 0.3, 0.5))
    decider = CastDecider(make_policy(rng.choice(["cast", "goodput", "eagle2"]), settings),
                          StaticShape(depth, topk, shape.num_verify_tokens))
    batch = rng.choice([1, 2, 3])
    roots = torch.tensor([rng.randrange(16) for _ in range(batch)])
    model = Float32Model(vocab=16, seed=seed)
    _, drafted, k, _, _ = worker_iteration(decider, model, roots, 200, topk, depth)
    if graft:
        lookup = ContextLookup(depth=6)
        proposals = [Proposal(target_path(model, int(root), 6) if rng.random() < 0.5
                              else [rng.randrange(16) for _ in range(rng.randrange(1, 7))], 8) for root in roots]
        graft_proposals(drafted.tree, proposals, lookup)
    ranking = verifiable_ranking(drafted, depth, decider.widths_at(depth)[-1] - 1)
    layout = verify_layout(drafted, decider.width(depth, k, ranking.shape[1]), depth, ranking)
    seq_lens = torch.tensor([rng.randrange(1, 9) for _ in range(batch)])
    return layout, roots, seq_lens, topk, depth, model, drafted


@pytest.mark.parametrize("graft", [False, True], ids=["drafted", "grafted"])
@pytest.mark.parametrize("seed", range(8))
def test_sglangs_tree_kernel_builds_our_mask_positions_and_retrieve_indices(seed, graft, monkeypatch):
    # Route SGLang's build_tree_kernel_efficient to its Triton kernel (the XPU path)
    # on this CPU-only machine; TRITON_INTERPRET=1 executes it on CPU tensors.
    monkeypatch.setattr(spec_tree, "_is_xpu", True)
    layout, roots, seq_lens, topk, depth, _, _ = random_layout(seed, graft)
    batch, n = roots.numel(), layout.width
    mask, positions, retrieve_index, next_token, next_sibling, tokens = build_tree_kernel_efficient(
        roots, layout.parent_list, layout.top_scores_index, layout.draft_tokens, seq_lens, int(seq_lens.sum()),
        topk, depth, n, spec_tree.TreeMaskMode.FULL_MASK)
    ours = layout.verified
    assert torch.equal(tokens.view(batch, n), ours.tokens)
    assert torch.equal(positions.view(batch, n), ours.positions(seq_lens))
    assert torch.equal(retrieve_index, torch.arange(batch * n).view(batch, n))
    offset = 0
    expected_mask = ours.mask
    for b in range(batch):
        rows = mask[offset: offset + n * (int(seq_lens[b]) + n)].view(n, int(seq_lens[b]) + n)
        offset += rows.numel()
        assert rows[:, : int(seq_lens[b])].all()  # the committed prefix is visible to every node
        assert torch.equal(rows[:, int(seq_lens[b]):], expected_mask[b])
        for node in range(n):  # children, best first, as next-token / next-sibling chains
            chain, child = [], int(next_token[b, node])
            while child != -1:
                chain.append(child)
                child = int(next_sibling[b, child])
            assert chain == (ours.parents[b] == node).nonzero().flatten().tolist()


@pytest.mark.parametrize("graft", [False, True], ids=["drafted", "grafted"])
@pytest.mark.parametrize("seed", range(8))
def test_sglangs_greedy_verify_accepts_what_ours_accepts(seed, graft, monkeypatch):
    monkeypatch.setattr(spec_tree, "_is_xpu", True)
    layout, roots, seq_lens, topk, depth, model, drafted = random_layout(seed, graft)
    batch, n = roots.numel(), layout.width
    _, _, retrieve_index, next_token, next_sibling, tokens = build_tree_kernel_efficient(
        roots, layout.parent_list, layout.top_scores_index, layout.draft_tokens, seq_lens, int(seq_lens.sum()),
        topk, depth, n, spec_tree.TreeMaskMode.FULL_MASK)
    argmax = model.argmax_for(drafted.tree, layout.verified.node_ids)
    predicts = torch.zeros(batch * n, dtype=torch.int32)
    accept_index = torch.full((batch, depth + 1), -1, dtype=torch.int32)
    accepted = torch.empty(batch, dtype=torch.int32)
    spec_tree.verify_tree_greedy_func(predicts, accept_index, accepted, tokens.view(batch, n), retrieve_index,
                                      next_token, next_sibling, argmax, topk)
    ours = verify_greedy(layout.verified, argmax)
    assert accepted.tolist() == ours.num_accepted
    for b in range(batch):
        count = ours.num_accepted[b]
        assert (accept_index[b, 1: count + 1] - b * n).tolist() == ours.paths[b]
        last = int(accept_index[b, count])
        assert int(predicts[last]) == ours.bonus[b]


# ------------------------------------------- the worker's draft, end to end
def test_the_workers_draft_hands_sglang_the_native_engines_verified_tree(monkeypatch):
    from sglang_cast.cast import grow_tree, select_verified
    from sglang_cast.sglang_plugin import worker as worker_module

    topk, steps, batch_size = 4, 5, 3
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=3, max_depth=5, num_verify_tokens=12),
                                     Thresholds(0.3, 0.4, 0.6))
    model = Float32Model(vocab=16, seed=11)
    roots = torch.tensor([2, 9, 4])
    runner = PathDraftRunner(model, steps + 2)
    root_children = [torch.sort(model.draft_probs((int(r),)).float(), descending=True) for r in roots]
    draft_input = argparse.Namespace(
        topk_p=torch.stack([c.values[:topk] for c in root_children]),
        topk_index=torch.stack([c.indices[:topk] for c in root_children]),
        hidden_states=runner.encode([(int(r),) for r in roots]), bonus_tokens=roots.int())
    forward_batch = argparse.Namespace(
        batch_size=batch_size, out_cache_loc=torch.arange(batch_size * topk * steps), input_ids=None,
        positions=torch.zeros(batch_size * topk, dtype=torch.long), sampling_info=None, spec_info=draft_input,
        forward_mode=argparse.Namespace(is_idle=lambda: False), mark_forward_metadata_ready=lambda: None,
        moe_num_token_non_padded=None)
    captured = {}
    monkeypatch.setattr(worker_module, "prepare_for_draft", lambda *args, **kwargs: (forward_batch, False, None))
    def build_eagle_verify_input(batch, draft_input, *tree, **kwargs):
        captured.update(tree=tree, **kwargs)
        return object.__new__(worker_module.EagleVerifyInput)

    monkeypatch.setattr(worker_module, "build_eagle_verify_input", build_eagle_verify_input)

    def with_history(policy):
        """One good ratio among poor ones in every layer's FIFO: the reachable depth
        (the FIFOs' best ratios) lies past the predicted one (their means)."""
        for layer in range(1, steps):
            for ratio in (0.05, 0.05, 0.05, 0.95):
                policy.depth_ratios().push(layer, ratio)
        return policy

    decider = CastDecider(with_history(make_policy("cast", settings)), StaticShape(steps, topk, 12))
    forecast = with_history(make_policy("cast", settings)).begin(batch_size, 700)
    predicted = forecast.predict_depth(draft_input.topk_p.double())
    reachable = forecast.reachable_depth(draft_input.topk_p.double(), predicted)
    assert predicted < reachable  # guard: the two forecasts differ here
    chosen = {}

    def use_depth(layers):
        chosen["layers"] = layers
        chosen["depth"] = draft_worker.speculative_num_steps = decider.depth(layers)
        return chosen["depth"]

    def use_width(wanted, available):
        chosen["width"] = decider.width(chosen["depth"], wanted, available)
        return chosen["width"]

    draft_worker = worker_module.CastDraftWorker.__new__(worker_module.CastDraftWorker)
    vars(draft_worker).update(
        topk=topk, speculative_num_steps=steps, speculative_num_draft_tokens=12, req_to_token_pool=None,
        draft_runner=runner, hot_token_id=None, tree_mask_mode=spec_tree.TreeMaskMode.FULL_MASK, device="cpu",
        target_worker=None,
        draft_attn_backend=argparse.Namespace(attn_backends=[None] * steps, init_forward_metadata=lambda batch: None),
        cast=argparse.Namespace(decider=decider, use_depth=use_depth, use_width=use_width))
    seq_lens = torch.tensor([40, 700, 90])
    copies = []
    real_cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: copies.append(self.shape) or real_cpu(self, *a, **k))
    draft_worker.draft(argparse.Namespace(spec_info=draft_input, seq_lens_cpu=seq_lens, seq_lens=seq_lens))
    monkeypatch.setattr(torch.Tensor, "cpu", real_cpu)

    # The native engine with the same policy, capped at the depth the worker's state
    # allows (below its cap the depth rule does not depend on max_depth).
    native_shape = replace(settings.buckets[0].shape, max_depth=chosen["depth"])
    native = with_history(make_policy("cast", PolicySettings.single(steep_costs(), native_shape,
                                                                    Thresholds(0.3, 0.4, 0.6))))
    plan = native.begin(batch_size, 700)
    tree = grow_tree(plan, model, roots)
    width = decider.width(chosen["depth"], plan.verify_count(tree), tree.size - 1)
    assert chosen["width"] == width and captured["num_draft_tokens"] == width
    assert chosen["layers"] == reachable and captured["num_steps"] == chosen["depth"]  # the state holds the reach
    # one eager draft forward per layer after the first, one more if the draft stopped
    # below the predicted depth (forwards are launched early up to it, not to the reach)
    assert runner.calls == len(plan.kept) - 1 + unused_forwards(plan, predicted, chosen["depth"])
    # Device-to-host copies: the roots once (depth choice and layer 1), then one per deeper layer.
    assert len(copies) == len(plan.kept) >= 3, copies
    expected = select_verified(tree, width - 1)
    parent_list, top_scores_index, draft_tokens, draft_probs = captured["tree"]
    assert draft_probs is None and torch.equal(draft_tokens, expected.tokens[:, 1:])

    monkeypatch.setattr(spec_tree, "_is_xpu", True)
    mask, positions, *_ = build_tree_kernel_efficient(
        roots, parent_list, top_scores_index, draft_tokens, seq_lens, int(seq_lens.sum()), topk, chosen["depth"], width,
        spec_tree.TreeMaskMode.FULL_MASK)
    assert torch.equal(positions.view(batch_size, width), expected.positions(seq_lens))
    offset = 0
    for b, length in enumerate(seq_lens.tolist()):
        rows = mask[offset: offset + width * (length + width)].view(width, length + width)
        offset += rows.numel()
        assert torch.equal(rows[:, length:], expected.mask[b])


def test_use_depth_and_width_swap_in_the_runtime_state_of_that_shape():
    from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

    from sglang_cast.sglang_plugin.worker import CastWorker

    def state(depth: int, width: int) -> SpecRuntimeState:
        name = f"{depth}x{width}"
        return SpecRuntimeState(depth, width, f"draft-{name}", f"draft-graph-{name}", f"target-{name}",
                                f"verify-graph-{name}", f"extend-{name}", f"extend-graph-{name}")

    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=4, max_depth=6, num_verify_tokens=20),
                                     Thresholds(0.3, 2.0, 0.6))
    worker = CastWorker.__new__(CastWorker)
    draft_runner = argparse.Namespace(draft_attn_backend="draft-6x20", attn_backend="extend-6x20")
    target_runner = argparse.Namespace(attn_backend="target-6x20", decode_cuda_graph_runner="verify-graph-6x20")
    rebuilt = []
    vars(worker).update(
        speculative_num_steps=6, speculative_num_draft_tokens=20,
        decider=CastDecider(make_policy("cast", settings), StaticShape(6, 4, 20)),
        _draft_worker=argparse.Namespace(speculative_num_steps=6, speculative_num_draft_tokens=20,
                                         draft_runner=draft_runner,
                                         _rebuild_topk1_chain_buffers=lambda: rebuilt.append(True)),
        _target_worker=argparse.Namespace(model_runner=target_runner))
    worker.states = {shape: state(*shape) for shape in worker.decider.states}
    assert worker.decider.depths == (1, 2, 4, 6) and worker.decider.widths == (2, 4, 5, 8, 16, 20)

    plan = worker.decider.begin(1, 100)
    sure, unsure = torch.tensor([[0.5, 0.2, 0.1, 0.05]]), torch.tensor([[0.05, 0.02, 0.01, 0.01]])
    assert worker.use_depth(plan.predict_depth(sure)) == 6 and not rebuilt  # the startup state: nothing to swap
    assert plan.predict_depth(unsure) == 1  # C2 stops after layer 1
    assert worker.use_depth(1) == 1 == worker.speculative_num_steps
    assert worker._draft_worker.speculative_num_steps == 1 and rebuilt
    assert (worker.speculative_num_draft_tokens, target_runner.attn_backend) == (5, "target-1x5")  # widest at 1
    # depth 1 with topk 4 holds at most 4 nodes: widths 2, 4 and 5 (the one-layer tree whole)
    assert worker.use_width(1, 4) == 2
    assert (worker.speculative_num_draft_tokens, worker._draft_worker.speculative_num_draft_tokens) == (2, 2)
    assert (target_runner.attn_backend, target_runner.decode_cuda_graph_runner) == ("target-1x2", "verify-graph-1x2")
    assert (draft_runner.draft_attn_backend, draft_runner.attn_backend) == ("draft-1x2", "extend-1x2")
    assert worker._draft_worker.cuda_graph_runner_for_draft_extend == "extend-graph-1x2"
    assert worker.use_width(19, 4) == 5 and worker.use_width(3, 3) == 4
    assert worker.use_depth(5) == 6  # no depth-5 state: the next larger one
    assert worker.use_width(5, 30) == 8 and target_runner.attn_backend == "target-6x8"
    assert worker.use_width(30, 12) == 8  # a 12-node tree cannot fill width 16: verify its best 7 nodes
    assert worker.use_width(19, 40) == 20 and target_runner.attn_backend == "target-6x20"


def test_a_batch_size_whose_bucket_does_not_speculate_runs_the_zero_step_state():
    """Through SGLang's per-iteration hook: batch 5 falls in a ``speculate: false``
    bucket (SGLang then decodes without drafting), batch 1 drafts again."""
    from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

    from sglang_cast.sglang_plugin.worker import CastWorker

    def state(depth: int, width: int) -> SpecRuntimeState:
        name = f"{depth}x{width}"
        return SpecRuntimeState(depth, width, f"draft-{name}", f"draft-graph-{name}", f"target-{name}",
                                f"verify-graph-{name}", f"extend-{name}", f"extend-graph-{name}")

    shape = StaticShape(6, 4, 20)
    worker = CastWorker.__new__(CastWorker)
    target_runner = argparse.Namespace(attn_backend="target-6x20", decode_cuda_graph_runner="verify-graph-6x20")
    vars(worker).update(
        speculative_num_steps=6, speculative_num_draft_tokens=20, static_shape=shape,
        decider=CastDecider(make_policy("cast", no_draft_above_two()), shape),
        _draft_worker=argparse.Namespace(speculative_num_steps=6, speculative_num_draft_tokens=20,
                                         draft_runner=argparse.Namespace(), _rebuild_topk1_chain_buffers=lambda: None),
        _target_worker=argparse.Namespace(model_runner=target_runner),
        profile_sync=ProfileBroadcast(0, lambda tensor: None, lambda raw: None))  # one rank: nothing to sync
    worker.states = {s: state(*s) for s in worker.decider.states}
    assert (0, 1) in worker.states

    worker.activate_step_by_batch(1)
    assert (worker.speculative_num_steps, target_runner.attn_backend) == (6, "target-6x20")  # nothing to do
    worker.activate_step_by_batch(5)
    assert (worker.speculative_num_steps, worker.speculative_num_draft_tokens) == (0, 1)
    assert worker._draft_worker.speculative_num_steps == 0  # SGLang's worker skips draft() at 0 steps
    assert (target_runner.attn_backend, target_runner.decode_cuda_graph_runner) == ("target-0x1", "verify-graph-0x1")
    worker.activate_step_by_batch(3)  # still off: no swap
    assert worker.speculative_num_steps == 0
    worker.activate_step_by_batch(2)
    assert (worker.speculative_num_steps, target_runner.attn_backend) == (6, "target-6x20")
    plan = worker.decider.begin(2, 100)
    depth = worker.use_depth(plan.predict_depth(torch.tensor([[0.5, 0.2, 0.1, 0.05]] * 2)))  # drafting resumes
    assert depth in worker.decider.depths and worker.speculative_num_steps == depth >= 1


def test_runtime_states_are_built_on_sglangs_one_attention_workspace():
    """SGLang's builder asks the target runner for a new FlashInfer workspace per
    state; while the worker builds states, that request gets the shared one."""
    import inspect

    from sglang_cast.sglang_plugin.worker import shared_attention_workspace

    source = inspect.getsource(EAGLEWorkerV2.build_adaptive_runtime_state)
    assert "_get_attention_backend(" in source and "init_new_workspace=True" in source  # the call intercepted

    class Runner:
        def _get_attention_backend(self, init_new_workspace: bool = False):
            return "new workspace" if init_new_workspace else "SGLang's workspace"

    runner = Runner()
    with shared_attention_workspace(runner):
        assert runner._get_attention_backend(init_new_workspace=True) == "SGLang's workspace"
    assert runner._get_attention_backend(init_new_workspace=True) == "new workspace"  # restored afterwards
    with pytest.raises(RuntimeError), shared_attention_workspace(runner):
        raise RuntimeError("a failed build")
    assert runner._get_attention_backend(init_new_workspace=True) == "new workspace"


def test_the_worker_holds_the_states_memory_until_it_builds_them_and_holds_what_preflight_charges(monkeypatch):
    """Held from construction (before SGLang sizes the KV pool: scheduler.py:1128-1146)
    and released right before the first extra state is built, so the states come out
    of the KV pool; the bytes are ``memory_plan``'s for the same states."""
    import contextlib

    from transformers import LlamaConfig

    from sglang_cast.sglang_plugin import worker as worker_module
    from sglang_cast.sglang_plugin.memory_plan import LaunchSettings, ModelShape, plan_memory

    root = ROOT
    target_config = json.loads((root / "profiles/models/llama-3.1-8b/config.json").read_text())
    head_config = dict(target_config, num_hidden_layers=1)
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=4, max_depth=6, num_verify_tokens=20),
                                     Thresholds(0.3, 2.0, 0.6))
    worker = worker_module.CastWorker.__new__(worker_module.CastWorker)
    built, held_while_building = [], []
    target_runner = argparse.Namespace(
        attn_backend="target", decode_cuda_graph_runner="verify-graph",
        model_config=argparse.Namespace(hf_config=LlamaConfig(**target_config), context_len=4096))
    draft = argparse.Namespace(draft_attn_backend="draft", cuda_graph_runner=None, draft_extend_attn_backend="extend",
                               cuda_graph_runner_for_draft_extend=None, parallel_layout=None, device="cpu",
                               draft_runner=argparse.Namespace(model_config=argparse.Namespace(
                                   hf_config=LlamaConfig(**head_config), context_len=4096)))
    shape = StaticShape(6, 4, 20)
    vars(worker).update(speculative_num_steps=6, speculative_num_draft_tokens=20, _draft_worker=draft,
                        _target_worker=argparse.Namespace(model_runner=target_runner),
                        speculative_algorithm=argparse.Namespace(is_eagle3=lambda: True), static_shape=shape,
                        decider=CastDecider(make_policy("cast", settings), shape))
    monkeypatch.setattr(worker_module, "decode_graph_max_batch", lambda: 8)
    worker.states = {}
    worker.state_hold = worker_module.StateMemoryHold(worker.planned_state_bytes(), "cpu")
    plan = plan_memory(ModelShape.from_config(target_config), ModelShape.from_config(head_config),
                       worker.decider.states, (6, 20), LaunchSettings(gpu_memory_gib=80, context_length=4096,
                                                                      max_running_requests=8))
    assert worker.state_hold.nbytes == plan.extra_states > 0 and worker.state_hold.held

    def build(depth, width, cuda_graph_bs=None):
        held_while_building.append(worker.state_hold.held)
        built.append((depth, width))
        return f"state-{depth}x{width}"

    monkeypatch.setattr(EAGLEWorkerV2, "init_cuda_graphs", lambda self: None)
    monkeypatch.setattr(worker, "build_adaptive_runtime_state", build, raising=False)
    for name in ("draft_tp_context", "shared_attention_workspace"):
        monkeypatch.setattr(worker_module, name, lambda *_: contextlib.nullcontext())
    for name in ("speculative_moe_backend_context", "speculative_moe_a2a_backend_context"):
        monkeypatch.setattr(worker_module, name, contextlib.nullcontext)
    monkeypatch.setattr(worker_module, "get_exec", lambda: argparse.Namespace(
        graph=argparse.Namespace(cuda_graph_bs_decode=[1, 2, 4, 8])))
    worker.init_cuda_graphs()
    assert len(built) == len(worker.decider.states) - 1 and held_while_building and not any(held_while_building)
    assert not worker.state_hold.held


@pytest.mark.parametrize("depth, width", [(3, 2), (3, 4), (5, 3), (1, 8)])
def test_a_state_narrower_than_its_depth_verifies_through_sglangs_path_compaction(depth, width):
    """SGLang moves the accepted path to the front of each request's ``width`` slots with an
    ``accept_index`` of ``max_tree_depth`` columns; ``spec_steps + 1`` of them overflow a state
    such as (3, 2), which crashed the scheduler in the first real run on the CPU."""
    from sglang.srt.speculative.eagle_worker_common import _compact_accept_to_front

    from sglang_cast.sglang_plugin.worker import CastVerifyInput

    verify_input = object.__new__(CastVerifyInput)
    verify_input.spec_steps, verify_input.draft_token_num = depth, width
    bs = 2
    accept_index = torch.full((bs, verify_input.max_tree_depth), -1, dtype=torch.int32)  # as verify allocates it
    accept_index[:, 0] = torch.arange(bs) * width  # each request accepts its root and, where it can, node 1
    accept_index[:, 1] = torch.arange(bs) * width + 1
    x = torch.arange(bs * width, dtype=torch.float32)  # [bs * width] node-indexed
    out = _compact_accept_to_front(x, accept_index, bs, num_draft_tokens=width)
    assert out.view(bs, width)[:, :2].tolist() == [[b * width, b * width + 1] for b in range(bs)]
    assert verify_input.max_tree_depth == min(depth + 1, width)
