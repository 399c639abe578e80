"""The policy side of the SGLang worker, free of SGLang objects.

``CastWorker`` asks it two things per iteration: a plan (the shared policy's
``begin``) and the verify width for the nodes the plan's rerank chose.  Keeping
it apart from the worker lets tests check the worker's decisions against the
native engine's with plain tensors.
"""

from __future__ import annotations

from ..cast import IterationPlan, Policy
from .plugin_config import StaticShape
from .verify_layout import choose_width, verify_widths


class CastDecider:
    def __init__(self, policy: Policy, shape: StaticShape) -> None:
        self.policy = policy
        self.shape = shape
        # Widths of the runtime states built at startup; a reloaded profile reuses them.
        self.widths = verify_widths(shape.num_draft_tokens,
                                    [b.shape.num_verify_tokens for b in policy.settings.buckets])

    def begin(self, batch_size: int, context_len: int) -> IterationPlan:
        """CAST.md §2: a ragged batch is charged at its longest committed context."""
        return self.policy.begin(batch_size, context_len)

    def width(self, wanted_nodes: int, available_nodes: int) -> int:
        return choose_width(wanted_nodes, available_nodes, self.widths)
