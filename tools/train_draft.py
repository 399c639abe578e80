"""Train the shipped EAGLE-3 draft head: the command the docs cite, kept as an entry
point to `sglang_cast.training` (same as ``python -m sglang_cast.training``; ``--help``
lists every flag)."""

from sglang_cast.training.cli import main

if __name__ == "__main__":
    main()
