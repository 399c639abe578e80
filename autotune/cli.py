"""``cast-autotune``: parse the command line, run the command, map its errors to exit codes.

A command is read in this order: its flags in `autotune.parser` (types from
`sglang_cast.flags`), then ``autotune/commands/<command>.py``, whose ``run`` builds
the command's one options dataclass (groups in `autotune.options`) and prints
through `autotune.report`.  A bad flag value exits 2 in argparse, before any
command runs; an `AutotuneError` is one line on stderr and its exit code (2 bad
input, 1 the environment failed); Ctrl-C keeps what was committed and exits 130.
"""

from __future__ import annotations

import sys
from importlib import import_module

from .errors import AutotuneError
from .parser import PROG, build_parser

__all__ = ["build_parser", "main"]

INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # Only the chosen command's module is imported (plot's matplotlib stays off the other commands).
        return import_module(f"{__package__}.commands.{args.command}").run(args)
    except AutotuneError as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted; everything committed so far is kept (rerun to resume)",
              file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
