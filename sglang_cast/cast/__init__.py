"""CAST core: cost tables, Algorithm 1, policies, tree bookkeeping, verification
and trace replay.  Pure torch and NumPy; imports nothing from the engines or the server."""

from .algorithm1 import largest_valid_index
from .context_lookup import ContextLookup, MatchValue, Proposal, graft_proposals
from .costs import CostModel, CostTable, select_bucket
from .expand import Expander, decide_verified, grow_tree, ranked_children
from .overhead import OverheadTable, OverheadTerms, StepSample, fit_overhead
from .policies import POLICIES, IterationPlan, Policy, make_policy, policy_class
from .sampling import InvalidSamplingParam, RequestSampler, SamplingParams, greedy_tokens, target_probs
from .settings import EAGLE2_SHAPE, BucketSettings, PolicySettings, Thresholds, TreeShape, bucket_index
from .trace import (TRACE_FORMAT, IterationOutcome, RecordingExpander, ReplayResult, TraceIteration, charge,
                    charged_ms, replay, replay_iteration)
from .tree import DraftTree, VerifyTree, select_verified, verified_subtree
from .verify import VerifyResult, committed_tokens, verify_greedy, verify_sampling

__all__ = [
    "largest_valid_index", "ContextLookup", "MatchValue", "Proposal", "graft_proposals", "CostModel", "CostTable",
    "select_bucket", "OverheadTable", "OverheadTerms",
    "StepSample", "fit_overhead", "Expander", "decide_verified", "grow_tree",
    "ranked_children", "POLICIES", "IterationPlan", "Policy", "make_policy", "policy_class", "RequestSampler",
    "InvalidSamplingParam", "SamplingParams", "greedy_tokens", "target_probs", "EAGLE2_SHAPE", "BucketSettings", "bucket_index", "PolicySettings", "Thresholds", "TreeShape",
    "TRACE_FORMAT", "IterationOutcome", "RecordingExpander", "ReplayResult", "TraceIteration", "charge", "charged_ms", "replay",
    "replay_iteration",
    "DraftTree", "VerifyTree", "select_verified", "verified_subtree",
    "VerifyResult", "committed_tokens", "verify_greedy", "verify_sampling",
]
