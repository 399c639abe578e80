"""The project's CPU stand-ins for the ``sgl_kernel`` ops that real SGLang's CPU path
needs: test infrastructure for running SGLang on a plain x86 CPU, pinned to
SGLang 0.5.23.

SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``, ``--attention-backend intel_amx``)
imports a handful of ops from the compiled ``sgl_kernel`` package with no fallback:
the KV pool's slot bookkeeping (``assign_req_to_token_pool_cpu``,
``copy_all_layer_kv_cache_cpu``), the EAGLE tree and cache-location kernels
(``build_tree_kernel_efficient_cpu``, ``verify_tree_greedy_cpu``,
``fill_bonus_tokens_cpu``, ``fill_accept_out_cache_loc_cpu``,
``assign_draft_cache_locs_contiguous_cpu``, ``assign_extend_cache_locs_cpu``,
``rotate_input_ids_cpu``, ``build_draft_decode_metadata_cpu``) and the ``intel_amx``
backend's attention (``torch.ops.sgl_kernel.decode_attention_cpu`` /
``extend_attention_cpu``).  Where that package is not installed, ``on_path/`` is put on
``PYTHONPATH`` and the ``sgl_kernel`` package it holds (and nothing else) answers instead:

* ``kernels`` -- the pure-PyTorch implementations, one small function per op, written
  from the ops' semantics (SGLang's callers and their Triton twins);
* ``sgl_kernel`` -- the importable shim: the Python functions SGLang imports by name,
  and the ``torch.ops.sgl_kernel.*`` schemas registered with ``torch.library``.

These are NOT SGLang's kernels and say nothing about their speed: a run on them is a
correctness run of SGLang's scheduling, speculative and attention logic on a CPU,
never a GPU result and never a performance number.  They deliberately do not define
``convert_weight_packed``, so SGLang's ``cpu_has_amx_support()`` stays False and the
model layers keep their pure-torch ``forward_native`` paths.  Schemas and semantics
follow SGLang 0.5.23's call sites; another SGLang version needs them re-checked.
"""

from __future__ import annotations

from pathlib import Path

#: The folder that contains the ``sgl_kernel`` shim package and nothing else.  A launcher
#: puts it on ``PYTHONPATH`` so SGLang's child processes import the shim as ``sgl_kernel``.
STANDIN_PATH: Path = Path(__file__).resolve().parent / "on_path"

__all__ = ["STANDIN_PATH"]
