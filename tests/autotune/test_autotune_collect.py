"""``collect``'s recording run commits all that its tree accepted, the prompt-lookup
branch included, so its iterations start where a policy with the branch would start
them (autotune/collect.py: where replay's iterations start decides its τ)."""

import numpy as np

from autotune.collect import CollectConfig, collect, full_shape
from autotune.models import ModelPair
from autotune.store import Store
from sglang_cast.cast import TraceIteration
from support.autotune import tiny_prompts
from support.tiny import CharTokenizer, MirrorDraft, tiny_target


def deepest_accepted(trace: TraceIteration, nodes: int) -> int:
    """Depth of the deepest node among the first ``nodes`` of row 0 whose path the
    target accepted (0: none)."""
    verdicts, parents, depths = trace.verdicts()[0].numpy(), trace.tree.parents[0], trace.tree.depths[0]
    accepted = np.zeros(nodes, dtype=bool)
    for node in range(nodes):
        accepted[node] = verdicts[node] and (parents[node] < 0 or accepted[parents[node]])
    return int(depths[:nodes][accepted].max())


def test_the_recording_commits_through_its_lookup_branch(tmp_path):
    """A draft that predicts another model misses where the outputs repeat; the branch
    does not.  Each recorded iteration advances the sequence by the deepest accepted
    path of its whole tree plus the bonus token, and on some iterations that path is the
    branch's, deeper than anything the draft's pool got accepted."""
    target = tiny_target()
    pair = ModelPair(target, MirrorDraft(tiny_target(seed=1)), CharTokenizer(), target_id="tiny-target",
                     draft_id="poor-draft", dtype="float32", chat_template=False)
    store = Store(tmp_path / "t.db")
    config = CollectConfig(full_shape(2, 2), (1,), max_new_tokens=48, context_length=160, lookup_depth=6)
    collect(pair, store, "test-device", tiny_prompts().head(4), config, progress=False)
    stored = store.traces("tiny-target", "poor-draft")
    checked = through_branch = 0
    for prompt in {s.prompt_ids for s in stored}:
        runs = sorted((s for s in stored if s.prompt_ids == prompt), key=lambda s: s.iteration)
        for this, after in zip(runs, runs[1:]):
            trace = this.trace
            committed = int(after.trace.context_lens[0] - trace.context_lens[0])
            assert committed == deepest_accepted(trace, trace.tree.size) + 1
            through_branch += deepest_accepted(trace, trace.tree.size) > deepest_accepted(trace, trace.drafted_nodes)
            checked += 1
    assert checked >= 20 and through_branch >= 3
