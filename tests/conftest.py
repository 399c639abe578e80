"""Temporary bridge while test modules still import one another across the new
folders (removed when the shared helpers move to ``tests/support``)."""

import sys
from pathlib import Path

sys.path.extend(str(part) for part in sorted(Path(__file__).parent.iterdir())
                if part.is_dir() and part.name not in ("support", "__pycache__"))
