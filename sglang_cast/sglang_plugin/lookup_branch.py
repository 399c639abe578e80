"""The prompt-lookup branch (docs/design/cast.md §4) in the SGLang worker.

A profile bucket's ``lookup_depth`` grafts, onto each request's drafted tree, the
tokens that followed the latest earlier occurrence of the longest suffix of its
context, priced by the shared `cast.ContextLookup`; the rerank then verifies them
only where they are worth it, exactly as in the native engine.  What is SGLang's
here is where the context comes from: a request's prompt (``origin_input_ids_unpadded``)
and its committed output (``output_ids``).

SGLang appends an iteration's accepted tokens to ``output_ids`` before the next
draft, except under overlap scheduling, where results are processed one
iteration late: the context then lacks the last iteration's tokens, and a match
on it would propose what followed a stale suffix.  So the worker proposes only
for a request whose context ends at the root its tree grows from (the last
accepted token), and not at all under overlap scheduling (``CastDecider.lookup``;
its ``lookup_notes`` say so at startup).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..cast import ContextLookup, Proposal


def request_context(prompt_ids: Sequence[int], output_ids: Sequence[int], root: int, window: int) -> np.ndarray | None:
    """The last ``window`` tokens of a request's committed context (``[n]`` int64),
    or ``None`` where it does not end at ``root`` (its results are not in yet)."""
    output = np.asarray(output_ids[-window:], dtype=np.int64)
    room = window - len(output)  # prompt tokens the window still holds
    prompt = np.asarray(prompt_ids[len(prompt_ids) - room:] if room else [], dtype=np.int64)
    context = np.concatenate([prompt, output])
    if not len(context) or int(context[-1]) != root:
        return None
    return context


def batch_contexts(reqs, roots, window: int) -> list[np.ndarray | None]:
    """`request_context` of each of SGLang's ``Req`` objects, whose trees grow from
    ``roots`` (``[B]`` on the host)."""
    return [request_context(req.origin_input_ids_unpadded, req.output_ids, int(root), window)
            for req, root in zip(reqs, roots)]


def propose(lookup: ContextLookup, contexts: Sequence[np.ndarray | None]) -> list[Proposal]:
    """Each request's proposal (`Proposal.none` where it has no context to match)."""
    return [Proposal.none() if context is None else lookup.propose(context) for context in contexts]


def iteration_depth(reachable: int, lookup: ContextLookup | None, proposals: Sequence[Proposal]) -> int:
    """The depth of the runtime state an iteration runs in: the layers the plan may
    draft (``IterationPlan.reachable_depth``), raised to the layers the longest graft
    reaches below the root so that the branch is verified whole (the worker chooses
    it; ``state_cover`` counts it)."""
    if lookup is None:
        return reachable
    return max(reachable, min(lookup.depth, max((len(p.tokens) for p in proposals), default=0)))
