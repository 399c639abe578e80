"""``cast-autotune profile --backend sglang``: time SGLang's own forwards.

An SGLang deployment decides on SGLang's cost curve, so the profile times what
SGLang runs in an iteration, through its own model runner, on the grid the
native profiler uses (``autotune.profiler.profile_grid``):

* target, ``f_T(B, c, n)``: SGLang's TARGET_VERIFY forward of ``B`` sequences of
  ``c`` cached tokens, ``n`` tree tokens each (root included), with the tree
  mask the CAST worker's verify builds: the tree comes from the plugin's own
  ``draft_masked_tree`` and ``verify_layout`` (an EAGLE-2 plan that keeps every
  candidate) and goes through SGLang's ``build_eagle_verify_input``, as in
  ``CastDraftWorker.draft``.  ``n = 1`` is SGLang's one-node verify
  (``_build_trivial_verify_input``, its zero-step state);
* draft, ``f_D(B, c, n)``: the draft model's DRAFT_EXTEND_V2 forward of ``n``
  tokens per sequence over ``c`` cached tokens, built by SGLang's
  ``prepare_for_draft_extend`` as after every verify.

The engine is built the way SGLang's scheduler builds it (target ``TpModelWorker``,
the EAGLE v2 worker with the draft, shared KV pools, attention backends), with
FlashInfer attention (``intel_amx`` on SGLang's CPU engine) and CUDA graphs off, so
every ``n`` runs the same eager path.  With ``--tp-size N``
(``SGLangProfileLaunch.tp_size``) every rank builds its shard on its own GPU, as
SGLang's one-batch benchmark spawns them (``benchmark/one_batch.py:1058-1085``): rank
0 in this process, ranks 1..N-1 in spawned processes that replay rank 0's forwards in
its order (:class:`RankFollowers`), so the collectives inside every forward meet and
rank 0's clock times the sharded forward, exchanges included.  The clock is the
native timer's (``engine.timing.time_calls``: a CUDA event pair around each forward);
the timed region includes SGLang's per-forward preparation (cache locations, the
forward batch, attention planning), which every eager iteration pays.  Nothing is
committed: sequence lengths stay at ``c``.

Every SGLang call below is listed in ``contract.CONTRACT`` and cites its
definition in SGLang 0.5.23.  All of it runs on SGLang's CPU engine
(``SGLangProfileLaunch.on_cpu``: ``cast-autotune profile --backend sglang`` without
a GPU); on CUDA, and at any ``--tp-size`` above 1, it has never run (no GPU here);
the tree construction, the server arguments and the followers' replay of rank 0's
calls are tested on CPU (tests/plugin/test_sglang_plugin_profile.py).
"""

from __future__ import annotations

import math
import multiprocessing
from array import array
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from ..cast import CostModel, PolicySettings, TreeShape, make_policy
from ..engine.timing import Timing, time_calls
from .cpu_runtime import cpu_server_flags, intel_amx_kept
from .drafting import draft_masked_tree, roots_to_host
from .plugin_config import draft_is_eagle3
from .verify_layout import VerifyLayout, verify_layout


# --------------------------------------------------------------- the tree
def tree_depth(n: int, topk: int) -> int:
    """The fewest draft layers that hold ``n - 1`` nodes at ``topk`` per layer: a
    layout every measured width fits (a real tree may pack more per layer,
    ``runtime_shapes.max_nodes``; the verify's cost does not depend on that)."""
    return max(1, math.ceil((n - 1) / topk))


def _ranked_children(batch_rows: int, topk: int, vocab: int):
    """A draft step with a fixed, strictly ranked distribution: row ``r``'s
    children are tokens ``(r·topk + j) mod vocab`` with probabilities
    ``2^-(j+1)``.  Costs do not depend on which tokens are drafted; the ranking
    only has to be strict so every layer keeps distinct best nodes."""
    probs = torch.tensor([2.0 ** -(j + 1) for j in range(topk)]).expand(batch_rows, topk)
    tokens = (torch.arange(batch_rows).view(-1, 1) * topk + torch.arange(topk)) % vocab
    return probs, tokens


def verify_tree(batch_size: int, n: int, topk: int, vocab: int) -> tuple[VerifyLayout, torch.Tensor, int]:
    """The CAST worker's verify layout for a tree of ``n`` tokens per sequence
    (root included), built by the plugin's own drafting and layout code.

    Returns the layout, the roots ``[B]`` and the runtime-state depth it is laid
    out for.  ``n >= 2``: one token is SGLang's trivial verify, no tree."""
    depth = tree_depth(n, topk)
    # EAGLE-2 keeps every candidate of every layer, so the tree is full: topk·depth nodes.
    shape = TreeShape(top_k=topk, max_depth=depth, num_verify_tokens=n)
    plan = make_policy("eagle2", PolicySettings.single(CostModel.linear(1.0, 1.0), shape)).begin(batch_size, 0)
    roots = torch.arange(batch_size) % vocab
    root_probs, root_tokens = _ranked_children(batch_size, topk, vocab)

    def step(tokens: torch.Tensor, rows, layer: int):
        return _ranked_children(tokens.numel(), topk, vocab)

    host_roots = roots_to_host(root_probs.float(), root_tokens, roots)
    drafted = draft_masked_tree(plan, root_probs.float(), root_tokens, host_roots, step, depth, expected_depth=depth)
    return verify_layout(drafted, n, depth), roots, depth


# ---------------------------------------------------------- server arguments
@dataclass(frozen=True)
class SGLangProfileLaunch:
    """What the SGLang engine used for profiling is started with."""

    model_path: str
    draft_path: str
    dtype: str  # "bfloat16" | "float16" | "float32"
    context_length: int  # at least the grid's largest context + n
    max_batch_size: int  # the grid's largest B (SGLang's --max-running-requests)
    topk: int  # --speculative-eagle-topk: the tree's branching, as in the deployment
    max_n: int  # the largest n of either role: the startup verify width, which sizes KV reservations
    mem_fraction_static: float | None = None
    tp_size: int = 1  # --tp-size: GPUs the forwards are sharded over, one rank each
    on_cpu: bool = False  # SGLang's CPU engine (`cpu_runtime`, entered by the caller) instead of CUDA

    @property
    def torch_device(self) -> torch.device:
        return torch.device("cpu" if self.on_cpu else "cuda")

    def device_argv(self) -> list[str]:
        """Where the forwards run.  On the CPU: `cpu_runtime.cpu_server_flags` and a KV
        pool of twice what the grid's largest batch holds (SGLang's CPU default
        zero-fills a share of all RAM; a pool of exactly the batch runs short by its
        reserved slots)."""
        if self.on_cpu:
            return [*cpu_server_flags(), "--max-total-tokens", str(2 * self.max_batch_size * self.context_length)]
        return ["--device", "cuda", "--attention-backend", "flashinfer"]

    def resolving(self) -> AbstractContextManager:
        """The context SGLang's arguments are resolved in (a launcher's, or an
        ``Engine``'s start): on the CPU with ``intel_amx`` kept (`cpu_runtime`)."""
        return intel_amx_kept() if self.on_cpu else nullcontext()

    def argv(self, algorithm: str | None = None, num_steps: int | None = None, topk: int | None = None,
             num_draft_tokens: int | None = None) -> list[str]:
        """SGLang's command line (``prepare_server_args``, server_args.py:668).  The
        forwards' engine runs SGLang's own EAGLE/EAGLE3 at the widest tree; the step
        design (``profile_steps``) passes the CAST algorithm and one run's tree."""
        algorithm = algorithm or ("EAGLE3" if draft_is_eagle3(self.draft_path) else "EAGLE")
        topk = topk or self.topk
        num_draft_tokens = num_draft_tokens or self.max_n
        num_steps = num_steps or tree_depth(num_draft_tokens, topk)
        argv = ["--model-path", self.model_path, *self.device_argv(), "--dtype", self.dtype,
                "--speculative-algorithm", algorithm, "--speculative-draft-model-path", self.draft_path,
                "--speculative-num-steps", str(num_steps),
                "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(num_draft_tokens),
                "--context-length", str(self.context_length),
                "--max-running-requests", str(self.max_batch_size), "--tp-size", str(self.tp_size),
                # Every n eager: a verify graph exists only for the startup width (cuda_graph_hook.py:68).
                "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
                "--disable-overlap-schedule", "--disable-radix-cache", "--skip-server-warmup"]
        if self.mem_fraction_static is not None:
            argv += ["--mem-fraction-static", str(self.mem_fraction_static)]
        return argv


# ------------------------------------------------------------ the GPU engine
def engine_args(launch: SGLangProfileLaunch):
    """SGLang's resolved server args and the ports every rank shares, made once in
    the parent as ``benchmark/one_batch.py`` makes them (lines 1040-1058)."""
    from sglang.srt.entrypoints.engine import _set_envs_and_config
    from sglang.srt.server_args import PortArgs, prepare_server_args

    with launch.resolving():
        server_args = prepare_server_args(launch.argv())
        server_args.resolve_once()  # server_args.py:244; launchers resolve before publishing
    _set_envs_and_config(server_args)  # as benchmark/one_batch.py:1045 (also sets the spawn start method)
    return server_args, PortArgs.init_new(server_args)  # one_batch.py:1058


class SGLangForwards:
    """One tensor-parallel rank's target and EAGLE workers, built in this process
    as the scheduler builds them (``Scheduler.init_model_worker``,
    managers/scheduler.py:1128-1137), on GPU ``tp_rank``.
    Runs on the CPU engine; on CUDA written against SGLang 0.5.23's source, never run."""

    def __init__(self, launch: SGLangProfileLaunch, server_args, port_args, tp_rank: int = 0) -> None:
        from sglang.benchmark.one_batch import _init_process_global_configs
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.distributed import bootstrap
        from sglang.srt.managers.tp_worker import TpModelWorker
        from sglang.srt.runtime_context import SpawnRanks, publish, spawn_world_rank
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.launch = launch
        # What a scheduler process publishes about itself (scheduler.py:6327; one_batch.py:904-911): the
        # published rank is what TpModelWorker and the parallel groups read.
        publish(server_args, role="scheduler",
                ranks=SpawnRanks(world_rank=spawn_world_rank(server_args, tp_rank=tp_rank, pp_rank=0),
                                 gpu_id=tp_rank))
        _init_process_global_configs()  # MoE / FP8 / FP4 / BF16 GEMM configs, per rank (one_batch.py:912)
        bootstrap.init_parallel_runtime(server_args=server_args, device=launch.torch_device.type,
                                        dist_port=port_args.nccl_port)  # scheduler.py:536
        bootstrap.init_layer_runtime(model_config=ModelConfig.from_server_args(server_args))  # scheduler.py:541
        # scheduler.py:1018-1063: the target worker, then the EAGLE worker built on it.
        self.target = TpModelWorker(server_args=server_args, gpu_id=tp_rank, nccl_port=port_args.nccl_port)
        worker_class = SpeculativeAlgorithm.from_string(server_args.speculative_algorithm).create_worker(server_args)
        self.eagle = worker_class(server_args=server_args, gpu_id=tp_rank, nccl_port=port_args.nccl_port,
                                  target_worker=self.target)
        # scheduler.py:1078-1111: the target's KV pools sized with both models' weights, shared with the draft.
        runner = self.target.model_runner
        runner.account_preloaded_weights(self.target.preloaded_weights_bytes + self.eagle.preloaded_weights_bytes)
        self.target.alloc_memory_pool(draft_parallel_layout=self.eagle.draft_parallel_layout)
        pool, allocator = self.target.get_memory_pool()
        self.eagle.alloc_memory_pool(memory_pool_config=runner.memory_pool_config, req_to_token_pool=pool,
                                     token_to_kv_pool_allocator=allocator)
        # scheduler.py:1113-1126 (graphs are off: only attention backends are built).
        self.target.init_attention_backends()
        self.eagle.init_attention_backends()
        self.target.init_cuda_graphs()
        self.eagle.init_cuda_graphs()
        self.batch = None
        self.batch_key: tuple[int, int] | None = None

    def forward(self, role: str, batch_size: int, context_len: int, n: int) -> Callable[[], None]:
        """One forward of ``role`` ("target" or "draft") at ``(B, c, n)``, as a closure."""
        build = self.target_verify if role == "target" else self.draft_extend
        return build(batch_size, context_len, n)

    @property
    def draft_worker(self):
        return self.eagle._draft_worker  # eagle_worker_v2.py:1335

    def prefill(self, batch_size: int, context_len: int):
        """``B`` requests of ``context_len`` random tokens, prefilled by the target
        (SGLang's benchmark path, one_batch.py:497 ``extend``), their KV slots for
        the next ``max_n`` tokens reserved as EAGLE v2 reserves them before an
        iteration (``eagle_prepare_for_decode``, eagle_utils.py:857).  Kept while
        a row is timed: every point of a row shares ``(B, c)``."""
        from sglang.benchmark.one_batch import extend
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.speculative.eagle_info import EagleDraftInput
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_decode

        if self.batch_key == (batch_size, context_len):
            return self.batch
        self.release()
        runner = self.target.model_runner
        generator = torch.Generator().manual_seed(0)
        vocab = runner.model_config.vocab_size
        reqs = []
        for index in range(batch_size):
            # Req fields as one_batch.py:463-474 sets them.
            tokens = torch.randint(0, vocab, (context_len,), generator=generator).tolist()
            req = Req(rid=index, origin_input_text="", origin_input_ids=array("q", tokens),
                      sampling_params=SamplingParams(temperature=0, max_new_tokens=self.launch.max_n))
            req.full_untruncated_fill_ids = req.origin_input_ids
            req.logprob_start_len = -1
            req.extend_end = len(req.origin_input_ids)
            reqs.append(req)
        next_tokens, _, batch = extend(reqs, runner)
        # From here on the batch is what the scheduler hands the EAGLE worker between
        # iterations: its algorithm (one_batch's extend builds it with NONE) and the
        # draft input carrying each request's last token (eagle_info.py:157).
        batch.spec_algorithm = self.eagle.speculative_algorithm  # eagle_worker_v2.py:1324
        batch.spec_info = EagleDraftInput(bonus_tokens=next_tokens.to(torch.int32))
        eagle_prepare_for_decode(batch)  # reserves KV for the startup tree (max_n tokens per request)
        self.batch, self.batch_key = batch, (batch_size, context_len)
        return batch

    def release(self) -> None:
        """Free the prefilled batch's KV (one_batch.py:569 ``clear``)."""
        if self.batch is not None:
            self.target.model_runner.req_to_token_pool.clear()
            self.target.model_runner.token_to_kv_pool_allocator.clear()
            self.batch = self.batch_key = None

    def verify_input(self, batch, n: int):
        """The EagleVerifyInput the CAST worker would hand to verify for an ``n``-token tree."""
        from sglang.srt.speculative.eagle_worker_common import build_eagle_verify_input

        if n == 1:
            return self.eagle._build_trivial_verify_input(batch)  # eagle_worker_v2.py:1678
        draft = self.draft_worker
        # ModelConfig.vocab_size: configs/model_config.py:1605
        layout, _, depth = verify_tree(batch.batch_size(), n, self.launch.topk,
                                       self.target.model_runner.model_config.vocab_size)
        device = batch.seq_lens.device
        return build_eagle_verify_input(  # eagle_worker_common.py:377, as CastDraftWorker.draft calls it
            batch, batch.spec_info, layout.parent_list.to(device), layout.top_scores_index.to(device),
            layout.draft_tokens.to(device), None, target_worker=self.target, topk=self.launch.topk,
            num_steps=depth, num_draft_tokens=n, tree_mask_mode=draft.tree_mask_mode,  # eagle_worker_v2.py:239
            device=device)

    def target_verify(self, batch_size: int, context_len: int, n: int):
        """A closure running one TARGET_VERIFY forward (eagle_worker_common.py:547
        ``run_eagle_verify``'s forward, without sampling or commit)."""
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_verify

        batch = self.prefill(batch_size, context_len)
        draft_input = batch.spec_info
        verify_input = self.verify_input(batch, n)

        def forward():
            batch.spec_info = verify_input
            forward_batch, _ = eagle_prepare_for_verify(verify_input, self.target.model_runner.req_to_token_pool,
                                                        batch, self.target)  # eagle_utils.py:305
            self.target.model_runner.forward(forward_batch)  # model_runner.py:1813
            batch.spec_info = draft_input
        return forward

    def draft_extend(self, batch_size: int, context_len: int, n: int):
        """A closure running one draft-extend forward of ``n`` tokens per sequence
        (eagle_worker_v2.py:1110 ``_draft_extend_for_decode``'s forward)."""
        from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_uniform_func
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
        from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim
        from sglang.srt.speculative.eagle_worker_common import prepare_for_draft_extend
        from sglang.srt.speculative.spec_utils import draft_tp_context

        batch = self.prefill(batch_size, context_len)
        draft = self.draft_worker
        runner = draft.draft_runner  # eagle_worker_v2.py:235
        device = batch.seq_lens.device
        width = get_draft_input_from_target_hidden_dim(runner)  # eagle_utils.py:237
        generator = torch.Generator().manual_seed(0)
        # ModelConfig.dtype: configs/model_config.py:881
        hidden = torch.randn(batch_size * n, width, generator=generator).to(device, runner.model_config.dtype)
        tokens = torch.randint(0, runner.model_config.vocab_size, (batch_size * n,), generator=generator).to(device)
        accepted = torch.full((batch_size,), n, dtype=torch.int32, device=device)
        # The verify window's KV slots, as eagle_prepare_for_verify assigns them (eagle_utils.py:357;
        # kernels/ops/speculative/cache_locs.py:596; req_to_token: mem_cache/memory_pool.py:406).
        out_cache_loc = assign_extend_cache_locs_uniform_func(
            req_pool_indices=batch.req_pool_indices, req_to_token=runner.req_to_token_pool.req_to_token,
            start_offset=batch.seq_lens, batch_size=batch_size, draft_token_num=n, device=device)
        draft_input = batch.spec_info

        def forward():
            extend_input = EagleDraftExtendInput(  # eagle_info.py:318, fields as eagle_worker_v2.py:1149
                hidden_states=hidden, num_correct_drafts=accepted - 1, num_accept_tokens=accepted,
                num_tokens_per_req=n, num_tokens_for_logprob_per_req=n)
            batch.out_cache_loc = out_cache_loc
            with draft_tp_context(draft.parallel_layout):  # spec_utils.py:830, as the worker wraps it
                forward_batch = prepare_for_draft_extend(  # eagle_worker_common.py:112
                    extend_input, batch, tokens, n, runner, None, return_hidden_states_before_norm=False)
                runner.forward(forward_batch)  # model_runner.py:1813
            batch.spec_info = draft_input
        return forward


@dataclass(frozen=True)
class RankCommand:
    """What rank 0 is about to run, which every other rank runs too."""

    role: str
    batch_size: int
    context_len: int
    n: int
    calls: int  # warm-up and timed calls together


def follow_commands(forwards: SGLangForwards, receive: Callable[[], RankCommand | None]) -> int:
    """Run rank 0's forwards in rank 0's order until ``None`` arrives: the same
    closures (so the same prefills) and the same number of calls each, so every
    collective inside them meets.  Returns the calls run."""
    calls = 0
    with torch.inference_mode():
        for command in iter(receive, None):
            forward = forwards.forward(command.role, command.batch_size, command.context_len, command.n)
            for _ in range(command.calls):
                forward()
            calls += command.calls
    return calls


def follow_rank(launch: SGLangProfileLaunch, server_args, port_args, tp_rank: int, queue) -> None:
    """A follower process: build rank ``tp_rank``'s shard, then replay rank 0."""
    follow_commands(SGLangForwards(launch, server_args, port_args, tp_rank), queue.get)


class RankLost(RuntimeError):
    """A follower rank's process ended while rank 0 still had forwards to run."""


class RankFollowers:
    """Ranks 1..N-1 of a tensor-parallel profile, each in a spawned process fed
    rank 0's commands through its own queue.  A follower that died is reported
    before rank 0 starts a forward whose collectives would wait for it forever."""

    def __init__(self, queues: list, processes: list) -> None:
        self.queues, self.processes = queues, processes

    @classmethod
    def spawn(cls, launch: SGLangProfileLaunch, server_args, port_args) -> RankFollowers:
        context = multiprocessing.get_context("spawn")
        queues, processes = [], []
        for rank in range(1, launch.tp_size):
            queue = context.SimpleQueue()
            process = context.Process(target=follow_rank, args=(launch, server_args, port_args, rank, queue),
                                      name=f"cast-profile-tp{rank}")
            process.start()
            queues.append(queue)
            processes.append(process)
        return cls(queues, processes)

    def run(self, command: RankCommand) -> None:
        dead = [f"{p.name} (exit code {p.exitcode})" for p in self.processes if not p.is_alive()]
        if dead:
            raise RankLost(f"tensor-parallel rank processes {', '.join(dead)} ended; rank 0 stops before a "
                               "forward that would wait for them (their own error is printed above)")
        for queue in self.queues:
            queue.put(command)

    def close(self, timeout_s: float = 60.0) -> None:
        """Let every follower finish its loop; end those stuck in a collective."""
        for queue in self.queues:
            queue.put(None)
        for process in self.processes:
            process.join(timeout_s)
            if process.is_alive():
                process.terminate()


def start_ranks(launch: SGLangProfileLaunch) -> tuple[SGLangForwards, RankFollowers | None]:
    """Every rank of ``launch``: the followers first (they wait at the parallel
    runtime's rendezvous), then rank 0 here.  The followers are closed at exit."""
    import atexit

    server_args, port_args = engine_args(launch)
    followers = RankFollowers.spawn(launch, server_args, port_args) if launch.tp_size > 1 else None
    if followers is not None:
        atexit.register(followers.close)
    return SGLangForwards(launch, server_args, port_args, tp_rank=0), followers


class SGLangRoleTimer:
    """``autotune.profiler.RoleTimer`` over rank 0's ``SGLangForwards`` for one role;
    with ``followers`` every other rank is told first to run the same calls."""

    def __init__(self, forwards: SGLangForwards, role: str, followers: RankFollowers | None,
                 device: torch.device) -> None:
        self.forwards, self.role, self.followers, self.device = forwards, role, followers, device

    @torch.inference_mode()
    def time(self, batch_size: int, context_len: int, n: int, warmup: int, repeats: int) -> Timing:
        if self.followers is not None:
            self.followers.run(RankCommand(self.role, batch_size, context_len, n, warmup + repeats))
        return time_calls(self.forwards.forward(self.role, batch_size, context_len, n), self.device, warmup,
                          repeats)
