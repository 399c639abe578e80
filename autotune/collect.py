"""``collect``: record full-expansion traces (docs/design/cast.md §8) into the database.

The engine drafts the full EAGLE-2 expansion with ``shape`` (every drafted child,
the ``K + (H-1)·K²``-node rerank pool, stored as trace format
``sglang_cast.cast.TRACE_FORMAT``), grafts a ``lookup_depth``-token prompt-lookup
branch onto it, and verifies every node, so any CAST tree with ``top_k <= K``,
``depth <= H`` and a branch of at most ``lookup_depth`` tokens can be replayed from the record.  The tuning space must
therefore stay inside ``shape``; ``tune`` checks it.  Greedy decoding only:
replay is defined for greedy verification.

The recording run commits all that its tree accepted, the branch's tokens included
(`recording_settings`).  Replay judges a policy at the recording's iterations, so
where they start matters: a recording that ignored the branch advanced slowly where
the context repeats itself, sampled those easy stretches densely and replayed
policies with the branch 11-21 % above their live τ (AMX Xeon, 2026-11-30,
docs/results/2026-11-30_replay_sampling_amx.md); committing through the branch
brought six policies, with and without it, within -2 % / +3.4 % of live.

Each iteration is stored with the prompts that were in its batch and committed
as soon as it is recorded.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tqdm import tqdm

from sglang_cast.cast import ContextLookup, PolicySettings, SamplingParams, TreeShape, make_policy
from sglang_cast.cast.policies import Eagle2Policy
from sglang_cast.engine.build import resolve_settings

from .models import ModelPair
from .prompts import PromptSet
from .store import Store


def full_shape(top_k: int, max_depth: int) -> TreeShape:
    """The recording shape: every drafted node is verified (``m = 1 + K + (H-1)·K²``)."""
    pool = TreeShape(top_k=top_k, max_depth=max_depth).pool_size
    return TreeShape(top_k=top_k, max_depth=max_depth, num_verify_tokens=1 + pool)


@dataclass(frozen=True)
class CollectConfig:
    shape: TreeShape
    batch_sizes: tuple[int, ...]
    max_new_tokens: int
    context_length: int
    lookup_depth: int = ContextLookup().depth  # the prompt-lookup branch grafted onto every recorded tree; 0: none


def recording_settings(config: CollectConfig) -> PolicySettings:
    """What the recording run decodes by: EAGLE-2 verifying its whole recorded tree,
    the rerank pool and the lookup branch, so each iteration commits the longest
    accepted path of either (module docstring: where replay's iterations start)."""
    shape = config.shape
    whole = TreeShape(shape.top_k, shape.max_depth, shape.num_verify_tokens + config.lookup_depth)
    return resolve_settings(Eagle2Policy, None).with_shape(whole).with_lookup(config.lookup_depth)


@dataclass(frozen=True)
class CollectReport:
    run_ids: tuple[str, ...]
    iterations: int
    tokens: int


def collect(pair: ModelPair, store: Store, device: str, prompts: PromptSet, config: CollectConfig, *,
            progress: bool = True, should_stop=lambda: False) -> CollectReport:
    """Decode ``prompts`` once per batch size with trace recording on."""
    settings = recording_settings(config)
    params = SamplingParams(max_new_tokens=config.max_new_tokens)
    run_ids, iterations, tokens = [], 0, 0
    for batch_size in config.batch_sizes:
        run_id = uuid.uuid4().hex
        run_ids.append(run_id)
        engine = pair.engine(make_policy("eagle2", settings), batch_size, config.context_length)
        engine.record_traces(config.shape, ContextLookup(depth=config.lookup_depth) if config.lookup_depth else None)
        recorded = 0  # traces of this run so far: the next one's index
        requests = [engine.add_request(pair.format_prompt(text), params) for text in prompts.texts]
        prompt_of = {r.request_id: pid for r, pid in zip(requests, prompts.ids)}
        bar = tqdm(total=len(requests), desc=f"collect B={batch_size}", unit="prompt", disable=not progress)
        while engine.has_work and not should_stop():
            step = engine.step()
            bar.update(len(step.finished))
            if step.trace is None:
                continue  # only prefills happened
            # The iteration's batch: still running, plus those it finished (a request
            # that finished at prefill never iterated).
            batch = engine.running + [r for r in step.finished if r.stats.iterations > 0]
            trace = step.trace
            assert len(batch) == trace.batch_size, "iteration batch does not match the recorded trace"
            ids = tuple(sorted(prompt_of[r.request_id] for r in batch))
            store.add_traces(device, pair.target_id, pair.draft_id, prompts.name, run_id,
                             [(recorded, ids, trace)])
            recorded += 1
            iterations += 1
            tokens += sum(step.record.accepted) + trace.batch_size
        bar.close()
        if should_stop():
            break
    return CollectReport(tuple(run_ids), iterations, tokens)
