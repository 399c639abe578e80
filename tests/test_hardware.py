"""The CPU's ISA class, read from its feature flags (what profiles and bench records name)."""

import pytest

from sglang_cast.hardware import ISA_CLASSES, cpu_flags, isa_class

SAPPHIRE_RAPIDS = frozenset("fpu sse2 avx avx2 fma f16c avx512f avx512_bf16 amx_tile amx_bf16 amx_int8".split())
ICE_LAKE = frozenset("fpu sse2 avx avx2 fma f16c avx512f avx512bw avx512_vnni".split())
EPYC_ZEN2 = frozenset("fpu sse2 avx avx2 fma f16c".split())


@pytest.mark.parametrize(("flags", "expected"), [
    (SAPPHIRE_RAPIDS, "amx"),
    (ICE_LAKE, "avx512"),
    (EPYC_ZEN2, "avx2"),
    (frozenset("fpu sse2 avx".split()), "other"),
    (frozenset(), "other"),
    # AMX needs both the tile unit and its bf16 instructions; int8 tiles alone are not bf16 matmul.
    (ICE_LAKE | {"amx_tile", "amx_int8"}, "avx512"),
])
def test_isa_class_from_flags(flags, expected):
    assert isa_class(flags) == expected


def test_this_machine_has_a_known_class():
    assert isa_class() in ISA_CLASSES
    if "avx2" in cpu_flags():
        assert isa_class() != "other"
