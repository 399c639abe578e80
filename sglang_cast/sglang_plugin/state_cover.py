"""Which runtime states to build: the fewest that run what the policy reaches.

SGLang captures CUDA graphs and FlashInfer buffers per (draft depth, verify
width) runtime state, at every graph batch size, so each state costs start-up
time and GPU memory (``memory_plan``).  The worker picks, per iteration, the
smallest built depth holding the plan's reachable depth and then the smallest
built width holding the nodes the rerank wants (``runtime_shapes``); an
iteration runs *exactly* when that is its own (depth, width), else it is
rounded up to a larger built state (more verify work than asked for).

:func:`reached_states` replays recorded iterations under a profile's policy
(the same trees, FIFOs and rerank ``tune`` scores) and counts the
(reachable depth, wanted width) pair of each (the depth raised to hold a bucket's
prompt-lookup branch, as the worker raises it); :func:`cover_states` then picks, greedily by
iterations gained per state added, the fewest states running at least
``cap.coverage`` of the replayed iterations exactly, within ``cap``'s number of
states and share of GPU memory.  Every built depth also gets width 2 (one
node): a tree drafted in that state always has at least one node, so the
worker always finds a width it can fill (``runtime_shapes.choose_width``).

The replay grows each tree to the policy's own depth; the worker caps the draft
at the chosen state's depth (never below the forecast), so widths reached past
the reachable depth are counted as the policy would want them, an upper bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..cast import Policy
from ..cast.expand import grow_tree
from ..cast.trace import ReplayExpander, TraceIteration, graft_recorded
from .lookup_branch import iteration_depth
from .runtime_shapes import FLOOR_WIDTH, NO_DRAFT

State = tuple[int, int]  # (draft depth, verify width incl. the root)


@dataclass(frozen=True)
class StateCap:
    """What ``tune`` may spend on runtime states (stated in the profile)."""

    max_states: int = 8  # every state SGLang builds: the startup one and the zero-step one included
    max_memory_share: float = 0.10  # of one GPU's memory, for the states beyond the startup one
    coverage: float = 0.99  # share of replayed iterations to run in exactly their own state

    def check(self, where: str = "state cap") -> None:
        if not isinstance(self.max_states, int) or self.max_states < 2:
            raise ValueError(f"{where}.max_states: expected an integer >= 2 (the startup state and its "
                             f"width-{FLOOR_WIDTH} floor), got {self.max_states!r}")
        for name, value in (("max_memory_share", self.max_memory_share), ("coverage", self.coverage)):
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{where}.{name}: expected a number in (0, 1], got {value!r}")


@dataclass(frozen=True)
class StateCover:
    states: tuple[State, ...]  # sorted; the startup state and the depth floors included
    iterations: int  # replayed iterations
    exact: int  # of them, run in exactly their own (depth, width)
    memory: int  # bytes of the states beyond the startup one (``state_bytes``)

    @property
    def coverage(self) -> float:
        return self.exact / self.iterations if self.iterations else 1.0

    def to_dict(self) -> dict:
        return {"runtime_states": [list(s) for s in self.states],
                "replay": {"iterations": self.iterations, "exact": self.exact,
                           "coverage": round(self.coverage, 4), "state_bytes": self.memory}}


def reached_pair(trace: TraceIteration, policy: Policy) -> State:
    """One replayed iteration's (depth, wanted width): what the worker asks of its
    states.  The plan's calls are replay's own (``trace.replay_iteration``): begin,
    grow, graft the recorded lookup proposals, rerank; the depth is forecast first
    (``reachable_depth``), as the worker does, from the root's recorded candidates,
    and raised to hold the longest proposal where the bucket has a branch.  Mutates
    the policy's FIFOs as a live run would."""
    plan = policy.begin(trace.batch_size, int(trace.context_lens.max()))
    roots = trace.child_probs[:, 0, :]
    reachable = plan.reachable_depth(roots, plan.predict_depth(roots))
    if reachable == 0:
        return NO_DRAFT
    tree = grow_tree(plan, ReplayExpander(trace), trace.tree.tokens[:, 0])
    graft_recorded(tree, trace, plan)
    return iteration_depth(reachable, plan.lookup, trace.proposals), plan.verify_count(tree) + 1


def reached_states(traces: Iterable[TraceIteration], policy: Policy) -> Counter[State]:
    """How often each (depth, width) pair is reached over ``traces``, in order."""
    return Counter(reached_pair(trace, policy) for trace in traces)


def cover_states(reached: Counter[State], startup: State, cap: StateCap, state_bytes: Callable[[int, int], int],
                 gpu_bytes: int) -> StateCover:
    """The fewest states running ``cap.coverage`` of ``reached`` exactly, within ``cap``.

    ``startup`` is SGLang's own (largest) state, always built; its memory is
    SGLang's.  ``state_bytes(depth, width)`` is what one more state costs on one
    GPU (``memory_plan.state_memory``), ``gpu_bytes`` that GPU's memory.  Greedy:
    add the reached pair (with its depth's floor when the depth is new) that gains
    the most exact iterations per state added, while the cap allows, until the
    coverage is met.  Pairs wider or deeper than ``startup`` cannot be reached
    (the profile fits the startup shape) and are refused."""
    cap.check()
    beyond = [pair for pair in reached if pair != NO_DRAFT and (pair[0] > startup[0] or pair[1] > startup[1])]
    if beyond:
        raise ValueError(f"reached states {sorted(beyond)} exceed the startup state {startup}")
    chosen = {startup, (startup[0], FLOOR_WIDTH)} | ({NO_DRAFT} if NO_DRAFT in reached else set())
    budget = cap.max_memory_share * gpu_bytes
    total = sum(reached.values())

    def exact(states: set[State]) -> int:
        return sum(count for pair, count in reached.items() if pair in states)

    def memory(states: Iterable[State]) -> int:
        return sum(state_bytes(*s) for s in states if s not in (startup, NO_DRAFT))

    if len(chosen) > cap.max_states or memory(chosen) > budget:
        raise ValueError(f"the cap ({cap.max_states} states, {cap.max_memory_share:.0%} of GPU memory) does not "
                         f"hold even the startup state {startup}, its width-{FLOOR_WIDTH} floor and the zero-step "
                         "state")
    while total and exact(chosen) < cap.coverage * total:
        best, best_gain = None, 0.0
        for pair in sorted(set(reached) - chosen):
            added = {pair, (pair[0], FLOOR_WIDTH)} - chosen
            if len(chosen) + len(added) > cap.max_states or memory(chosen | added) > budget:
                continue
            gain = (exact(chosen | added) - exact(chosen)) / len(added)
            if gain > best_gain:
                best, best_gain = added, gain
        if best is None:
            break
        chosen |= best
    return StateCover(tuple(sorted(chosen)), total, exact(chosen), memory(chosen))

