"""``python -m sglang_cast.training``: the whole pipeline; ``--help`` lists every flag."""

from .cli import main

main()
