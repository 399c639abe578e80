"""Real SGLang 0.5.23 on a CPU: the three things its CPU engine needs that a plain
install on an x86 machine without AMX does not give it, and nothing else.

1. ``SGLANG_USE_CPU_ENGINE=1``: without it ``is_cpu()`` is False and SGLang takes
   its CUDA paths (``srt/utils/common.py``, ``is_cpu``).
2. The ``sgl_kernel`` ops its CPU path imports with no fallback (the KV pool's
   index writes, the EAGLE tree kernels, the ``intel_amx`` backend's attention):
   the project's pure-torch stand-ins (`cpu_standins`), put on ``PYTHONPATH`` so
   every SGLang process (scheduler, detokenizer, the launcher itself) imports them
   before SGLang's own modules do.  They are test infrastructure for running SGLang
   on a CPU, not SGLang's kernels; where a real ``sgl_kernel`` is installed it is used.
3. ``--attention-backend intel_amx`` kept on a CPU without AMX: SGLang rewrites it to
   ``torch_native`` there (``srt/arg_groups/overrides.py``,
   ``_attention_backend_platform_fallbacks``), and its EAGLE refuses ``torch_native``
   ("EAGLE is not supported in decode attention backend torch_native",
   ``srt/speculative/draft_utils.py``).  The platform's ``has_amx`` is overridden in
   the launcher's process while it resolves the arguments and runs the server (SGLang
   resolves them as the server starts); the scheduler processes never see the
   override, and the model layers still take their
   ``forward_native`` paths, because the stand-ins define no ``convert_weight_packed``
   (``cpu_has_amx_support``).

Nothing here edits SGLang's files.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"
CPU_ATTENTION_BACKEND = "intel_amx"


def cpu_server_flags(argv: list[str] = ()) -> list[str]:
    """SGLang flags every server on the CPU engine runs with, those ``argv`` does not
    already give: the ``intel_amx`` backend (EAGLE's tree attention, point 3 above),
    no CUDA graphs (SGLang's CPU runner captures none, but a resolved graph config makes
    EAGLE's runtime-state builder ask the backend for graph state:
    ``build_adaptive_runtime_state`` raises NotImplementedError) and a scheduler that
    sleeps when idle (one polling idle server made a 2-core machine's decoding minutes
    slow)."""
    wanted = (("--device", "cpu"), ("--attention-backend", CPU_ATTENTION_BACKEND), ("--disable-cuda-graph",),
              ("--sleep-on-idle",))
    return [part for flag in wanted if flag[0] not in argv for part in flag]


def real_sgl_kernel_installed() -> bool:
    """Whether a real ``sgl_kernel`` (not the stand-in) is importable."""
    from .cpu_standins import STANDIN_PATH

    spec = importlib.util.find_spec("sgl_kernel")
    return spec is not None and not str(spec.origin or "").startswith(str(STANDIN_PATH))


def enter_cpu_engine() -> None:
    """Set up this process and the SGLang processes it starts for the CPU engine.
    Must run before anything imports SGLang (``is_cpu`` is cached on first use)."""
    os.environ[CPU_ENGINE_ENV] = "1"
    if real_sgl_kernel_installed():
        return
    from .cpu_standins import STANDIN_PATH

    path = str(STANDIN_PATH)
    entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if path not in entries:
        os.environ["PYTHONPATH"] = os.pathsep.join([path, *entries])
    if path not in sys.path:
        sys.path.insert(0, path)


@contextmanager
def intel_amx_kept() -> Iterator[None]:
    """Resolve SGLang's server arguments with ``--attention-backend intel_amx`` left
    as given on a CPU without AMX (see the module docstring, point 3)."""
    from sglang.srt.runtime_context import override_platform

    with override_platform(has_amx=True):
        yield
