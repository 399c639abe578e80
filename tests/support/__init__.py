"""Helpers the tests share (no tests here): one module per family, imported as
``support.<module>`` (``tests`` is on pytest's ``pythonpath``).  Test modules import
from here and from ``tools``, never from one another."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
