"""Entry point of the ``sglang.srt.plugins`` group (see ``pyproject.toml``).

SGLang calls :func:`register` in every one of its processes (``load_plugins``);
it registers CAST and GOODPUT with ``SpeculativeAlgorithm.register``, after
checking that the installed SGLang has everything the plugin uses
(``contract``; a mismatch raises one line, which SGLang logs, and the
algorithms stay unregistered).  The worker module itself is imported only when
SGLang asks for a worker.
"""

from __future__ import annotations

from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import get_spec

from .contract import check_installed_sglang
from .plugin_config import POLICY_OF_ALGORITHM
from .spec import CastSpecAlgo, validate_server_args


def _worker_class(server_args) -> type:
    from .worker import CastWorker

    return CastWorker


def register() -> None:
    """Idempotent: a second call in the same process changes nothing."""
    check_installed_sglang()
    for name in POLICY_OF_ALGORITHM:
        if get_spec(name) is None:
            SpeculativeAlgorithm.register(name, supports_overlap=True, validate_server_args=validate_server_args,
                                          spec_class=CastSpecAlgo)(_worker_class)
