"""``cast-autotune profile --backend sglang``: what is checked before anything
loads, the identifiers its rows are keyed by, and its timers.

The checks run first and cost nothing: SGLang's model runner needs a CUDA GPU
(its CPU runtime needs sgl-kernel's CPU kernels, which PyPI does not ship), and
an SGLang deployment serves a Hugging Face target with an EAGLE/EAGLE-3 head, so
both paths are required.  Only then is SGLang imported, its contract checked
and its workers built (``sglang_cast.sglang_plugin.profile_forwards``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .errors import RUNTIME, AutotuneError
from .grid import ProfileGrid
from .profiler import TimerFactory
from .space import SearchSpace
from .store import Setup

SGLANG = "sglang"


@dataclass(frozen=True)
class SGLangModels:
    """The pair an SGLang deployment serves, as paths and as measurement ids."""

    model_path: str
    draft_path: str
    target_id: str
    draft_id: str


def check_sglang_backend(model_path: str | None, draft_path: str | None, device: str | None,
                         cuda_available: bool) -> SGLangModels:
    """Refuse, in one line, what ``--backend sglang`` cannot profile, before any
    model or SGLang module loads."""
    if device == "cpu" or not cuda_available:
        where = "--device cpu was given" if device == "cpu" else "no CUDA device is available here"
        raise AutotuneError(f"--backend sglang: SGLang's model runner needs a CUDA GPU and {where} (its CPU runtime "
                            "needs sgl-kernel CPU kernels that PyPI does not ship); run this command on the GPU "
                            "that will serve, or profile the native engine with --backend native")
    if not model_path:
        raise AutotuneError("--model-path: required with --backend sglang (the Hugging Face model directory the "
                            "deployment serves; the embedded model runs on the native engine only)")
    if not draft_path:
        raise AutotuneError("--draft-path: required with --backend sglang (the EAGLE or EAGLE-3 head directory "
                            "the deployment serves with)")
    from .models import draft_model_id, target_model_id

    target, draft = Path(model_path).expanduser(), Path(draft_path).expanduser()
    for flag, path in (("--model-path", target), ("--draft-path", draft)):
        if not (path / "config.json").is_file():
            raise AutotuneError(f"{flag}: {path} is not a model directory with a config.json")
    # The ids load_model_pair gives the same paths, so `tune --backend sglang` finds these rows.
    return SGLangModels(str(target), str(draft), target_model_id(model_path), draft_model_id(draft))


def sglang_setup(models: SGLangModels, device_name: str, dtype: str) -> Setup:
    return Setup.current(device_name, models.target_id, models.draft_id, dtype, backend=SGLANG)


def sglang_timers(models: SGLangModels, grid: ProfileGrid, dtype: str) -> TimerFactory:
    """Build SGLang's workers sized for ``grid`` and return timers over them."""
    if importlib.util.find_spec("sglang") is None:
        raise AutotuneError("--backend sglang: SGLang is not installed in this environment "
                            "(pip install -e '.[sglang]' on the GPU machine)", RUNTIME)
    from sglang_cast.sglang_plugin.contract import ContractError, check_installed_sglang

    try:
        check_installed_sglang()
    except ContractError as err:
        raise AutotuneError(f"--backend sglang: {err}", RUNTIME) from None
    from sglang_cast.sglang_plugin.profile_forwards import SGLangForwards, SGLangProfileLaunch, SGLangRoleTimer

    # The tree's branching changes which mask bits are set, not the verify's cost;
    # the tuner's default top-k lays the trees out as a tuned profile would.  KV is
    # reserved for the widest forward of either role.
    widest = max(grid.max_n, grid.draft_max_n)
    launch = SGLangProfileLaunch(models.model_path, models.draft_path, dtype,
                                 context_length=max(grid.contexts) + widest, max_batch_size=max(grid.batch_sizes),
                                 topk=SearchSpace().top_k, max_n=widest)
    forwards = SGLangForwards(launch)
    return lambda role, max_batch, capacity: SGLangRoleTimer(forwards, role)
