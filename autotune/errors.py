"""The one exception type the CLI turns into a one-line message.

Everything a user can cause — a bad flag value, a locked or corrupted database,
a label that does not match the hardware — is raised as ``AutotuneError`` so the
CLI prints one line and exits with ``exit_code`` instead of a traceback.
"""

from __future__ import annotations

USAGE = 2  # bad input: flag values, paths, labels
RUNTIME = 1  # the environment failed: locked database, unreadable file


class AutotuneError(Exception):
    def __init__(self, message: str, exit_code: int = USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
