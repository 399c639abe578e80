"""SGLang's CUDA tree kernels' host-side checks, re-stated on CPU.

On a GPU SGLang 0.5.23 builds the verify tree and runs greedy verification with
its JIT CUDA kernels, whose C++ launchers check every argument's shape, stride,
dtype and the tree's arithmetic before launching (``tree.cuh``).  The CPU tests
run SGLang's Triton kernels instead, which read the real row strides and check
nothing, so a layout the CUDA launcher refuses would pass them.  This module
re-states each of those checks in Python (cited by line of the installed file),
routes SGLang's tree building through them, and drives the plugin's worker
through many random trees, every catalogue state and profile reloads.

Run with ``.venv-sglang`` (``TRITON_INTERPRET=1``): the Triton kernels then run
on CPU tensors, after the re-stated CUDA checks.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from support.plugin import Float32Model, PathDraftRunner, require_sglang, steep_costs, worker_iteration  # noqa: E402

require_sglang("sglang.kernels.ops.speculative.spec_tree", "sglang.srt.speculative.eagle_utils",
               "sglang.srt.speculative.adaptive_runtime_state")

import sglang  # noqa: E402
from sglang.kernels.ops.speculative import spec_tree  # noqa: E402
from sglang.srt.speculative import eagle_utils  # noqa: E402
from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState  # noqa: E402

from sglang_cast.cast import BucketSettings, PolicySettings, Thresholds, TreeShape, make_policy  # noqa: E402
from sglang_cast.sglang_plugin import worker as worker_module  # noqa: E402
from sglang_cast.sglang_plugin.decider import CastDecider  # noqa: E402
from sglang_cast.sglang_plugin.plugin_config import StaticShape  # noqa: E402
from sglang_cast.sglang_plugin.verify_layout import verify_layout  # noqa: E402

TREE_CUH = Path(sglang.__file__).parent / "kernels/jit/csrc/speculative/tree.cuh"
SAMPLING_CUH = Path(sglang.__file__).parent / "kernels/jit/csrc/speculative/sampling.cuh"


class HostCheckFailed(AssertionError):
    """What the CUDA launcher's ``CHECK_HOST`` / ``TensorMatcher`` would raise."""


def _require(ok: bool, line: str, what: str, source: str = "tree.cuh") -> None:
    if not ok:
        raise HostCheckFailed(f"{source}:{line}: {what}")


class _Matcher:
    """Python form of ``host::TensorMatcher`` (``sgl_kernel/tensor.h`` lines 574-592):
    exact rank; each size an int, a symbolic name bound on first sight, or -1 (any);
    strides checked where given (size-1 dims and -1 skipped), else the tensor must
    be contiguous; dtype; and one device shared by every matched tensor."""

    def __init__(self, source: str = "tree.cuh") -> None:
        self.sizes, self.device, self.source = {}, None, source

    def size(self, name: str) -> int:
        return self.sizes[name]

    def _check(self, ok: bool, line: str, what: str) -> None:
        _require(ok, line, what, self.source)

    def match(self, tensor: torch.Tensor, shape, dtype: torch.dtype, line: str, strides=None) -> None:
        self._check(tensor.dim() == len(shape), line, f"rank {tensor.dim()} != {len(shape)}")
        for dim, want in enumerate(shape):
            have = tensor.shape[dim]
            if isinstance(want, str):
                want = self.sizes.setdefault(want, have)
            self._check(want == -1 or have == want, line, f"size of dim {dim} is {have}, expected {want}")
        if strides is None:
            self._check(tensor.is_contiguous(), line, "tensor is not contiguous")
        else:
            for dim, want in enumerate(strides):
                if want != -1 and tensor.shape[dim] != 1:
                    self._check(tensor.stride(dim) == want, line, f"stride of dim {dim} is {tensor.stride(dim)}, "
                                                               f"expected {want}")
        self._check(tensor.dtype == dtype, line, f"dtype {tensor.dtype}, expected {dtype}")
        self.device = self.device or tensor.device
        self._check(tensor.device == self.device, line, f"device {tensor.device}, expected {self.device}")


def build_tree_host_checks(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                           retrive_next_token, retrive_next_sibling, topk, depth, draft_token_num,
                           tree_mask_mode) -> None:
    """Every host-side check of ``build_tree_kernel_efficient`` in tree.cuh (0.5.23), lines 45-89."""
    m = _Matcher()
    _require(topk > 0 and depth > 0, "45", f"topk > 0 && depth > 0 (topk {topk}, depth {depth})")
    _require(0 < draft_token_num <= 1024, "46", f"draft_token_num in (0, 1024] (got {draft_token_num})")
    _require(0 <= tree_mask_mode <= 2, "47", f"tree_mask_mode in [0, 2] (got {tree_mask_mode})")
    m.match(parent_list, ("batch_size", "parent_width"), torch.int64, "48-52",
            strides=(-1 if parent_list.shape[1] == 0 else parent_list.shape[1], 1))
    _require(depth == 1 or m.size("parent_width") == topk * (depth - 1) + 1, "53",
             f"depth == 1 || parent_width == topk * (depth - 1) + 1 (parent_width {m.size('parent_width')}, "
             f"topk {topk}, depth {depth})")
    m.match(selected_index, ("batch_size", draft_token_num - 1), torch.int64, "54-58",
            strides=(-1 if draft_token_num == 1 else draft_token_num - 1, 1))
    m.match(verified_seq_len, ("batch_size",), torch.int64, "59")
    for buffer in (retrive_index, retrive_next_token, retrive_next_sibling):
        m.match(buffer, ("batch_size", draft_token_num), torch.int64, "60-65")
    bs = m.size("batch_size")
    m.match(positions, (bs * draft_token_num,), torch.int64, "67")
    min_mask_bytes = 0
    if tree_mask_mode == spec_tree.TreeMaskMode.QLEN_ONLY_BITPACKING:
        _require(draft_token_num <= 32, "78", f"draft_token_num <= 32 for bit-packing (got {draft_token_num})")
        per_item = 4 if draft_token_num > 16 else (2 if draft_token_num > 8 else 1)
        min_mask_bytes = bs * draft_token_num * per_item
    elif tree_mask_mode == spec_tree.TreeMaskMode.QLEN_ONLY:
        min_mask_bytes = bs * draft_token_num * draft_token_num
    m.match(tree_mask, (-1,), tree_mask.dtype, "86", strides=(-1,))
    elem_bytes = tree_mask.element_size()
    _require(elem_bytes > 0, "88", "mask element of whole bytes")
    _require(tree_mask.numel() * elem_bytes >= min_mask_bytes, "89",
             f"mask of {tree_mask.numel() * elem_bytes} bytes, at least {min_mask_bytes} needed")


def verify_greedy_host_checks(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                              retrive_next_sibling, target_predict) -> None:
    """Every host-side check of ``verify_tree_greedy`` in tree.cuh (0.5.23), lines 137-152."""
    m = _Matcher()
    for tensor in (candidates, retrive_index, retrive_next_token, retrive_next_sibling, target_predict):
        m.match(tensor, ("batch_size", "draft_tokens"), torch.int64, "139-146")
    m.match(accept_index, ("batch_size", "spec_tokens"), torch.int32, "147")
    m.match(accept_token_num, ("batch_size",), torch.int32, "148")
    m.match(predicts, (m.size("batch_size") * m.size("draft_tokens"),), torch.int32, "149-152")
    _require(m.size("draft_tokens") > 0 and m.size("spec_tokens") > 0, "153", "draft_tokens > 0 && spec_tokens > 0")


def sampling_verify_host_checks(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                retrive_next_token, retrive_next_sibling, uniform_samples,
                                uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single,
                                threshold_acc, vec_size) -> None:
    """Every host-side check of ``tree_speculative_sampling_target_only`` (the
    non-greedy verify) in sampling.cuh (0.5.23), lines 50-77, except line 56's
    "on a CUDA device" (here every tensor shares the CPU).  ``vec_size`` is the
    template argument ``sampling.py`` picks (line 49: ``gcd(4, vocab)``)."""
    m = _Matcher("sampling.cuh")
    _require(vec_size in (1, 2, 4), "50", f"VecSize in {{1, 2, 4}} (got {vec_size})", "sampling.cuh")
    for tensor in (candidates, retrive_index, retrive_next_token, retrive_next_sibling):
        m.match(tensor, ("batch_size", "draft_tokens"), torch.int64, "54-60")
    m.match(accept_index, ("batch_size", "spec_tokens"), torch.int32, "61")
    m.match(accept_token_num, ("batch_size",), torch.int32, "62")
    m.match(predicts, (m.size("batch_size") * m.size("draft_tokens"),), torch.int32, "63-66")
    m.match(uniform_samples, ("batch_size", "draft_tokens"), torch.float32, "67")
    m.match(uniform_samples_for_final_sampling, ("batch_size",), torch.float32, "68")
    for tensor in (target_probs, draft_probs):
        m.match(tensor, ("batch_size", "draft_tokens", "vocab_size"), torch.float32, "69-73")
    vocab = m.size("vocab_size")
    _require(m.size("draft_tokens") > 0 and m.size("spec_tokens") > 0 and vocab > 0, "74",
             "draft_tokens > 0 && spec_tokens > 0 && vocab_size > 0", "sampling.cuh")
    _require(math.gcd(4, vocab) == vec_size, "75", f"gcd(4, vocab_size {vocab}) == VecSize {vec_size}", "sampling.cuh")
    _require(0 <= threshold_single <= 1, "76", f"threshold_single in [0, 1] (got {threshold_single})", "sampling.cuh")
    _require(0 <= threshold_acc <= 1, "77", f"threshold_acc in [0, 1] (got {threshold_acc})", "sampling.cuh")


def checked_target_only_sampling(*, predicts, accept_index, accept_token_num, candidates, retrive_index,
                                 retrive_next_token, retrive_next_sibling, uniform_samples,
                                 uniform_samples_for_final_sampling, target_probs, draft_probs,
                                 threshold_single=1.0, threshold_acc=1.0, deterministic=True) -> None:
    """SGLang's CUDA ``tree_speculative_sampling_target_only`` (``sampling.py``) as far as
    its launcher goes: the host checks, with ``sampling.py``'s VecSize.  The kernel's
    sampling is not re-stated: the stand-in accepts no draft and samples the bonus
    token at the root with the final coin, a valid outcome of the real kernel."""
    sampling_verify_host_checks(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                retrive_next_token, retrive_next_sibling, uniform_samples,
                                uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single,
                                threshold_acc, math.gcd(4, target_probs.shape[-1]))
    root_cdf = target_probs[:, 0].cumsum(-1)  # [B, vocab]
    coin = (uniform_samples_for_final_sampling * root_cdf[:, -1]).unsqueeze(1)  # [B, 1]
    bonus = torch.searchsorted(root_cdf, coin).squeeze(1).clamp(max=root_cdf.shape[-1] - 1)
    accept_index[:, 0] = retrive_index[:, 0].int()
    accept_token_num.zero_()
    predicts[retrive_index[:, 0]] = bonus.int()


def checked_build_tree(*args) -> None:
    """SGLang's CUDA ``build_tree_kernel_efficient_func``: the launcher's checks, then
    the same tree built by SGLang's Triton kernel (the XPU path) on CPU."""
    build_tree_host_checks(*args)
    spec_tree.sgl_build_tree_kernel_triton(*args)


@pytest.fixture
def cuda_tree_path(monkeypatch):
    monkeypatch.setattr(eagle_utils, "build_tree_kernel_efficient_func", checked_build_tree)


def test_the_restated_checks_are_the_installed_sources():
    """The line numbers cited above point at the checks they re-state."""
    lines = TREE_CUH.read_text().splitlines()
    assert "topk > 0 && depth > 0" in lines[44]
    assert "parent_width.unwrap() == topk * (depth - 1) + 1" in lines[52]
    assert "tree_mask.numel() * mask_elem_bytes >= min_mask_bytes" in lines[88]
    assert "draft_tokens.unwrap() > 0 && spec_tokens.unwrap() > 0" in lines[152]
    lines = SAMPLING_CUH.read_text().splitlines()
    assert "static_assert(VecSize == 1 || VecSize == 2 || VecSize == 4)" in lines[49]
    assert ".verify(retrive_next_sibling)" in lines[59]
    assert "verify(accept_index)" in lines[60]
    assert "verify(uniform_samples_for_final_sampling)" in lines[67]
    assert ".verify(draft_probs)" in lines[72]
    assert "vocab_size.unwrap() > 0" in lines[73]
    assert "std::gcd(int64_t{4}, vocab_size.unwrap()) == VecSize" in lines[74]
    assert "threshold_acc >= 0 && threshold_acc <= 1" in lines[76]


# ------------------------------------------------ every catalogue state
def catalogue_cases():
    """(topk, steps, num_draft_tokens): the tests' own shapes and a few others."""
    return [(5, 6, 20), (4, 6, 20), (3, 5, 16), (2, 4, 9), (4, 3, 13)]


@pytest.mark.parametrize("topk, steps, num_draft_tokens", catalogue_cases())
def test_every_catalogue_state_passes_the_cuda_checks_at_every_drafted_depth(topk, steps, num_draft_tokens,
                                                                            cuda_tree_path):
    """A state of depth ``d`` may verify a draft that stopped at any depth ``<= d``."""
    shape = StaticShape(steps, topk, num_draft_tokens)
    settings = PolicySettings.single(steep_costs(), TreeShape(top_k=topk, max_depth=steps,
                                                              num_verify_tokens=num_draft_tokens))
    decider = CastDecider(make_policy("eagle2", settings), shape)
    model = Float32Model(vocab=16, seed=topk * steps)
    roots = torch.tensor([3, 11])
    seq_lens = torch.tensor([5, 9])
    checked = 0
    for depth, width in decider.states:
        for drafted_depth in range(1, depth + 1):
            # eagle2 keeps top_k nodes per layer, so the tree has topk·drafted_depth nodes
            if width - 1 > topk * drafted_depth:
                continue
            _, drafted, _, _, _ = worker_iteration(decider, model, roots, 50, topk, drafted_depth)
            layout = verify_layout(drafted, width, depth)
            mask, positions, *_ = eagle_utils.build_tree_kernel_efficient(
                roots, layout.parent_list, layout.top_scores_index, layout.draft_tokens, seq_lens,
                int(seq_lens.sum()), topk, depth, width, spec_tree.TreeMaskMode.FULL_MASK)
            assert torch.equal(positions.view(2, width), layout.verified.positions(seq_lens))
            checked += 1
    assert checked >= len(decider.states)


def test_the_check_refuses_a_parent_list_sized_by_the_drafted_depth(cuda_tree_path):
    """Guard: the re-stated line-53 check bites on the layout the worker used to send."""
    decider = CastDecider(make_policy("eagle2", PolicySettings.single(
        steep_costs(), TreeShape(top_k=4, max_depth=4, num_verify_tokens=9))), StaticShape(4, 4, 9))
    roots, seq_lens = torch.tensor([1, 2]), torch.tensor([4, 4])
    _, drafted, _, _, _ = worker_iteration(decider, Float32Model(vocab=16), roots, 50, 4, 2)
    layout = verify_layout(drafted, 9, 4)
    unpadded = layout.parent_list[:, :1 + 4 * (drafted.depth - 1)].contiguous()  # sized by the 2 drafted layers
    assert unpadded.shape[1] < layout.parent_list.shape[1]
    with pytest.raises(HostCheckFailed, match="tree.cuh:53"):
        eagle_utils.build_tree_kernel_efficient(roots, unpadded, layout.top_scores_index, layout.draft_tokens,
                                                seq_lens, 8, 4, 4, 9, spec_tree.TreeMaskMode.FULL_MASK)


# ------------------------------------- the worker's path, random trees
def random_settings(rng: random.Random, shape: StaticShape) -> PolicySettings:
    """Two buckets that fit ``shape``, with random tree shapes and thresholds."""
    def bucket(max_batch: int) -> BucketSettings:
        top_k = rng.randint(1, shape.topk)
        depth = rng.randint(1, shape.num_steps)
        verify = rng.randint(2, min(shape.num_draft_tokens, top_k * depth + 1))
        thresholds = Thresholds(rng.choice([0.05, 0.3, 1.0, 2.0]), rng.choice([0.3, 1.0, 3.0, 8.0]),
                                rng.choice([0.5, 0.8, 1.5]))
        return BucketSettings(max_batch, TreeShape(top_k=top_k, max_depth=depth, num_verify_tokens=verify),
                              thresholds, fifo_len=4)
    return PolicySettings(buckets=(bucket(2), bucket(1 << 30)), costs=steep_costs())


def fake_state(depth: int, width: int) -> SpecRuntimeState:
    """A runtime state whose attention backends are what the draft and tree paths read."""
    draft_backend = argparse.Namespace(attn_backends=[None] * depth, init_forward_metadata=lambda batch: None)
    target_backend = argparse.Namespace(verify_mask=None, max_context_len=4096, name=f"target-{depth}x{width}")
    return SpecRuntimeState(depth, width, draft_backend, None, target_backend, None, None, None)


def build_worker(settings: PolicySettings, shape: StaticShape, runner: PathDraftRunner):
    """A ``CastWorker`` and its ``CastDraftWorker`` with every catalogue state, as
    ``CastWorker.__init__``/``init_cuda_graphs`` leave them, minus the models."""
    cast = worker_module.CastWorker.__new__(worker_module.CastWorker)
    draft = worker_module.CastDraftWorker.__new__(worker_module.CastDraftWorker)
    target_runner = argparse.Namespace()
    target_worker = argparse.Namespace(model_runner=target_runner)
    decider = CastDecider(make_policy("cast", settings), shape)
    vars(cast).update(speculative_num_steps=shape.num_steps, speculative_num_draft_tokens=shape.num_draft_tokens,
                      decider=decider, _draft_worker=draft, _target_worker=target_worker, static_shape=shape)
    cast.states = {s: fake_state(*s) for s in decider.states}
    startup = cast.states[shape.num_steps, shape.num_draft_tokens]
    target_runner.attn_backend = startup.target_attn_backend
    vars(draft).update(
        topk=shape.topk, speculative_num_steps=shape.num_steps, speculative_num_draft_tokens=shape.num_draft_tokens,
        req_to_token_pool=None, draft_runner=runner, hot_token_id=None,
        tree_mask_mode=spec_tree.TreeMaskMode.FULL_MASK, device="cpu", target_worker=target_worker,
        draft_attn_backend=startup.draft_attn_backend, cast=cast, _rebuild_topk1_chain_buffers=lambda: None)
    return cast, draft


def draft_batch(model: Float32Model, runner: PathDraftRunner, roots: torch.Tensor, topk: int,
                seq_lens: torch.Tensor) -> argparse.Namespace:
    """SGLang's ``ScheduleBatch`` as ``draft()`` reads it, after a draft-extend."""
    children = [torch.sort(model.draft_probs((int(r),)).float(), descending=True) for r in roots]
    draft_input = argparse.Namespace(
        topk_p=torch.stack([c.values[:topk] for c in children]),
        topk_index=torch.stack([c.indices[:topk] for c in children]),
        hidden_states=runner.encode([(int(r),) for r in roots]), bonus_tokens=roots.long())
    return argparse.Namespace(spec_info=draft_input, seq_lens_cpu=seq_lens, seq_lens=seq_lens,
                              seq_lens_sum=int(seq_lens.sum()), forward_mode=argparse.Namespace(is_idle=lambda: False))


def fake_prepare_for_draft(draft_input, req_to_token_pool, batch, cuda_graph_runner, draft_runner, topk, num_steps):
    """SGLang's ``prepare_for_draft`` sizes the draft's KV slots by the state's depth."""
    size = batch.seq_lens.numel()
    forward_batch = argparse.Namespace(
        batch_size=size, out_cache_loc=torch.arange(size * topk * num_steps), input_ids=None,
        positions=torch.zeros(size * topk, dtype=torch.long), sampling_info=None, spec_info=draft_input,
        forward_mode=argparse.Namespace(is_idle=lambda: False), mark_forward_metadata_ready=lambda: None,
        moe_num_token_non_padded=None)
    return forward_batch, False, None


def checked_greedy_verify(verify_input, batch_size: int, rng: random.Random) -> torch.Tensor:
    """SGLang's greedy verify on ``verify_input`` as its CUDA launcher sees it
    (``accept_index`` is ``[B, spec_steps + 1]`` as ``EagleVerifyInput.verify`` allocates it)."""
    width = verify_input.draft_token_num
    candidates = verify_input.draft_token.view(batch_size, width)
    target_predict = torch.tensor([[rng.choice([int(t), 0]) for t in row] for row in candidates.roll(-1, 1)])
    predicts = torch.zeros(batch_size * width, dtype=torch.int32)
    accept_index = torch.full((batch_size, verify_input.spec_steps + 1), -1, dtype=torch.int32)
    accepted = torch.empty(batch_size, dtype=torch.int32)
    args = (predicts, accept_index, accepted, candidates, verify_input.retrieve_index,
            verify_input.retrieve_next_token, verify_input.retrieve_next_sibling, target_predict)
    verify_greedy_host_checks(*args)
    spec_tree.verify_tree_greedy_triton(*args)
    return accepted


def run_worker(seed: int) -> int:
    """30 iterations of the worker's ``draft()`` through SGLang's own
    ``build_eagle_verify_input`` and greedy verify, with a reload to new random
    buckets every 6 iterations; returns how many drafts stopped above their
    state's depth (the case SGLang's CUDA launcher used to refuse)."""
    rng = random.Random(seed)
    topk = rng.randint(2, 5)
    steps = rng.randint(2, 6)
    shape = StaticShape(steps, topk, rng.randint(2, topk * steps + 1))
    model = Float32Model(vocab=16, seed=seed)
    runner = PathDraftRunner(model, steps + 2)
    cast, draft = build_worker(random_settings(rng, shape), shape, runner)
    shallower = 0
    for iteration in range(30):
        if iteration % 6 == 5:
            cast.decider.policy.reconfigure(random_settings(rng, shape))
        size = rng.choice([1, 2, 3, 5])
        roots = torch.tensor([rng.randrange(16) for _ in range(size)])
        seq_lens = torch.tensor([rng.randrange(1, 3000) for _ in range(size)])
        calls = runner.calls
        verify_input = draft.draft(draft_batch(model, runner, roots, topk, seq_lens))
        drafted_depth = runner.calls - calls + 1
        assert (verify_input.spec_steps, verify_input.draft_token_num) == (
            cast.speculative_num_steps, cast.speculative_num_draft_tokens)
        shallower += drafted_depth < verify_input.spec_steps
        accepted = checked_greedy_verify(verify_input, size, rng)
        assert int(accepted.max()) <= drafted_depth, f"seed {seed}, iteration {iteration}"
    return shallower


def test_the_workers_verify_inputs_pass_every_cuda_check_over_random_trees_and_reloads(cuda_tree_path, monkeypatch):
    monkeypatch.setattr(worker_module, "prepare_for_draft", fake_prepare_for_draft)
    shallower = sum(run_worker(seed) for seed in range(12))
    assert shallower >= 20  # guard: many drafts stopped above their state's depth


# ------------------------------------------- the non-greedy verify (sampling.cuh)
def sampling_spec(threshold_acc: float = 1.0) -> argparse.Namespace:
    """The server args ``eagle_sample`` reads, at SGLang's defaults (``arg_groups/fields/spec.py``
    lines 109-124: thresholds 1.0, no rejection sampling, no block verification)."""
    return argparse.Namespace(speculative_use_rejection_sampling=False, speculative_use_block_verification=False,
                              speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=threshold_acc)


@pytest.fixture
def cuda_sampling_path(monkeypatch):
    """``eagle_sample`` as it runs on CUDA for a batch with a non-greedy request:
    ``_verify_uses_greedy`` is true on CPU for every batch (eagle_utils.py:485-500), so it
    answers as on CUDA; the sampling kernel is the checked stand-in; one TP rank."""
    from sglang.srt import runtime_context
    from sglang.srt.layers import dp_attention

    monkeypatch.setattr(eagle_utils, "_verify_uses_greedy", lambda *, is_all_greedy, **_: is_all_greedy)
    monkeypatch.setattr(eagle_utils, "tree_speculative_sampling_target_only", checked_target_only_sampling)
    monkeypatch.setattr(eagle_utils, "get_spec", sampling_spec)
    monkeypatch.setattr(runtime_context, "get_parallel",
                        lambda: argparse.Namespace(tp_group=argparse.Namespace(world_size=1)))
    monkeypatch.setattr(dp_attention, "is_dp_attention_enabled", lambda: False)


def sampled_verify(verify_input, seq_lens: torch.Tensor, vocab: int, rng: random.Random):
    """SGLang's own ``eagle_sample`` on ``verify_input`` for a batch of temperature-sampled
    requests (top-k/top-p renormalisation has no CPU kernel in 0.5.23 and keeps every shape)."""
    size = seq_lens.numel()
    sampling_info = argparse.Namespace(
        is_all_greedy=False, acc_additive_penalties=None, acc_scaling_penalties=None, logit_bias=None,
        has_watermark_candidates=False, temperatures=torch.tensor([[rng.choice([0.3, 0.7, 1.0])] for _ in range(size)]),
        need_top_k_sampling=False, need_top_p_sampling=False, need_min_p_sampling=False, sampling_seed=None)
    batch = argparse.Namespace(device="cpu", forward_mode=argparse.Namespace(is_idle=lambda: False),
                               seq_lens=seq_lens, sampling_info=sampling_info, return_logprob=False)
    logits = argparse.Namespace(next_token_logits=torch.randn(size * verify_input.draft_token_num, vocab))
    return eagle_utils.eagle_sample(verify_input, batch, logits)


def worker_verify_inputs(seed: int, iterations: int = 20):
    """The worker's ``draft()`` outputs through SGLang's tree building, over random
    trees, batch sizes and reloads (as :func:`run_worker`), with each batch's seq_lens."""
    rng = random.Random(seed)
    topk, steps = rng.randint(2, 5), rng.randint(2, 6)
    shape = StaticShape(steps, topk, rng.randint(2, topk * steps + 1))
    model = Float32Model(vocab=16, seed=seed)
    runner = PathDraftRunner(model, steps + 2)
    cast, draft = build_worker(random_settings(rng, shape), shape, runner)
    for iteration in range(iterations):
        if iteration % 6 == 5:
            cast.decider.policy.reconfigure(random_settings(rng, shape))
        size = rng.choice([1, 2, 3, 5])
        roots = torch.tensor([rng.randrange(16) for _ in range(size)])
        seq_lens = torch.tensor([rng.randrange(1, 3000) for _ in range(size)])
        yield draft.draft(draft_batch(model, runner, roots, topk, seq_lens)), seq_lens, rng


@pytest.mark.parametrize("vocab", [16, 30, 31])  # VecSize 4, 2 and 1
def test_the_workers_verify_inputs_pass_the_non_greedy_kernels_checks(vocab, cuda_tree_path, cuda_sampling_path,
                                                                     monkeypatch):
    monkeypatch.setattr(worker_module, "prepare_for_draft", fake_prepare_for_draft)
    checked = 0
    for seed in range(6):
        for verify_input, seq_lens, rng in worker_verify_inputs(seed):
            predict, accept_lens, accept_index = sampled_verify(verify_input, seq_lens, vocab, rng)
            assert accept_index.shape == (seq_lens.numel(), verify_input.max_tree_depth)
            assert torch.equal(accept_lens, torch.ones(seq_lens.numel(), dtype=torch.int32))
            assert int(predict.max()) < vocab
            checked += 1
    assert checked == 6 * 20


def test_the_non_greedy_check_refuses_a_retrieve_buffer_of_the_wrong_dtype(cuda_tree_path, cuda_sampling_path,
                                                                           monkeypatch):
    """Guard: a planted int32 ``retrieve_next_sibling`` (the greedy Triton path would take it)."""
    monkeypatch.setattr(worker_module, "prepare_for_draft", fake_prepare_for_draft)
    verify_input, seq_lens, rng = next(worker_verify_inputs(0))
    verify_input.retrieve_next_sibling = verify_input.retrieve_next_sibling.int()
    with pytest.raises(HostCheckFailed, match=r"sampling.cuh:54-60: dtype torch.int32, expected torch.int64"):
        sampled_verify(verify_input, seq_lens, 16, rng)


def test_the_non_greedy_check_refuses_a_threshold_outside_zero_one(cuda_tree_path, cuda_sampling_path, monkeypatch):
    """Guard: ``--speculative-accept-threshold-acc 1.5`` reaches line 77."""
    monkeypatch.setattr(worker_module, "prepare_for_draft", fake_prepare_for_draft)
    monkeypatch.setattr(eagle_utils, "get_spec", lambda: sampling_spec(threshold_acc=1.5))
    verify_input, seq_lens, rng = next(worker_verify_inputs(1))
    with pytest.raises(HostCheckFailed, match=r"sampling.cuh:77: threshold_acc in \[0, 1\]"):
        sampled_verify(verify_input, seq_lens, 16, rng)
