"""The EAGLE-3 head as training sees it: a fresh one, an exported one read back for
``--init-head``, and the export stage that writes the trained one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor

from sglang_cast.models import DraftConfig, Eagle3Draft, ModelConfig, save_draft
from sglang_cast.models.loader import check_state_dict

from .target import Target

MAX_HEAD_BYTES = 20_000_000  # a shipped head's budget (sglang_cast/assets); larger ones train and export


def new_draft(target: Target, d2t: Tensor, t2d: Tensor) -> Eagle3Draft:
    """A fresh EAGLE-3 head with PyTorch's default initialisation.

    Copying the target's last layer, final norm and embedding rows into the head was
    measured against this on the same data (80 steps): it reached a lower
    cross-entropy but a worse top-1 accuracy at every unrolled step (0.16 vs 0.19 at
    step 0, equal LR), and top-1 is what acceptance counts; see docs/draft_head.md.
    """
    layer = ModelConfig.from_hf({**target.config.to_hf(), "num_hidden_layers": 1})
    draft = Eagle3Draft(DraftConfig("eagle3", layer, fc_bias=False, draft_vocab_size=d2t.numel()), target.model)
    draft.d2t.copy_(d2t)
    draft.t2d.copy_(t2d)
    return draft


def head_state(path: Path, target: Target) -> dict[str, Tensor]:
    """An exported EAGLE-3 head's tensors, checked against the target, in float32."""
    path = path.expanduser()
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise SystemExit(f"--init-head: {weights} not found; pass a directory written by this tool's export")
    state = load_file(weights)
    if "d2t" not in state or "t2d" not in state:
        raise SystemExit(f"--init-head: {path} is not an EAGLE-3 head with a draft vocab (no d2t / t2d)")
    if state["t2d"].numel() != target.config.vocab_size:
        raise SystemExit(f"--init-head: {path} was trained for a target vocab of {state['t2d'].numel()} tokens, "
                         f"this target has {target.config.vocab_size}")
    try:  # the head training would build for this target and vocab must take these tensors as they are
        check_state_dict(new_draft(target, state["d2t"], state["t2d"]), state, weights)
    except ValueError as err:
        raise SystemExit(f"--init-head: {err}") from None
    return {key: value.float() if value.is_floating_point() else value for key, value in state.items()}


def export_head(target: Target, vocab_dir: Path, train_dir: Path, output: Path) -> int:
    """The export stage: the trained head's checkpoint as an exported head (`write_head`)."""
    vocab = torch.load(vocab_dir / "vocab.pt")
    size = write_head(target, vocab["d2t"], vocab["t2d"], torch.load(train_dir / "draft.pt"), output)
    over = f"; over the {MAX_HEAD_BYTES / 1e6:.0f} MB a shipped head may take" if size > MAX_HEAD_BYTES else ""
    print(f"[export] {output} ({size / 1e6:.1f} MB{over})", flush=True)
    return size


def write_head(target: Target, d2t: Tensor, t2d: Tensor, state: dict[str, Tensor], output: Path) -> int:
    """Write a head's ``state`` as fp16 safetensors + config.json (what the engine and
    SGLang load), replacing ``output`` in one rename; fp16 keeps the 8k-vocab head under
    the asset budget (`MAX_HEAD_BYTES`).  Returns its size in bytes."""
    draft = new_draft(target, d2t.cpu(), t2d.cpu())
    draft.load_state_dict({k: v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu()
                           for k, v in state.items()}, assign=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_draft(draft, tmp)
    size = sum(p.stat().st_size for p in tmp.iterdir())
    shutil.rmtree(output, ignore_errors=True)
    os.replace(tmp, output)
    return size

