"""Tensor parallelism on CPU: every rank builds the same tree every iteration.

A multi-process harness (``torch.distributed``, gloo) runs the plugin's decision
path on 3 ranks with stand-in workers: ``CastDecider``, ``draft_masked_tree``
over a deterministic stand-in draft, the rerank, the verify layout, the profile
watcher and ``rank_sync.ProfileBroadcast`` over the group, exactly as
``CastWorker`` wires them.  What differs between ranks is what differs on GPUs:
timing (each rank sleeps a rank-seeded random time per iteration) and which
moment a file change is noticed (rank 0's watcher thread polls; the new profile
is written mid-run by another rank).  Each rank fingerprints every iteration's
(depth, width, verified tokens, their flat ids); the fingerprints must agree.

The planted faults must make it fail: every rank watching the file itself (the
reload lands at a different iteration per rank), or a decision reading a
rank-local timer.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import socket
import time
import traceback
import zlib
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from sglang_cast.cast import BucketSettings, CostModel, CostTable, PolicySettings, Thresholds, TreeShape, make_policy
from sglang_cast.profile import Profile, load_profile, save_profile
from sglang_cast.sglang_plugin.decider import CastDecider
from sglang_cast.sglang_plugin.drafting import draft_masked_tree, roots_to_host
from sglang_cast.sglang_plugin.plugin_config import StaticShape
from sglang_cast.sglang_plugin.rank_sync import ProfileBroadcast
from sglang_cast.sglang_plugin.reload import ProfileWatcher
from sglang_cast.sglang_plugin.verify_layout import verify_layout

VOCAB, TOPK = 32, 4
SHAPE = StaticShape(num_steps=6, topk=TOPK, num_draft_tokens=20)


def costs() -> CostModel:
    n = torch.arange(1, 65, dtype=torch.float64)
    target = CostTable(512, 4, (1, 8), torch.stack([10 + 0.6 * n**1.2, 30 + 2.0 * n**1.2]).unsqueeze(1).repeat(1, 4, 1))
    draft = CostTable(512, 4, (1, 8), torch.stack([1 + 0.2 * n, 2 + 0.5 * n]).unsqueeze(1).repeat(1, 4, 1))
    return CostModel(target=target, draft=draft)


def settings(c: tuple[float, float, float]) -> PolicySettings:
    return PolicySettings(buckets=(
        BucketSettings(2, TreeShape(top_k=4, max_depth=6, num_verify_tokens=20), Thresholds(*c), fifo_len=4),
        BucketSettings(1 << 30, TreeShape(top_k=3, max_depth=4, num_verify_tokens=12), Thresholds(*c), fifo_len=4),
    ), costs=costs())


BEFORE, AFTER = (0.3, 1.0, 0.8), (2.0, 3.0, 1.5)  # the reload changes what CAST keeps, stops and verifies


class StandInDraft:
    """A draft forward as the worker's ``_DraftForward`` returns it, the same on every
    rank (SGLang's all-gathered logits are): each row's children are a fixed function
    of its token.  ``[B·K]`` tokens -> ``[B·K, K]`` probabilities and tokens."""

    def __init__(self) -> None:
        table = torch.rand(VOCAB, VOCAB, generator=torch.Generator().manual_seed(11)) ** 6
        self.probs, self.tokens = torch.sort((table / table.sum(1, keepdim=True)).float(), dim=1, descending=True)

    def root_children(self, roots: torch.Tensor):
        return self.probs[roots, :TOPK], self.tokens[roots, :TOPK]

    def __call__(self, tokens: torch.Tensor, rows, step: int):
        return self.probs[tokens, :TOPK], self.tokens[tokens, :TOPK]


def iteration_fingerprint(decider: CastDecider, draft: StandInDraft, rng: random.Random, timer_noise: float,
                          rank_local_timer: bool) -> int:
    """One iteration of ``CastDraftWorker.draft`` minus the models: the batch comes from
    ``rng`` (the same on every rank, as SGLang's replicated scheduler's)."""
    batch = rng.choice([1, 2, 3, 5, 8])
    roots = torch.tensor([rng.randrange(VOCAB) for _ in range(batch)])
    plan = decider.begin(batch, rng.randrange(1, 2000))
    root_probs, root_tokens = draft.root_children(roots)
    host = roots_to_host(root_probs, root_tokens, roots)
    predicted = plan.predict_depth(host.values)
    if rank_local_timer and timer_noise > 0.5:  # planted: a decision reads this rank's timing
        predicted += 1
    depth = decider.depth(predicted)
    drafted = draft_masked_tree(plan, root_probs, root_tokens, host, draft, depth, predicted)
    width = decider.width(depth, plan.verify_count(drafted.tree), drafted.tree.size - 1)
    layout = verify_layout(drafted, width, depth)
    data = torch.cat([torch.tensor([depth, width]), layout.draft_tokens.flatten(), layout.top_scores_index.flatten()])
    return zlib.crc32(data.numpy().tobytes())


def rank_main(rank: int, world: int, jobs, out) -> None:
    """One rank process: runs every job it is sent (a port, profile path, iteration count
    and planted fault) until ``None``; a failure reaches the parent as its traceback,
    never as silence."""
    torch.set_num_threads(1)
    while (job := jobs.get()) is not None:
        try:
            out.put(run_rank(rank, world, *job))
        except BaseException:
            out.put((rank, "failed", traceback.format_exc()))
            raise


def run_rank(rank: int, world: int, port: int, profile: Path, iterations: int, fault: str) -> tuple:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        loaded = load_profile(profile)
        decider = CastDecider(make_policy("cast", loaded.profile.settings), SHAPE)
        leader = rank == 0
        sync = ProfileBroadcast(rank, lambda tensor: dist.broadcast(tensor, src=0), lambda raw: watcher.apply_bytes(raw))
        rank_local_reload = fault == "every rank watches the file"
        watcher = ProfileWatcher(loaded, decider.policy, SHAPE, poll_seconds=0.002,
                                 publish=None if rank_local_reload else (sync.offer if leader else None))
        if leader and not rank_local_reload:
            watcher.start()
        shared = random.Random(5)  # the replicated scheduler's batches
        noise = random.Random(1000 + rank)  # this rank's timing
        fingerprints, applied_at = [], []
        for i in range(iterations):
            if sync.step():  # CastWorker.activate_step_by_batch
                applied_at.append(i)
            if rank == world - 1 and i == iterations // 3:  # someone publishes a new profile mid-run
                save_profile(Profile("tp", "cpu", "analytic", settings(AFTER)), profile)
            # planted: each rank polls the file on its own clock (every 9, 21, 33 iterations: a
            # check reads and validates the whole profile, ~50 ms here)
            if rank_local_reload and i % (9 + 12 * rank) == 0:
                watcher.check_now()
            timer_noise = noise.random()
            if timer_noise > 0.97:
                time.sleep(timer_noise * 1e-3)
            fingerprints.append(iteration_fingerprint(decider, StandInDraft.shared, shared, timer_noise,
                                                      fault == "a decision reads a timer"))
        watcher.stop()
        versions = [watcher.loaded.version]
        return rank, fingerprints, applied_at, versions
    finally:
        dist.destroy_process_group()


StandInDraft.shared = StandInDraft()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """``world`` rank processes, spawned once and reused by every run (starting one
    imports torch: seconds each); each run is its own process group on a fresh port."""

    def __init__(self, world: int) -> None:
        # spawn, not fork: a forked child of a process whose torch thread pool already ran
        # (any earlier test in the same pytest run) deadlocks in its first parallel op.
        context = multiprocessing.get_context("spawn")
        self.world, self.out = world, context.Queue()
        self.jobs = [context.Queue() for _ in range(world)]
        self.processes = [context.Process(target=rank_main, args=(r, world, self.jobs[r], self.out))
                          for r in range(world)]
        for process in self.processes:
            process.start()

    def run(self, tmp_path: Path, iterations: int, fault: str = "") -> dict[int, tuple]:
        profile = save_profile(Profile("tp", "cpu", "analytic", settings(BEFORE)), tmp_path / "tp.yaml")
        port = free_port()
        for jobs in self.jobs:
            jobs.put((port, profile, iterations, fault))
        results = {}
        deadline = time.monotonic() + 120 + iterations * 0.05
        while len(results) < self.world:
            try:
                rank, *result = self.out.get(timeout=1.0)
            except queue.Empty:
                dead = [p.exitcode for p in self.processes if p.exitcode is not None]
                assert not dead, f"a rank exited with {dead} before reporting"
                assert time.monotonic() < deadline, f"ranks {sorted(set(range(self.world)) - set(results))} still running"
                continue
            assert result[0] != "failed", f"rank {rank} failed:\n{result[1]}"
            results[rank] = tuple(result)
        return results

    def close(self) -> None:
        for jobs in self.jobs:
            jobs.put(None)
        for process in self.processes:
            process.join(timeout=30)
            if process.exitcode is None:
                process.kill()
        assert all(process.exitcode == 0 for process in self.processes)


@pytest.fixture(scope="module")
def ranks():
    pool = Ranks(world=3)
    yield pool
    pool.close()


def diverged_iterations(results: dict[int, tuple]) -> int:
    reference = results[0][0]
    return sum(any(results[r][0][i] != reference[i] for r in results) for i in range(len(reference)))


@pytest.mark.slow
def test_every_rank_builds_the_same_tree_for_10000_iterations_with_noise_and_a_reload(tmp_path, ranks):
    results = ranks.run(tmp_path, iterations=10_000)
    assert diverged_iterations(results) == 0
    (applied,) = {tuple(results[r][1]) for r in results}  # the reload landed at the same iteration everywhere
    assert len(applied) == 1 and 10_000 // 3 < applied[0] < 10_000
    assert len({results[r][2][0] for r in results}) == 1  # and it is the same version
    assert len(set(results[0][0])) > 100  # guard: the trees vary


def test_three_ranks_agree_over_a_reload(tmp_path, ranks):
    """The 10,000-iteration run's quick form (the default test selection runs this one)."""
    results = ranks.run(tmp_path, iterations=600)
    assert diverged_iterations(results) == 0 and len(results[0][1]) == 1


@pytest.mark.parametrize("fault", ["every rank watches the file", "a decision reads a timer"])
def test_a_planted_rank_local_decision_makes_the_ranks_diverge(tmp_path, ranks, fault):
    results = ranks.run(tmp_path, iterations=600, fault=fault)
    assert diverged_iterations(results) > 0
