"""``profile --backend sglang`` against real SGLang 0.5.23 on CPU: the verify
inputs its timer hands SGLang's TARGET_VERIFY forward are built by SGLang's own
``build_eagle_verify_input`` from the plugin's own draft layout, and equal the
tree the native engine verifies; its server arguments parse with SGLang's parser.
The forwards themselves need a CUDA GPU and have not run."""

from __future__ import annotations

import argparse
import functools
import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from support.plugin import require_sglang  # noqa: E402

require_sglang("sglang.kernels.ops.speculative.spec_tree", "sglang.srt.server_args",
               "sglang.srt.speculative.eagle_worker_v2")

from sglang.kernels.ops.speculative import spec_tree  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2  # noqa: E402

from sglang_cast.sglang_plugin.profile_forwards import (RankCommand, RankFollowers, RankLost,  # noqa: E402
                                                         SGLangForwards, SGLangProfileLaunch, SGLangRoleTimer,
                                                         follow_commands, tree_depth, verify_tree)


def forwards_on_cpu(topk: int) -> SGLangForwards:
    """``SGLangForwards`` with its SGLang workers replaced by the few fields
    ``verify_input`` reads (the real ones need a CUDA GPU); SGLang's own
    ``_build_trivial_verify_input`` runs on a stand-in EAGLE worker."""
    forwards = SGLangForwards.__new__(SGLangForwards)
    runner = argparse.Namespace(attn_backend=argparse.Namespace(verify_mask=None, max_context_len=4096),
                                model_config=argparse.Namespace(vocab_size=1000))
    forwards.target = argparse.Namespace(model_runner=runner)
    forwards.launch = argparse.Namespace(topk=topk)
    eagle = argparse.Namespace(topk=topk, device="cpu", _target_worker=forwards.target,
                               _draft_worker=argparse.Namespace(tree_mask_mode=spec_tree.TreeMaskMode.FULL_MASK))
    eagle._build_trivial_verify_input = functools.partial(EAGLEWorkerV2._build_trivial_verify_input, eagle)
    forwards.eagle = eagle
    return forwards


def prefilled_batch(seq_lens: torch.Tensor, bonus_tokens: torch.Tensor):
    """The ScheduleBatch fields a verify input is built from, after ``prefill``."""
    return argparse.Namespace(forward_mode=argparse.Namespace(is_idle=lambda: False), seq_lens=seq_lens,
                              seq_lens_sum=int(seq_lens.sum()), batch_size=lambda: seq_lens.numel(),
                              spec_info=argparse.Namespace(bonus_tokens=bonus_tokens))


@pytest.mark.parametrize("batch_size, n, topk", [(1, 2, 4), (2, 5, 4), (3, 8, 4), (2, 16, 8), (1, 12, 1)])
def test_the_timed_verify_carries_the_plugins_tree_mask_and_positions(batch_size, n, topk, monkeypatch):
    """``SGLangForwards.verify_input`` → SGLang's ``build_eagle_verify_input``: the
    tree the native engine would verify, in SGLang's verify input."""
    # SGLang's Triton tree kernel (its XPU path), interpreted on CPU tensors.
    monkeypatch.setattr(spec_tree, "_is_xpu", True)
    seq_lens = torch.tensor([7, 30, 12][:batch_size])
    layout, roots, depth = verify_tree(batch_size, n, topk, vocab=1000)
    verify = forwards_on_cpu(topk).verify_input(prefilled_batch(seq_lens, roots), n)
    ours = layout.verified
    assert depth == tree_depth(n, topk) and ours.num_tokens == n
    assert (verify.draft_token_num, verify.spec_steps, verify.topk) == (n, depth, topk)
    assert torch.equal(verify.draft_token.view(batch_size, n), ours.tokens)
    assert torch.equal(verify.positions.view(batch_size, n), ours.positions(seq_lens))
    offset = 0
    for b, length in enumerate(seq_lens.tolist()):
        rows = verify.custom_mask[offset: offset + n * (length + n)].view(n, length + n)
        offset += rows.numel()
        assert rows[:, :length].all()  # every tree token sees the whole cached context
        assert torch.equal(rows[:, length:], ours.mask[b])
    assert offset == verify.custom_mask.numel()


def test_one_token_is_sglangs_trivial_verify_a_plain_decode():
    seq_lens, bonus = torch.tensor([5, 9]), torch.tensor([11, 12], dtype=torch.int32)
    verify = forwards_on_cpu(4).verify_input(prefilled_batch(seq_lens, bonus), 1)
    assert (verify.draft_token_num, verify.spec_steps) == (1, 0)
    assert torch.equal(verify.draft_token, bonus) and torch.equal(verify.positions, seq_lens)
    assert verify.custom_mask.all() and verify.custom_mask.numel() == int(seq_lens.sum()) + 2


def test_the_timed_tree_is_the_fullest_a_state_of_its_depth_holds():
    """n - 1 nodes over the fewest layers: a real tree's mask, never a chain
    padded deeper than the widths the worker builds allow."""
    for n, topk in ((2, 4), (9, 4), (10, 4), (64, 8)):
        layout, _, depth = verify_tree(2, n, topk, vocab=50)
        assert (n - 1) <= topk * depth and (depth == 1 or n - 1 > topk * (depth - 1))
        assert int(layout.verified.depths.max()) <= depth
        assert layout.parent_list.shape == (2, 1 + topk * (depth - 1))


def head_dir(tmp_path, architecture: str) -> str:
    """A draft head directory whose config.json names ``architecture``."""
    head = tmp_path / architecture
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    return str(head)


def test_the_profilers_server_arguments_parse_with_sglangs_own_parser(tmp_path):
    head = head_dir(tmp_path, "LlamaForCausalLMEagle3")
    launch = SGLangProfileLaunch("meta-llama/Llama-3.1-8B-Instruct", head, "bfloat16", context_length=2112,
                                 max_batch_size=32, topk=8, max_n=64, mem_fraction_static=0.8)
    args = prepare_server_args(launch.argv())
    assert (args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
            args.speculative_num_draft_tokens) == ("EAGLE3", 8, 8, 64)
    assert (args.attention_backend, args.dtype, args.context_length, args.max_running_requests,
            args.mem_fraction_static) == ("flashinfer", "bfloat16", 2112, 32, 0.8)
    assert (args.cuda_graph_backend_decode, args.cuda_graph_backend_prefill) == ("disabled", "disabled")
    assert args.tp_size == 1


def test_the_profilers_tp_size_reaches_sglangs_parser(tmp_path):
    launch = SGLangProfileLaunch("meta-llama/Llama-3.1-70B-Instruct", head_dir(tmp_path, "LlamaForCausalLMEagle"),
                                 "bfloat16", context_length=4160,
                                 max_batch_size=16, topk=8, max_n=64, tp_size=4)
    assert prepare_server_args(launch.argv()).tp_size == 4


class RecordingForwards:
    """Stands in for one rank's ``SGLangForwards``: every forward it builds and runs is logged."""

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def forward(self, role: str, batch_size: int, context_len: int, n: int):
        self.log.append(("build", role, batch_size, context_len, n))
        return lambda: self.log.append(("run", role, batch_size, context_len, n))


class QueueFollowers:
    """``RankFollowers`` with one in-process queue instead of spawned ranks."""

    def __init__(self) -> None:
        import queue

        self.queue = queue.SimpleQueue()

    def run(self, command: RankCommand) -> None:
        self.queue.put(command)


def test_every_other_rank_runs_rank_0s_forwards_in_its_order_and_number():
    """The collectives inside a sharded forward meet only if every rank runs the same
    forwards (the same prefills included) the same number of times, in order."""
    rank0, follower, followers = RecordingForwards(), RecordingForwards(), QueueFollowers()
    timers = {role: SGLangRoleTimer(rank0, role, followers, device=torch.device("cpu")) for role in ("target", "draft")}
    for role, batch, context, n, warmup, repeats in (("target", 1, 32, 1, 0, 1), ("target", 2, 64, 8, 1, 3),
                                                     ("draft", 2, 64, 4, 2, 2), ("target", 1, 32, 2, 0, 5)):
        timing = timers[role].time(batch, context, n, warmup, repeats)
        assert timing.repeats == repeats
    followers.queue.put(None)  # what RankFollowers.close sends
    assert follow_commands(follower, followers.queue.get) == 1 + 4 + 4 + 5
    assert follower.log == rank0.log


def test_rank_0_stops_before_a_forward_a_dead_rank_would_never_join():
    import argparse
    import queue

    alive = argparse.Namespace(name="cast-profile-tp1", is_alive=lambda: True, exitcode=None)
    dead = argparse.Namespace(name="cast-profile-tp2", is_alive=lambda: False, exitcode=1)
    queues = [queue.SimpleQueue(), queue.SimpleQueue()]
    followers = RankFollowers(queues, [alive, dead])
    with pytest.raises(RankLost, match=r"tensor-parallel rank processes cast-profile-tp2 \(exit code 1\) ended"):
        followers.run(RankCommand("target", 1, 32, 1, 3))
    assert all(q.empty() for q in queues)  # no rank was told to start a forward the dead one would miss
