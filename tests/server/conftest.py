"""Fixtures of the server tests: the tiny target a module's servers share, and a
client of the module's ``live`` server."""

import pytest

from support.tiny import tiny_target


@pytest.fixture(scope="module")
def target():
    """One tiny random target per module (its servers and its references decode it)."""
    return tiny_target()


@pytest.fixture
def client(live):
    """An HTTP client of the module's ``live`` server (a module-scoped fixture there)."""
    with live.client() as c:
        yield c
