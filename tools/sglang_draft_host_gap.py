"""Host time inside the SGLang plugin's draft loop, per drafted layer.

Every layer after the first waits for a device-to-host copy
(``drafting._to_host``).  ``draft_masked_tree`` then launches the layer's draft
forward at once (up to the predicted depth) and decides while the device drafts.
This times, with a zero-cost draft model on this machine's CPU:

* ``launch_us``: from a layer's copy (or the roots' copy) to its draft-forward
  launch, during which the device idles;
* ``decide_us``: from that launch to the launch of the next layer's ranking
  (``drafting._next_layer``), the host work (``keep``, ``grow``) the draft
  forward must outlast for the device not to idle after it;
* ``tree_us``: the tree's bookkeeping of a layer (``DraftTree.add_layer``), which
  runs after both launches, while the device drafts.

The copy's latency and the kernels' launch are not included.

    python tools/sglang_draft_host_gap.py --policy cast --batch-sizes 1,16,48 --topk 10 --depth 6

The profile's cost tables are used, with its tree shape replaced by ``--topk`` /
``--depth``, C1/C2 thresholds that prune nothing and a depth prediction of
``--depth``, so the ``cast`` family and ``eagle2`` draft every layer with every
forward launched early (``goodput`` has no thresholds and may stop early;
``layers_timed`` says how many layers were timed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from unittest import mock

import torch

from sglang_cast.cast import DraftTree, Thresholds, make_policy
from sglang_cast.cast.policies import POLICIES
from sglang_cast.flags import int_at_least, int_list
from sglang_cast.profile import load_profile
from sglang_cast.sglang_plugin import drafting


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="profiles/h100.yaml", help="profile YAML whose cost tables are used")
    parser.add_argument("--policy", default="cast", choices=sorted(n for n, p in POLICIES.items() if p.needs_draft))
    parser.add_argument("--batch-sizes", type=int_list(1, increasing=False), default=[1, 16, 48])
    parser.add_argument("--topk", type=int_at_least(1), default=10, help="candidates per layer (>= 1)")
    parser.add_argument("--depth", type=int_at_least(1), default=6, help="layers drafted (>= 2)")
    parser.add_argument("--repeats", type=int_at_least(1), default=40, help="drafts timed per batch size (>= 1)")
    args = parser.parse_args(argv)
    if args.depth < 2:
        parser.error(f"--depth must be >= 2 (a one-layer draft has no copy between layers), got {args.depth}")
    return args


def time_batch(settings, policy: str, batch: int, topk: int, depth: int, repeats: int) -> dict:
    """Median host microseconds per layer for drafts of ``batch`` sequences."""
    gen = torch.Generator().manual_seed(batch)
    probs = torch.rand(batch * topk, topk, generator=gen).sort(dim=1, descending=True).values / 2  # [B·K, K]
    tokens = torch.randint(0, 32000, (batch * topk, topk), generator=gen)
    stamps, launch, decide, tree = {}, [], [], []

    def to_host(*tensors):
        out = real_to_host(*tensors)
        stamps["copy"] = time.perf_counter()
        return out

    def step(frontier, rows, index):
        stamps["forward"] = time.perf_counter()
        launch.append(stamps["forward"] - stamps["copy"])
        return probs, tokens

    def next_layer(*args):
        decide.append(time.perf_counter() - stamps["forward"])
        return real_next_layer(*args)

    def add_layer(self, *layer):
        start = time.perf_counter()
        ids = real_add_layer(self, *layer)
        tree.append(time.perf_counter() - start)
        return ids

    real_to_host, real_next_layer, real_add_layer = drafting._to_host, drafting._next_layer, DraftTree.add_layer
    with (mock.patch.object(drafting, "_to_host", to_host), mock.patch.object(drafting, "_next_layer", next_layer),
          mock.patch.object(DraftTree, "add_layer", add_layer)):
        for _ in range(repeats):
            plan = make_policy(policy, settings).begin(batch, 1000)
            plan.bucket = replace(plan.bucket, shape=replace(plan.bucket.shape, top_k=topk, max_depth=depth),
                                  thresholds=Thresholds(1e-9, 1e-9, 1.0))
            roots = drafting.roots_to_host(probs[:batch], tokens[:batch], torch.arange(batch))
            stamps["copy"] = time.perf_counter()
            drafting.draft_masked_tree(plan, probs[:batch], tokens[:batch], roots, step, depth, expected_depth=depth)

    def median_us(times: list[float]) -> int:
        return round(statistics.median(times) * 1e6)

    return {"policy": policy, "batch_size": batch, "topk": topk, "depth": depth, "layers_timed": len(decide),
            "launch_us": median_us(launch), "decide_us": median_us(decide), "tree_us": median_us(tree)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        settings = load_profile(args.profile).profile.settings
    except (OSError, ValueError) as err:
        print(f"--profile {args.profile}: {err}", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(1)
    for batch in args.batch_sizes:
        print(json.dumps(time_batch(settings, args.policy, batch, args.topk, args.depth, args.repeats)))


if __name__ == "__main__":
    main()
