"""Host-overhead tables the cost tests build (`sglang_cast.cast.OverheadTable`)."""

import torch

from sglang_cast.cast import OverheadTable


def overhead(plain=0.0, spec_base=0.0, per_layer=0.0, per_token=0.0, sizes=(1,), buckets=1) -> OverheadTable:
    cell = torch.tensor([plain, spec_base, per_layer, per_token], dtype=torch.float64)
    return OverheadTable(1 << 20, buckets, sizes, cell.expand(len(sizes), buckets, 4).clone())
