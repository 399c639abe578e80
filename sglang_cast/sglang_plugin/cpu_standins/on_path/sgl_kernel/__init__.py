"""``sgl_kernel`` STAND-IN: not SGLang's compiled kernel package.

This package is the sglang-cast project's test shim, importable as ``sgl_kernel``
when its parent folder (``sglang_cast.sglang_plugin.cpu_standins.STANDIN_PATH``) is
on ``PYTHONPATH``.  It gives real SGLang 0.5.23's CPU path the few ``sgl_kernel`` ops
it imports with no fallback, implemented in plain PyTorch (``cpu_standins/kernels.py``,
outside that folder), so SGLang can run on a CPU without the compiled package.
Results are correctness-only; nothing run on it is a GPU or performance result.

Two surfaces, as the real package has them:

* Python functions SGLang imports by name (``from sgl_kernel import X``); each calls
  the matching ``torch.ops.sgl_kernel.X``.
* ``torch.ops.sgl_kernel.<name>`` ops, registered here with ``torch.library``
  (namespace ``sgl_kernel``, CPU kernels; arguments the op writes are marked ``(a!)``).
  An op that is already registered (a real ``sgl_kernel`` loaded first, or this file
  imported under a second name) is left as it is.

Deliberately absent: ``convert_weight_packed`` (SGLang's ``cpu_has_amx_support()``
tests for it; without it the model layers take their pure-torch paths) and every other
AMX/weight-packing op.  Imports only torch and the kernels module.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

try:  # the installed project (the usual case: sglang_cast is installed in SGLang's venv)
    from sglang_cast.sglang_plugin.cpu_standins import kernels as _k
except ImportError:  # a process that only has this folder on its path: load the sibling file
    _KERNELS_FILE = Path(__file__).resolve().parent.parent / "kernels.py"
    _spec = importlib.util.spec_from_file_location("_sglang_cast_cpu_standin_kernels", _KERNELS_FILE)
    _k = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _k
    _spec.loader.exec_module(_k)

__version__ = "0.0.0+sglang-cast-cpu-standin"
IS_STANDIN = True

# name -> (schema, kernel).  Schemas follow SGLang 0.5.23's call sites (argument order
# and types as its callers pass them); "(a!)" marks the tensors the op writes.
_SCHEMAS: dict[str, tuple[str, object]] = {
    "assign_req_to_token_pool_cpu": (
        "assign_req_to_token_pool_cpu(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor out_cache_loc, int pool_len) -> ()",
        _k.assign_req_to_token_pool),
    "assign_extend_cache_locs_cpu": (
        "assign_extend_cache_locs_cpu(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor(a!) out_cache_loc, int pool_len) -> ()",
        _k.assign_extend_cache_locs),
    "assign_draft_cache_locs_contiguous_cpu": (
        "assign_draft_cache_locs_contiguous_cpu(Tensor req_pool_indices, Tensor req_to_token, Tensor seq_lens, "
        "Tensor(a!) out_cache_loc, int pool_len, int topk, int num_steps) -> ()",
        _k.assign_draft_cache_locs_contiguous),
    "build_draft_decode_metadata_cpu": (
        "build_draft_decode_metadata_cpu(Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, int topk, "
        "int num_steps, int pool_len) -> Tensor",
        _k.build_draft_decode_metadata),
    "copy_all_layer_kv_cache_cpu": (
        # The buffers are written through the raw pointers in data_ptrs, which a schema cannot name.
        "copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()",
        _k.copy_all_layer_kv_cache),
    "fill_bonus_tokens_cpu": (
        "fill_bonus_tokens_cpu(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, "
        "int accept_stride) -> ()",
        _k.fill_bonus_tokens),
    "fill_accept_out_cache_loc_cpu": (
        "fill_accept_out_cache_loc_cpu(Tensor accept_index, Tensor out_cache_loc, "
        "Tensor(a!) accept_out_cache_loc) -> ()",
        _k.fill_accept_out_cache_loc),
    "rotate_input_ids_cpu": (
        "rotate_input_ids_cpu(Tensor(a!) input_ids, Tensor extend_start_loc, Tensor extend_seq_lens, "
        "Tensor topk_index, Tensor? select_index) -> ()",
        _k.rotate_input_ids),
    "build_tree_kernel_efficient_cpu": (
        "build_tree_kernel_efficient_cpu(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, "
        "Tensor(a!) tree_mask, Tensor(b!) positions, Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
        "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()",
        _k.build_tree_kernel_efficient),
    "verify_tree_greedy_cpu": (
        "verify_tree_greedy_cpu(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, "
        "Tensor candidates, Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, "
        "Tensor target_predict) -> ()",
        _k.verify_tree_greedy),
    "decode_attention_cpu": (
        "decode_attention_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float k_scale, float v_scale, "
        "Tensor(c!) output, Tensor? key, Tensor? value, Tensor? loc, Tensor attn_logits, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross_attention, "
        "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()",
        _k.decode_attention),
    "extend_attention_cpu": (
        "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
        "Tensor k_buffer, Tensor v_buffer, float k_scale, float v_scale, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, "
        "int max_len_extend, float sm_scale, float logit_cap, bool is_cross_attention, int sliding_window_size, "
        "Tensor? encoder_lens, Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()",
        _k.extend_attention),
}


def _registered(name: str) -> bool:
    return hasattr(torch.ops.sgl_kernel, name)


# Kept at module level: dropping the Library object would unregister its ops.
_LIB = torch.library.Library("sgl_kernel", "FRAGMENT")
REGISTERED: tuple[str, ...] = ()
for _name, (_schema, _fn) in _SCHEMAS.items():
    if _registered(_name):
        continue
    _LIB.define(_schema)
    _LIB.impl(_name, _fn, "CPU")
    REGISTERED += (_name,)
del _name, _schema, _fn


# ---- the Python-level functions SGLang imports (`from sgl_kernel import X`) ----
def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len):
    torch.ops.sgl_kernel.assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                                      out_cache_loc, pool_len)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len):
    torch.ops.sgl_kernel.assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                                      out_cache_loc, pool_len)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk,
                                           num_steps):
    torch.ops.sgl_kernel.assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens,
                                                                out_cache_loc, pool_len, topk, num_steps)


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps, pool_len):
    return torch.ops.sgl_kernel.build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk,
                                                                num_steps, pool_len)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    torch.ops.sgl_kernel.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    torch.ops.sgl_kernel.fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride)


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    torch.ops.sgl_kernel.fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc)


def rotate_input_ids_cpu(input_ids, extend_start_loc, extend_seq_lens, topk_index, select_index=None):
    torch.ops.sgl_kernel.rotate_input_ids_cpu(input_ids, extend_start_loc, extend_seq_lens, topk_index,
                                              select_index)


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                    retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
                                    draft_token_num, tree_mask_mode):
    torch.ops.sgl_kernel.build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask,
                                                         positions, retrive_index, retrive_next_token,
                                                         retrive_next_sibling, topk, depth, draft_token_num,
                                                         int(tree_mask_mode))


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                           retrive_next_sibling, target_predict):
    torch.ops.sgl_kernel.verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                                retrive_next_token, retrive_next_sibling, target_predict)


__all__ = [
    "assign_req_to_token_pool_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "build_draft_decode_metadata_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_bonus_tokens_cpu",
    "fill_accept_out_cache_loc_cpu",
    "rotate_input_ids_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
]
