"""What `autotune.sglang_backend.in_child_process` runs in the spawned processes of
tests/autotune/test_autotune_sglang_backend.py: a module of its own, so a child
imports this and the autotune errors, not a whole test module and its helpers."""

from autotune.errors import AutotuneError


def fails_with_an_autotune_error(message: str) -> None:
    raise AutotuneError(message, 1)


def crashes() -> None:
    raise SystemExit(3)
