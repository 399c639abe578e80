"""The CPU's ISA class, read from its feature flags (what profiles and bench records name),
and the machine identity a profile records so a server on another machine can say so."""

from dataclasses import replace

import pytest

from sglang_cast.hardware import ISA_CLASSES, MachineIdentity, cpu_flags, cpu_name, isa_class

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


# ------------------------------------------------------------ machine identity
EPYC_OLD = MachineIdentity("cpu", "AMD EPYC", 2, "avx512", "AuthenticAMD", "25", "17", "0")
EPYC_NEW = MachineIdentity("cpu", "AMD EPYC", 2, "avx512", "AuthenticAMD", "26", "2", "1")


def test_two_cpus_of_one_name_and_isa_class_differ_by_family_and_model():
    """The case issue 47 met: both "AMD EPYC", both avx512, one profile charging 1.74x."""
    assert EPYC_OLD.difference(EPYC_NEW) == (
        "same ISA class (avx512), other CPU (family 25 -> 26, model 17 -> 2, stepping 0 -> 1): the cost tables' "
        "scale may be off here; re-tune (cast-autotune profile + tune) to know")
    assert EPYC_OLD.difference(EPYC_OLD) is None


@pytest.mark.parametrize("recorded, here, verdict", [
    (EPYC_OLD, replace(EPYC_OLD, isa_class="avx2"), "measured on a CPU of ISA class avx512, this one is avx2: "
                                                    "re-tune recommended"),
    (EPYC_OLD, MachineIdentity("cuda", "NVIDIA H100", 16, gpu_memory_gib=79.1), "measured on cpu, serving on cuda"),
    (MachineIdentity("cuda", "NVIDIA H200"), MachineIdentity("cuda", "NVIDIA H100 80GB HBM3"),
     "measured on NVIDIA H200, this GPU is NVIDIA H100 80GB HBM3: re-tune recommended"),
    (EPYC_OLD, replace(EPYC_OLD, cpu_count=4), "other CPU (cpus 2 -> 4)"),
])
def test_another_class_or_gpu_says_re_tune_and_another_model_says_the_scale_may_be_off(recorded, here, verdict):
    assert verdict in recorded.difference(here)


def test_an_older_profiles_partial_record_compares_only_what_it_holds():
    older = MachineIdentity.from_dict({"device_type": "cpu", "cpu_count": 2, "torch_threads": 2,
                                       "isa_class": "avx512"})
    assert older.difference(EPYC_NEW) is None
    assert MachineIdentity.from_dict(EPYC_NEW.to_dict()) == EPYC_NEW


def test_this_machines_identity_names_its_cpu():
    here = MachineIdentity.current("cpu")
    assert here.device_type == "cpu" and here.name == cpu_name() and here.isa_class == isa_class()
    assert here.difference(here) is None


def test_a_profile_from_another_machine_is_named_when_the_server_loads_it(tmp_path, caplog):
    from sglang_cast import launch_server
    from sglang_cast.profile import PROFILE_DIR, load_profile, save_profile
    from sglang_cast.server import launch_args

    shipped = load_profile(PROFILE_DIR / "cpu.yaml").profile
    here = MachineIdentity.current("cpu")
    elsewhere = replace(here, model="999", family="1")
    for machine, noted in ((elsewhere, True), (here, False)):
        profile = replace(shipped, source="measured", provenance={**shipped.provenance, "machine": machine.to_dict()})
        path = save_profile(profile, tmp_path / "p.yaml")
        caplog.clear()
        with caplog.at_level("WARNING"):
            launch_server.resolve_profile(launch_args.parse_launch_args(["--cast-profile", str(path)]),
                                          launch_args.build_parser())
        lines = [r.getMessage() for r in caplog.records if "other CPU" in r.getMessage()]
        assert bool(lines) is noted, lines
        if noted:
            assert lines[0].startswith(f"CAST profile {shipped.label!r}: same ISA class") and str(path) in lines[0]
