"""Our own CPU kernels (csrc/*.cpp): which CPU can run one, and building it once.

Each kernel is a C++ source compiled on first use with torch's extension builder (g++
and ninja) into ``<cache_root>/extensions/``; later processes load the built library,
which registers its ops under ``torch.ops.<namespace>``.  The GEMM libraries (AMX tiles,
VNNI) register the same two: ``int4_mm(x, blocks)`` and ``int8_mm(x, blocks, scales)``,
bf16 ``x`` ``[M, K]`` times weights packed in records of 64 output columns (``blocks``
``[N/64, K/32, record bytes]``) -> bf16 ``[M, N]``; models/cpu_layer.py's registers a
decoder layer's other work and a step's reads of its logits.  A CPU without the ISA flags
a kernel needs, or a machine without the toolchain, gets a ``ValueError`` naming the
weight format and the torch-kernel format to use instead (`CpuKernel.ensure_loaded`).
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..hardware import cpu_flags
from .cache import cache_root

log = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
OPENMP = ("-fopenmp",)  # compile and link flags of a library whose at::parallel_for should use threads
BLOCK_COLS, GROUP = 64, 32  # every kernel here streams records of 64 output columns x 32 inputs


def packable(out_features: int, in_features: int) -> bool:
    """Whether our kernels can hold a linear of this shape (whole blocks of 64 outputs and
    groups of 32 inputs: every linear of a model whose hidden sizes are multiples of 64)."""
    return out_features % BLOCK_COLS == 0 and in_features % GROUP == 0


def check_packable(fmt: str, out_features: int, in_features: int) -> None:
    """Refuse, naming the format, a linear our kernels cannot hold."""
    if not packable(out_features, in_features):
        raise ValueError(f"weight_format: {fmt}: a linear of {out_features} outputs x {in_features} inputs cannot "
                         f"be packed: outputs must be a multiple of {BLOCK_COLS} and inputs of {GROUP}")


@dataclass(frozen=True)
class CpuKernel:
    """One C++ kernel library: ``source`` (under csrc/) builds with ``compile_flags`` (and
    links with ``link_flags``) into ops under ``torch.ops.<namespace>`` and runs on CPUs with
    every flag of ``required_flags`` (/proc/cpuinfo names); ``linux_only`` says why it needs
    Linux, if it does.

    ``at::parallel_for`` splits work across torch's threads only in a library built with
    OpenMP (`OPENMP`: torch's own runtime, the libgomp it loaded, is the one used); without
    it every call runs on the calling thread."""

    namespace: str
    source: str
    required_flags: frozenset[str]
    compile_flags: tuple[str, ...]
    linux_only: str | None = None
    link_flags: tuple[str, ...] = ()

    def unavailable_reason(self, flags: frozenset[str] | None = None) -> str | None:
        """Why the kernel cannot run (``None``: it can).  ``flags``: another CPU's, checked
        for the ISA alone; on this machine (``None``) the kernel is also built or loaded
        (`load`), so a missing compiler is a reason too, not a failed model load later."""
        if self.linux_only and not sys.platform.startswith("linux"):
            return f"it needs Linux ({self.linux_only}), not {sys.platform}"
        missing = self.required_flags - (cpu_flags() if flags is None else flags)
        if missing:
            return f"this CPU lacks {', '.join(sorted(missing))}"
        if flags is None:
            try:
                self.load()
            except RuntimeError as err:
                return str(err)
        return None

    def load(self) -> None:
        """Build (first time, ~10-20 s) or load the library.  Raises ``RuntimeError``
        saying why when the CPU or the toolchain cannot."""
        _load(self)

    def ensure_loaded(self, fmt: str, fallback: str) -> None:
        """Load the library and its tracing shapes once per process; a CPU or toolchain
        that cannot run it is a ``ValueError`` naming ``fmt`` and the ``fallback`` format."""
        try:
            self.load()
        except RuntimeError as err:
            raise ValueError(f"weight_format: {fmt} cannot run here: {err}; use {fallback}") from err
        _register_fake(self.namespace)


@functools.cache
def _load(kernel: CpuKernel) -> None:
    reason = kernel.unavailable_reason(cpu_flags())  # the ISA alone: unavailable_reason() would build
    if reason is not None:
        raise RuntimeError(reason)
    from torch.utils import cpp_extension

    source = CSRC / kernel.source
    build = cache_root() / "extensions" / f"{source.stem}-torch{torch.__version__}"
    build.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load(name=kernel.namespace, sources=[str(source)], extra_cflags=["-O3", *kernel.compile_flags],
                           extra_ldflags=list(kernel.link_flags), build_directory=str(build), is_python_module=False,
                           verbose=False)
    except (OSError, RuntimeError, SystemError) as err:  # no compiler, no ninja, a failed build
        raise RuntimeError(f"building its kernel ({source.name}) in {build} failed; it needs g++ (GCC >= 11) "
                           f"and ninja: {err}") from err
    log.info("%s kernels loaded from %s", kernel.namespace, build)


@functools.cache
def _register_fake(namespace: str) -> None:
    """The two ops' output shapes, for torch.compile's tracing (models/compiled.py compiles
    packed formats)."""
    @torch.library.register_fake(f"{namespace}::int4_mm")
    def _(x: Tensor, blocks: Tensor) -> Tensor:
        return x.new_empty((x.shape[0], blocks.shape[0] * BLOCK_COLS))

    @torch.library.register_fake(f"{namespace}::int8_mm")
    def _(x: Tensor, blocks: Tensor, scales: Tensor) -> Tensor:
        return x.new_empty((x.shape[0], scales.shape[0]))
