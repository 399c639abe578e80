"""``cast-autotune daemon``: re-profile and re-tune on a schedule, when traces arrive,
or when a followed server's live costs drift (autotune/daemon.py runs the steps)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ..daemon import Daemon, DaemonConfig, ServerWatch
from ..errors import USAGE, AutotuneError
from ..options import (DbOptions, GridOptions, LabelOptions, ModelOptions, OverheadOptions, SpaceOptions,
                       WeightFormatOptions)
from ..prompts import load_prompts
from .common import checked_label, current_setup, formats_for, load_pair, open_store, resolve_device, tune_config


@dataclass(frozen=True, kw_only=True)
class DaemonOptions(LabelOptions, ModelOptions, WeightFormatOptions, GridOptions, OverheadOptions, SpaceOptions,
                    DbOptions):
    interval: float  # seconds between scheduled steps
    poll: float  # seconds between trace-count checks
    once: bool
    server_url: str | None
    drift_margin: float
    server_api_key: str | None


def run(args: argparse.Namespace) -> int:
    options = DaemonOptions.from_args(args)
    device = resolve_device(options)
    label = checked_label(options, device)
    weight_formats = formats_for(options, device)
    config = DaemonConfig(tune=tune_config(options, label, weight_formats), grid=options.profile_grid(),
                          interval_s=options.interval, poll_s=options.poll, once=options.once,
                          profile_max_age=options.profile_max_age, server=server_watch(options),
                          overhead_warmup=options.overhead_warmup, overhead_steps=options.overhead_steps)
    prompts = load_prompts(options.dataset)
    store = open_store(options)
    pair = load_pair(options, device)  # the fp32 reference: traces are keyed by it
    formats = {}
    for fmt in weight_formats:
        fmt_pair = pair if fmt == "fp32" else load_pair(options, device, fmt)
        formats[fmt] = (fmt_pair, current_setup(fmt_pair, device))
    daemon = Daemon(pair, store, current_setup(pair, device), config, prompts, progress=not options.quiet,
                    formats=formats)
    daemon.install_signal_handlers()
    daemon.run()
    return 0


def server_watch(options: DaemonOptions) -> ServerWatch | None:
    """``--server-url``: the serving instance whose live calibration the daemon follows."""
    if options.server_url is None:
        if options.server_api_key is not None:
            raise AutotuneError("--server-api-key: needs --server-url", USAGE)
        return None
    try:
        return ServerWatch(options.server_url, options.drift_margin, options.server_api_key)
    except ValueError as err:
        raise AutotuneError(f"--server-url: {err}", USAGE) from None
