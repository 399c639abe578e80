"""``cast-autotune collect``: decode a prompt set with full-expansion trace recording
(every node of an EAGLE-2 tree verified), the traces ``tune`` replays CAST trees in."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sglang_cast import hardware

from .. import report
from ..collect import CollectConfig, collect, full_shape
from ..options import DbOptions, ModelOptions
from ..prompts import load_prompts
from .common import load_pair, open_store, resolve_device


@dataclass(frozen=True, kw_only=True)
class CollectOptions(ModelOptions, DbOptions):
    dataset: Path | None  # None: autotune/prompts.txt
    num_prompts: int
    max_new_tokens: int
    batch_size: tuple[int, ...]  # one run per engine max batch size
    top_k: int
    max_depth: int
    lookup_depth: int  # the prompt-lookup branch recorded with every tree; 0: none
    context_length: int


def run(args: argparse.Namespace) -> int:
    options = CollectOptions.from_args(args)
    device = resolve_device(options)
    prompts = load_prompts(options.dataset).head(options.num_prompts)
    store = open_store(options)
    pair = load_pair(options, device)
    config = CollectConfig(full_shape(options.top_k, options.max_depth), options.batch_size, options.max_new_tokens,
                           options.context_length, options.lookup_depth)
    result = collect(pair, store, hardware.device_name(device), prompts, config, progress=not options.quiet)
    print(report.collected(result, prompts, options.batch_size, options.top_k, options.max_depth,
                                   options.lookup_depth, store))
    return 0
