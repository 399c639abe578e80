"""What every format of our own kernels shares (models/cpu_kernel.py): the AMX tile formats
(``int4amx``, ``int8amx``) and the VNNI formats (``int4vnni``, ``int8vnni``) parse as
formats of their own, fall back to torch's kernel on a linear they cannot hold, and are
refused with a clear error, naming the fallback, on a CPU that cannot run them."""

from __future__ import annotations

import pytest
import torch

from sglang_cast.models import amx_tiles, cpu_kernel, vnni_dot
from sglang_cast.models.weights import Format, Int4Linear, Int8Linear, WeightFormat, pack_linear

OURS = [(Format.INT4_AMX, Format.INT4), (Format.INT8_AMX, Format.INT8),
        (Format.INT4_VNNI, Format.INT4), (Format.INT8_VNNI, Format.INT8)]


@pytest.mark.parametrize("fmt, twin", OURS)
def test_a_linear_our_kernels_cannot_hold_runs_torch_kernel_alone(fmt: Format, twin: Format) -> None:
    assert fmt.on_torch_kernels == twin and twin.on_torch_kernels == twin
    assert type(pack_linear(fmt, torch.randn(96, 64), None)) is (Int4Linear if fmt.is_int4 else Int8Linear)


@pytest.mark.parametrize("fmt, twin", OURS)
def test_our_format_on_a_cpu_that_cannot_run_it_is_a_clear_value_error(monkeypatch, fmt: Format, twin: Format) -> None:
    monkeypatch.setattr(cpu_kernel, "cpu_flags", lambda: frozenset({"avx2"}))
    cpu_kernel._load.cache_clear()
    try:
        with pytest.raises(ValueError, match=f"weight_format: {fmt.value} cannot run here: this CPU lacks .*"
                                             f"use {twin.value}$"):
            pack_linear(fmt, torch.randn(64, 64), None)
    finally:
        cpu_kernel._load.cache_clear()


def test_unavailable_reason_names_the_missing_flags() -> None:
    assert "amx_bf16, amx_tile" in amx_tiles.unavailable_reason(frozenset({"avx512bw", "avx512_bf16"}))
    assert amx_tiles.unavailable_reason(frozenset({"amx_tile", "amx_bf16", "avx512_bf16", "avx512bw"})) is None
    avx512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
    assert "avx512_bf16, avx512_vnni" in vnni_dot.unavailable_reason(avx512)
    assert vnni_dot.unavailable_reason(avx512 | {"avx512_vnni", "avx512_bf16"}) is None


@pytest.mark.parametrize("spec, linears, lm_head, draft", [
    ("int4amx/int8amx:dense32:bf16+int8amx", Format.INT4_AMX, Format.INT8_AMX, Format.INT8_AMX),
    ("int4vnni/int8vnni:dense32:bf16+int8vnni", Format.INT4_VNNI, Format.INT8_VNNI, Format.INT8_VNNI)])
def test_our_formats_parse_as_formats_of_their_own(spec: str, linears: Format, lm_head: Format, draft: Format) -> None:
    fmt = WeightFormat.parse(spec)
    assert (fmt.linears, fmt.lm_head, fmt.draft.linears) == (linears, lm_head, draft) and str(fmt) == spec
    assert linears.is_int4 and not lm_head.is_int4 and Format.INT4.is_int4 and not Format.INT8.is_int4


def test_a_format_names_why_its_kernels_cannot_run_and_its_torch_twin() -> None:
    fmt = WeightFormat.parse("int4vnni/int8+int8amx")
    assert fmt.unavailable_reason(frozenset()) == (f"{vnni_dot.unavailable_reason(frozenset())}; "
                                                   f"{amx_tiles.unavailable_reason(frozenset())}")
    assert WeightFormat.parse("int4/int8+int8").unavailable_reason(frozenset()) is None
    assert str(fmt.on_torch_kernels()) == "int4/int8+int8"
