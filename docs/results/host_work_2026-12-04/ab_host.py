"""A B = 1 step's host work (wall time per iteration outside the runner's target and draft
forwards) with this session's cuts and without them, in one process, alternating per
decode so the VM's drift hits both alike.  "before" puts back what the cuts replaced:
torch's blocked greedy read, the torch children read, a new chain mask per call, the
draft roots' advanced indexing, the lens tensor write, the catch-up's positions, the
verified tree's positions and the accepted paths' depth and values as torch ops (the
iteration's set-up through numpy stays in both arms).
Usage (repository root): ab_host.py POLICY ROUNDS [DATASET] [PROMPTS]"""
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs/results/host_path_b1_2026-11-29"))
sys.path.insert(0, str(ROOT))
from setup_b1 import setup  # noqa: E402

import torch  # noqa: E402
from sglang_cast.cast import VerifyTree, sampling  # noqa: E402
from sglang_cast.engine import StepLog  # noqa: E402
from sglang_cast.engine import runner as runner_module  # noqa: E402
from sglang_cast.engine.draft_expander import DraftExpander, torch_children  # noqa: E402
from sglang_cast.engine.runner import SpeculativeRunner  # noqa: E402
from sglang_cast.models import attention  # noqa: E402
from sglang_cast.models.eagle import rows_at  # noqa: E402
from sglang_cast.models.kv_cache import KVCache, to_device  # noqa: E402

policy, rounds = sys.argv[1], int(sys.argv[2])
dataset = sys.argv[3] if len(sys.argv) > 3 else "datasets/humaneval.jsonl"
prompts = int(sys.argv[4]) if len(sys.argv) > 4 else 8
run = setup("profiles/cpu-avx512.yaml", dataset, prompts, 2)
engine = run.engine(policy)
runner = engine.runner


def old_mask(batch, n, device):
    return torch.ones(n, n, dtype=torch.bool, device=device).tril().expand(batch, n, n)


def old_expander(self, batch):
    return DraftExpander(self.draft_forward, self.read_children, batch.slots, batch.context,
                         self.root_hidden[batch.device_slots], self.root_logits[batch.device_slots])


def old_catch_up(self, slots, tokens, features, start, counts):
    batch, n = tokens.shape
    positions = start.view(-1, 1) + torch.arange(n, device=self.device)
    mask = old_mask(batch, n, self.device)
    host_slots = torch.tensor(slots)
    last = self._on_device([c - 1 for c in counts])
    hidden, logits = self.draft_forward(tokens, features, positions, host_slots, mask, last)
    self.draft_cache.commit_lists(slots, [list(range(n))] * batch, counts)
    rows = to_device(host_slots, self.device)
    self.root_hidden[rows] = rows_at(hidden, last).squeeze(1)
    self.root_logits[rows] = logits.squeeze(1)


new_commit = KVCache.commit_lists


def old_commit(self, slots, keep, counts):
    """`KVCache.commit_lists` as it was (checks left out: the engine's commits are valid)."""
    lens = self.lens.tolist()
    rows, src, dst, new_lens = [], [], [], []
    for slot, offsets, count in zip(slots, keep, counts, strict=True):
        start = lens[slot]
        for j, k in enumerate(offsets[:count]):
            if k != j:
                rows.append(slot)
                src.append(start + k)
                dst.append(start + j)
        new_lens.append(start + count)
    if rows:
        rows, src, dst = (to_device(torch.tensor(t), self.device) for t in (rows, src, dst))
        self.k[:, rows, :, dst] = self.k[:, rows, :, src]
        self.v[:, rows, :, dst] = self.v[:, rows, :, src]
    self.lens[slots] = torch.tensor(new_lens, dtype=self.lens.dtype)


def old_accepted_from(vtree, result, trace=None):
    return runner_module.Accepted(result.paths, result.bonus, result.committed(vtree), int(vtree.depths.max()),
                                  vtree.values[:, 1:].sum(dim=1).tolist(), trace)


def old_positions(self, context_lens):
    return context_lens.view(-1, 1) + self.depths


NEW_ACCEPTED, NEW_POSITIONS = runner_module.accepted_from, VerifyTree.positions
NEW = {"greedy": runner.greedy_tokens, "read": getattr(runner, "read_children", None)}


def arm(before: bool) -> None:
    runner.greedy_tokens = sampling.greedy_tokens if before else NEW["greedy"]
    if NEW["read"] is not None:
        runner.read_children = torch_children(runner.draft.draft_to_target) if before else NEW["read"]
    runner_module.causal_tree_mask = old_mask if before else attention.causal_tree_mask
    SpeculativeRunner.expander = old_expander if before else NEW_EXPANDER
    SpeculativeRunner._draft_catch_up = old_catch_up if before else NEW_CATCH_UP
    KVCache.commit_lists = old_commit if before else new_commit
    runner_module.accepted_from = old_accepted_from if before else NEW_ACCEPTED
    VerifyTree.positions = old_positions if before else NEW_POSITIONS


NEW_EXPANDER, NEW_CATCH_UP = SpeculativeRunner.expander, SpeculativeRunner._draft_catch_up

inside = [0.0]


def timed(method):
    def wrapper(self, *a, **k):
        t = time.perf_counter()
        try:
            return method(self, *a, **k)
        finally:
            inside[0] += time.perf_counter() - t
    return wrapper


SpeculativeRunner.target_forward = timed(SpeculativeRunner.target_forward)
SpeculativeRunner.draft_forward = timed(SpeculativeRunner.draft_forward)
iterate = SpeculativeRunner.iterate
outside: list[float] = []


def timed_iterate(self, requests):
    inside[0] = 0.0
    t = time.perf_counter()
    out = iterate(self, requests)
    outside.append((time.perf_counter() - t - inside[0]) * 1e3)
    return out


SpeculativeRunner.iterate = timed_iterate
result = {name: {"outside": [], "step": [], "text": None} for name in ("before", "after")}
for _ in range(rounds):
    for name in ("before", "after"):
        arm(name == "before")
        outside.clear()
        log = StepLog()
        texts = [r.text for r in engine.generate(run.texts, run.params, on_step=log)]
        assert result[name]["text"] in (None, texts), f"{name}: outputs changed between rounds"
        result[name]["text"] = texts
        result[name]["outside"].append(statistics.median(outside))
        result[name]["step"].append(statistics.fmean(x.step_ms for x in log.records))
same = result["before"]["text"] == result["after"]["text"]
print(f"{policy} {Path(dataset).stem} x{prompts}, {rounds} rounds, outputs identical before/after: {same}")
for name, r in result.items():
    print(f"  {name:6s} outside forwards per iteration, median of round medians "
          f"{statistics.median(r['outside']):.3f} ms"
          f" (rounds {' '.join(f'{v:.3f}' for v in r['outside'])}); step mean {statistics.median(r['step']):.2f} ms")
diffs = [a - b for a, b in zip(result["after"]["outside"], result["before"]["outside"])]
print(f"  after - before per round: median {statistics.median(diffs):+.3f} ms"
      f" (min {min(diffs):+.3f}, max {max(diffs):+.3f})")
