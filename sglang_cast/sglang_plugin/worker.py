"""CAST inside SGLang's EAGLE v2 pipeline.

One decode iteration of ``EAGLEWorkerV2`` is draft → verify → draft-extend.
``CastWorker`` keeps verify and draft-extend as they are and changes the draft:

* **depth** — before drafting, the shared policy forecasts how deep this
  iteration's tree will go (layer 1's values are already known, deeper layers
  follow the depth-pruning FIFOs: ``IterationPlan.predict_depth`` with their
  means, ``reachable_depth`` with their best ratios) and the worker swaps in the
  pre-built runtime state of the smallest depth holding the reachable depth;
* **breadth** — ``CastDraftWorker.draft`` runs EAGLE's draft forwards one layer
  at a time; after each layer the policy's ``keep`` decides on the layer's
  ``[B, top_k]`` candidate values, and pruning is a mask over the frontier
  (``drafting.draft_masked_tree``), so every tensor keeps SGLang's shape.  The
  exact depth rule (``grow``) still runs after each layer and may stop before the
  state's depth.  Because host decisions sit between layers, the draft forwards
  run eagerly (no multi-step draft CUDA graph); a ``d``-layer draft makes ``d``
  device-to-host copies, the first of which (the root's candidates) also serves
  the depth choice;
* **prompt-lookup branch** — where the batch's bucket has one, each request's
  proposal from its committed context is grafted onto the drafted tree
  (``lookup_branch``), and the depth above is raised to hold the longest one;
* **rerank and verify width** — the policy's ``verify_count`` orders the kept
  nodes; the worker swaps in the state of the smallest pre-built width (at the
  chosen depth) that holds them (``runtime_shapes``), and numbers them for
  SGLang's tree kernel (``verify_layout``);
* **no draft** — at batch sizes whose profile bucket says ``speculate: false``,
  SGLang's per-iteration hook ``activate_step_by_batch`` swaps in the zero-step
  state, and SGLang's worker then decodes one token without calling the draft
  (its draft-extend still runs, keeping the draft's KV current for when the
  batch shrinks).  A switch is a few attribute assignments on the host.

Every (depth, width) state — draft attention backend, target attention backend
and verify CUDA graphs, draft-extend backend and graph — is built at startup with
SGLang's own ``build_adaptive_runtime_state``, except that the states' target
backends reuse SGLang's one process-wide FlashInfer workspace instead of a new
384 MiB one each (``shared_attention_workspace``).  KV for every iteration is
reserved for the startup (largest) shape, so a swap never outgrows an allocation.

The policy reloads its profile while serving (``reload.ProfileWatcher``); with
tensor parallelism rank 0 alone watches the file and every rank switches at the
same iteration (``rank_sync``).
"""

from __future__ import annotations

import contextlib
import logging
import os

import torch
from sglang.srt.layers.moe.utils import speculative_moe_a2a_backend_context, speculative_moe_backend_context
from sglang.srt.model_executor.cuda_graph_config import Backend, Phase, check_cuda_graph_backend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.runtime_context import get_exec, get_parallel, get_schedule
from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState
from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from sglang.srt.speculative.eagle_utils import per_step_draft_out_cache_loc
from sglang.srt.speculative.eagle_worker_common import build_eagle_verify_input, prepare_for_draft
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
from sglang.srt.speculative.spec_utils import draft_tp_context, renorm_draft_probs
from sglang.srt.utils.common import fast_topk

from ..cast import decide_verified, graft_proposals, make_policy
from .decider import CastDecider
from .drafting import draft_masked_tree, roots_to_host
from .lookup_branch import batch_contexts, iteration_depth, propose
from .memory_plan import ModelShape, extra_state_memory
from .plugin_config import PROFILE_ENV, ParallelLayout, SGLangSection, StaticShape, load_fitting_profile
from .rank_sync import ProfileBroadcast
from .reload import ProfileWatcher
from .runtime_shapes import NO_DRAFT
from .step_log import StepLog, StepProfileMode
from .verify_layout import verifiable_ranking, verify_layout

log = logging.getLogger(__name__)


class _DraftForward:
    """One EAGLE draft forward per call, in SGLang's multi-step layout: ``topk``
    frontier rows per request, parent hidden states gathered by row."""

    def __init__(self, worker: CastDraftWorker, forward_batch: ForwardBatch, draft_input: EagleDraftInput) -> None:
        self.worker = worker
        self.forward_batch = forward_batch
        self.draft_input = draft_input
        self.hidden = draft_input.hidden_states
        self.batch_size = forward_batch.batch_size
        self.out_cache_loc = per_step_draft_out_cache_loc(forward_batch.out_cache_loc, self.batch_size,
                                                          worker.topk, worker.speculative_num_steps)

    def __call__(self, tokens: torch.Tensor, rows: torch.Tensor | None, step: int):
        worker, batch, topk = self.worker, self.forward_batch, self.worker.topk
        if rows is None:
            hidden = self.hidden.repeat_interleave(topk, dim=0)
        else:
            offsets = torch.arange(self.batch_size, device=rows.device).view(-1, 1) * topk
            hidden = self.hidden[(rows + offsets).flatten()]
        batch.input_ids = tokens
        batch.out_cache_loc = self.out_cache_loc[step]
        self.draft_input.hidden_states = hidden
        context = ForwardContext(attn_backend=worker.draft_attn_backend.attn_backends[step])
        with forward_context(context, forward_batch=batch):
            logits = worker.draft_runner.forward(batch).logits_output
        probs = renorm_draft_probs(logits.next_token_logits, batch.sampling_info, False)
        child_probs, child_tokens = fast_topk(probs, topk, dim=-1)
        batch.positions.add_(1)
        if worker.draft_runner.model_config.model_is_mrope:
            batch.mrope_positions.add_(1)
        if worker.hot_token_id is not None:
            child_tokens = worker.hot_token_id[child_tokens]
        self.hidden = logits.hidden_states
        return child_probs, child_tokens


@contextlib.contextmanager
def shared_attention_workspace(model_runner):
    """While building runtime states, make ``model_runner`` hand out attention
    backends on SGLang's process-wide FlashInfer workspace.

    ``build_adaptive_runtime_state`` asks for ``init_new_workspace=True``: 384 MiB
    per state, allocated after the KV pool is sized.  Only one runtime state runs at
    a time, and SGLang itself already shares that workspace between its target and
    draft backends, which run one after the other in every iteration, so the
    states share it too."""
    build = model_runner._get_attention_backend
    model_runner._get_attention_backend = lambda init_new_workspace=False: build(init_new_workspace=False)
    try:
        yield
    finally:
        del model_runner._get_attention_backend  # the class's method again


class StateMemoryHold:
    """The runtime states' bytes, held on the GPU from the worker's construction
    until the states are built.

    SGLang sizes the KV pool between the two (``scheduler.py:1128-1146``) from the
    memory free at that moment (``kv_cache_configurator.py:2990-3007``), so what is
    held comes out of the pool, and the states then allocate into what the release
    returned, never into the slack SGLang keeps for its own activations and graphs
    (``memory_plan`` charges them the same way)."""

    def __init__(self, nbytes: int, device) -> None:
        self.nbytes = nbytes
        self._block = torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes > 0 else None  # [nbytes]

    @property
    def held(self) -> bool:
        return self._block is not None

    def release(self) -> None:
        """Give the bytes back to the driver (not only to torch's cache), so CUDA-graph
        pools can take them too."""
        if self._block is None:
            return
        on_cuda = self._block.is_cuda
        self._block = None
        if on_cuda:
            torch.cuda.empty_cache()


def charged_at(batch) -> tuple[int, int]:
    """``batch``'s sequences and longest committed context (0 for an empty batch):
    a ragged batch's step is charged at its longest context (docs/design/cast.md
    §2), so that is what the plan is begun with.  SGLang's host copy of the lengths
    is read where it keeps one."""
    seq_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
    size = int(seq_lens.numel())
    return size, int(seq_lens.max()) if size else 0


def decode_graph_max_batch() -> int:
    """The largest captured decode batch (0 when decode CUDA graphs are off, or, as on
    SGLang's CPU engine, no batch sizes were resolved for them): the batch every
    runtime state's graph buffers are sized for."""
    sizes = get_exec().graph.cuda_graph_bs_decode
    if not sizes or check_cuda_graph_backend(Phase.DECODE, Backend.DISABLED):
        return 0
    return max(sizes)


class CastVerifyInput(EagleVerifyInput):
    """SGLang's verify input for a CAST tree: its longest root-to-leaf chain is at most
    the verified width, not ``spec_steps + 1``.  SGLang sizes ``accept_index`` by
    ``max_tree_depth`` and moves the accepted path to the front of each request's
    ``draft_token_num`` slots (``eagle_worker_common._compact_accept_to_front``), which
    fails for a state narrower than its depth, e.g. depth 3 verifying 2 tokens (found
    running the plugin inside SGLang on the CPU)."""

    @property
    def max_tree_depth(self) -> int:
        return min(self.spec_steps, self.draft_token_num - 1) + 1


class CastDraftWorker(EagleDraftWorker):
    """EAGLE's draft worker with CAST's expansion.  ``EAGLEWorkerV2`` builds its
    ``EagleDraftWorker`` inline (loading the draft model), so ``CastWorker``
    re-classes that instance instead of building a second one; this class adds
    methods only, plus the ``cast`` attribute ``CastWorker`` sets."""

    cast: CastWorker

    def _capture_cuda_graphs(self) -> None:
        """Capture the draft-extend graph only: CAST drafts eagerly (a host decision
        per layer), and EagleDraftWorker skips the draft-decode graph for 1 step."""
        steps = self.speculative_num_steps
        self.speculative_num_steps = min(steps, 1)  # the zero-step state keeps 0
        try:
            super()._capture_cuda_graphs()
        finally:
            self.speculative_num_steps = steps

    def draft(self, batch, *, with_topology: bool = False) -> EagleVerifyInput:
        if with_topology:
            raise RuntimeError("CAST does not support pipeline parallelism (--pp-size 1)")
        draft_input: EagleDraftInput = batch.spec_info
        batch_size, context_len = charged_at(batch)
        plan, lookup, proposals = None, None, []
        if batch_size > 0:
            plan = self.cast.decider.begin(batch_size, context_len)
            root_tokens = draft_input.topk_index
            if self.hot_token_id is not None:
                root_tokens = self.hot_token_id[root_tokens]
            # The iteration's one copy before drafting: the depth choice reads the
            # root's candidates, which are also layer 1 of the tree.
            roots = roots_to_host(draft_input.topk_p, root_tokens, draft_input.bonus_tokens)
            predicted = plan.predict_depth(roots.values)
            lookup = self.cast.decider.lookup(plan)
            if lookup is not None:
                proposals = propose(lookup, batch_contexts(batch.reqs, roots.bonus, lookup.window))
            # The depth's runtime state must be in place before the draft batch is
            # prepared: it sizes the draft KV slots and attention metadata.  It bounds
            # the tree, so it holds the deepest the rule is likely to go (forwards are
            # launched early only to the predicted depth) and the branch's proposals.
            self.cast.use_depth(iteration_depth(plan.reachable_depth(roots.values, predicted), lookup, proposals))
        forward_batch, _, _ = prepare_for_draft(draft_input, self.req_to_token_pool, batch, None, self.draft_runner,
                                                self.topk, self.speculative_num_steps)
        verify_args = dict(target_worker=self.target_worker, topk=self.topk, num_steps=self.speculative_num_steps,
                           tree_mask_mode=self.tree_mask_mode, device=self.device)
        if plan is None or forward_batch.forward_mode.is_idle():
            return build_eagle_verify_input(batch, draft_input, None, None, None, None,
                                            num_draft_tokens=self.speculative_num_draft_tokens, **verify_args)
        if self.speculative_num_steps > 1:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        drafted = draft_masked_tree(plan, draft_input.topk_p, root_tokens, roots,
                                    _DraftForward(self, forward_batch, draft_input), self.speculative_num_steps,
                                    expected_depth=predicted)
        if proposals:
            graft_proposals(drafted.tree, proposals, lookup)
        depth = self.speculative_num_steps
        ranking = verifiable_ranking(drafted, depth, self.cast.decider.widths_at(depth)[-1] - 1)
        width = self.cast.use_width(decide_verified(plan, drafted.tree), ranking.shape[1])
        self.cast.drafted = (plan, len(plan.kept), width - 1)
        layout = verify_layout(drafted, width, depth, ranking)
        verify_input = build_eagle_verify_input(
            batch, draft_input, layout.parent_list.to(self.device), layout.top_scores_index.to(self.device),
            layout.draft_tokens.to(self.device), None, num_draft_tokens=width, **verify_args)
        verify_input.__class__ = CastVerifyInput
        return verify_input


class CastWorker(EAGLEWorkerV2):
    """SGLang's EAGLE v2 worker driven by a CAST policy (``cast`` or ``goodput``)."""

    def __init__(self, server_args, gpu_id: int, nccl_port: int, target_worker) -> None:
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        policy_name = self.speculative_algorithm.policy_name  # our CastSpecAlgo, resolved by EAGLEWorkerV2
        self.static_shape = StaticShape(self.speculative_num_steps, self.topk, self.speculative_num_draft_tokens)
        tp_group = get_parallel().tp_group
        layout = ParallelLayout(get_parallel().tp_size, get_parallel().pp_size)
        loaded = load_fitting_profile(os.environ[PROFILE_ENV], self.static_shape, layout)
        step_mode = StepProfileMode.from_env()  # set only by `cast-autotune profile --backend sglang`
        if step_mode is not None and step_mode.policy is not None:  # the step design's fixed trees
            policy_name = step_mode.policy
        self.decider = CastDecider(make_policy(policy_name, loaded.profile.settings), self.static_shape,
                                   SGLangSection.of(loaded.profile).runtime_states,
                                   lookup_enabled=get_schedule().disable_overlap_schedule)
        self.step_log = (StepLog(step_mode.log, torch.device(self._draft_worker.device)) if step_mode is not None
                         else None)
        if self.step_log is not None:  # each logged iteration's verify forward timed on its own
            target = self._target_worker
            target.forward_batch_generation = self.step_log.timed_verify(target.forward_batch_generation)
        self.drafted: tuple | None = None  # (plan, layers drafted, nodes verified) of the running iteration
        # Only TP rank 0 watches the file; every rank applies its versions at the same
        # iteration (rank_sync), before that iteration's first decision.
        leader = tp_group.rank_in_group == 0
        self.profile_sync = ProfileBroadcast(tp_group.rank_in_group, lambda tensor: tp_group.broadcast(tensor, src=0),
                                             self._apply_profile, self._draft_worker.device)
        self.watcher = ProfileWatcher(loaded, self.decider.policy, self.static_shape, clamps=self.decider.clamps,
                                      publish=self.profile_sync.offer if leader else None, layout=layout)
        self.states: dict[tuple[int, int], SpecRuntimeState] = {}
        self._draft_worker.__class__ = CastDraftWorker
        self._draft_worker.cast = self
        self.state_hold = StateMemoryHold(self.planned_state_bytes(), self._draft_worker.device)
        if leader:
            self.watcher.start()
        log.info("CAST worker: policy %s, profile %s (version %s), draft depths %s, verify widths %s", policy_name,
                 loaded.path, loaded.version, self.decider.depths, self.decider.widths)
        for note in self.decider.lookup_notes(loaded.profile.settings):
            log.warning("CAST worker: %s", note)

    def planned_state_bytes(self) -> int:
        """What the runtime states beyond the startup one will allocate on this rank
        (``memory_plan.extra_state_memory``, from the loaded models' configs)."""
        target = self._target_worker.model_runner.model_config
        draft = self._draft_worker.draft_runner.model_config
        states = extra_state_memory(ModelShape.from_config(target.hf_config.to_dict(), "the target's config"),
                                    ModelShape.from_config(draft.hf_config.to_dict(), "the draft's config"),
                                    self.decider.states, self.static_shape.startup_state, decode_graph_max_batch(),
                                    target.context_len, eagle3=self.speculative_algorithm.is_eagle3())
        return sum(state.total for state in states)

    def init_cuda_graphs(self) -> None:
        """SGLang's startup graphs serve the startup (largest) shape; build one runtime
        state per other (depth, width) of the decider's catalogue with SGLang's own
        builder, into the memory held for them since construction."""
        super().init_cuda_graphs()
        self.state_hold.release()
        draft = self._draft_worker
        startup = self.static_shape.startup_state  # the worker still runs it: no state was switched yet
        self.states[startup] = SpecRuntimeState(
            speculative_num_steps=startup[0], speculative_num_draft_tokens=startup[1],
            draft_attn_backend=draft.draft_attn_backend, cuda_graph_runner=draft.cuda_graph_runner,
            target_attn_backend=self._target_worker.model_runner.attn_backend,
            target_graph_runner=self._target_worker.model_runner.decode_cuda_graph_runner,
            draft_extend_attn_backend=draft.draft_extend_attn_backend,
            cuda_graph_runner_for_draft_extend=draft.cuda_graph_runner_for_draft_extend,
        )
        graph_batch_sizes = get_exec().graph.cuda_graph_bs_decode if decode_graph_max_batch() else None
        with (draft_tp_context(draft.parallel_layout), speculative_moe_backend_context(),
              speculative_moe_a2a_backend_context(),
              shared_attention_workspace(self._target_worker.model_runner)):
            for depth, width in self.decider.states:
                if (depth, width) not in self.states:
                    self.states[depth, width] = self.build_adaptive_runtime_state(
                        depth, width, cuda_graph_bs=graph_batch_sizes)
        log.info("CAST worker: %d runtime states (depth, width) %s", len(self.states), sorted(self.states))

    def forward_batch_generation(self, batch, *args, **kwargs):
        """SGLang's iteration, unchanged; with the step log on (``step_log``), each
        decode iteration is timed from this call to the next and logged with what it
        drafted and verified."""
        if self.step_log is None:
            return super().forward_batch_generation(batch, *args, **kwargs)
        mode = batch.forward_mode
        decode = not (mode.is_extend() or batch.is_extend_in_batch or mode.is_idle())
        self.step_log.arrive(decode)
        self.drafted = None
        if decode:  # the context the plan is charged at, read before the iteration commits
            batch_size, context_len = charged_at(batch)
        output = super().forward_batch_generation(batch, *args, **kwargs)
        if decode:
            plan, depth, verified = self.drafted or (self.decider.begin(batch_size, context_len), 0, 0)
            self.step_log.ran(plan, depth, verified, output.accept_lens)
        return output

    def _apply_profile(self, raw: bytes) -> None:
        self.watcher.apply_bytes(raw)

    def activate_step_by_batch(self, batch_size: int) -> None:
        """SGLang's hook at the start of every decode iteration, on every TP rank
        (``eagle_worker_v2.py:1445``, the schedulers' replicated batch):
        first the profile version rank 0 announces (``rank_sync``), then the
        zero-step state when this batch size does not draft, else back to a drafting
        state (the startup one; ``use_depth`` picks the depth once the plan is known)."""
        self.profile_sync.step()
        if self.decider.drafts(batch_size):
            if self.speculative_num_steps == 0:
                self.apply_runtime_state(self.states[self.static_shape.startup_state])
        else:
            self.apply_runtime_state(self.states[NO_DRAFT])

    def use_depth(self, layers: int) -> int:
        """Swap in the state of the smallest built depth holding ``layers`` (see
        ``CastDecider.depth``), at that depth's largest width until the rerank picks
        one."""
        depth = self.decider.depth(layers)
        self.apply_runtime_state(self.states[depth, self.decider.widths_at(depth)[-1]])
        return depth

    def use_width(self, wanted_nodes: int, available_nodes: int) -> int:
        """Swap in the state verifying ``wanted_nodes`` at the current depth."""
        depth = self.speculative_num_steps
        width = self.decider.width(depth, wanted_nodes, available_nodes)
        self.apply_runtime_state(self.states[depth, width])
        return width

    def apply_runtime_state(self, state: SpecRuntimeState) -> None:
        """Point the worker, its draft worker and the target runner at ``state``.

        Unlike SGLang's adaptive switch (keyed by step count alone) this is keyed by
        (depth, width), and it leaves the published speculative config at the startup
        shape: the scheduler keeps reserving KV for the largest tree."""
        shape = (state.speculative_num_steps, state.speculative_num_draft_tokens)
        if shape == (self.speculative_num_steps, self.speculative_num_draft_tokens):
            return
        draft, target = self._draft_worker, self._target_worker.model_runner
        self.speculative_num_steps = draft.speculative_num_steps = state.speculative_num_steps
        self.speculative_num_draft_tokens = draft.speculative_num_draft_tokens = state.speculative_num_draft_tokens
        draft.draft_attn_backend = draft.draft_runner.draft_attn_backend = state.draft_attn_backend
        draft.cuda_graph_runner = state.cuda_graph_runner
        draft.draft_extend_attn_backend = state.draft_extend_attn_backend
        if state.draft_extend_attn_backend is not None:
            draft.draft_runner.attn_backend = state.draft_extend_attn_backend
        draft.cuda_graph_runner_for_draft_extend = state.cuda_graph_runner_for_draft_extend
        draft._rebuild_topk1_chain_buffers()  # SGLang's chain buffers (a no-op unless topk is 1)
        target.attn_backend = state.target_attn_backend
        target.decode_cuda_graph_runner = state.target_graph_runner
