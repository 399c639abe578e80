"""The plugin's contract with SGLang, checked against the installed 0.5.23 and a
doctored copy of it (three parts of it removed or changed)."""

from __future__ import annotations

import importlib
import os
import types

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from support.plugin import require_sglang  # noqa: E402

require_sglang("sglang.srt.speculative.eagle_worker_v2")

import sglang  # noqa: E402

from sglang_cast.sglang_plugin.contract import (SUPPORTED_VERSION, ContractError, Fields,  # noqa: E402
                                                check_installed_sglang, contract_problems)
from sglang_cast.sglang_plugin.contract import CONTRACT  # noqa: E402


def test_the_installed_sglang_is_the_supported_version_and_meets_the_contract():
    assert sglang.__version__ == SUPPORTED_VERSION
    assert contract_problems() == []
    check_installed_sglang()


def test_the_contract_names_every_sglang_module_the_plugin_imports():
    """Every ``from sglang... import`` in the plugin's sources is a contract module."""
    import re
    from pathlib import Path

    import sglang_cast.sglang_plugin as plugin

    contract_modules = {entry.module for entry in CONTRACT}
    for source in Path(plugin.__file__).parent.glob("*.py"):
        for module in re.findall(r"from (sglang[\w.]*) import", source.read_text()):
            assert module in contract_modules, f"{source.name} imports {module}, which the contract does not list"


def doctored_import(edits: dict[str, dict[str, object]]):
    """``importlib.import_module`` over copies of SGLang's modules with ``edits``
    applied (name -> replacement, ``None`` deletes); the real modules stay intact."""
    def import_module(name: str) -> types.ModuleType:
        real = importlib.import_module(name)
        if name not in edits:
            return real
        copy = types.ModuleType(name)
        copy.__dict__.update(vars(real))
        for attr, value in edits[name].items():
            if value is None:
                delattr(copy, attr)
            else:
                setattr(copy, attr, value)
        return copy
    return import_module


def test_a_doctored_sglang_is_refused_in_one_line_naming_what_is_missing():
    from sglang.srt.speculative.eagle_worker_common import build_eagle_verify_input

    def renamed_keyword(batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, *,
                        target_worker, topk, num_steps, num_verify_tokens, tree_mask_mode, device):
        return build_eagle_verify_input  # never called: only its signature is read

    class DraftWorkerWithoutHotTokens:
        """An EagleDraftWorker that no longer keeps ``hot_token_id``."""

        def __init__(self):
            self.speculative_num_steps = self.speculative_num_draft_tokens = self.topk = 1
            self.draft_attn_backend = self.cuda_graph_runner = self.draft_extend_attn_backend = None
            self.cuda_graph_runner_for_draft_extend = self.tree_mask_mode = self.req_to_token_pool = None
            self.target_worker = self.draft_runner = self.parallel_layout = self.device = None

        def draft(self, batch, with_topology=False): ...
        def _capture_cuda_graphs(self): ...
        def _rebuild_topk1_chain_buffers(self): ...

    doctored = doctored_import({
        "sglang.srt.speculative.adaptive_runtime_state": {"SpecRuntimeState": None},
        "sglang.srt.speculative.eagle_worker_common": {"build_eagle_verify_input": renamed_keyword},
        "sglang.srt.speculative.eagle_worker_v2": {"EagleDraftWorker": DraftWorkerWithoutHotTokens},
    })
    assert contract_problems(doctored) == [
        "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker.hot_token_id (attribute)",
        "sglang.srt.speculative.adaptive_runtime_state.SpecRuntimeState",
        "sglang.srt.speculative.eagle_worker_common.build_eagle_verify_input(... num_draft_tokens=...)",
    ]
    with pytest.raises(ContractError) as refused:
        check_installed_sglang(doctored, version="0.6.0", interpreter="/env/bin/python")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("SGLang 0.6.0 for /env/bin/python: it lacks what the CAST plugin uses: ")
    assert "SpecRuntimeState" in message and "num_draft_tokens" in message and "hot_token_id" in message
    assert message.endswith(f"the plugin supports SGLang {SUPPORTED_VERSION} "
                            f"(/env/bin/python -m pip install 'sglang=={SUPPORTED_VERSION}')")
    assert contract_problems() == []  # the real modules were not touched


def test_the_supported_version_lacking_a_part_is_told_to_force_reinstall_not_to_install_it_again():
    """0.5.23 installed but edited or half-installed: "pip install sglang==0.5.23" would do nothing."""
    doctored = doctored_import({"sglang.srt.speculative.adaptive_runtime_state": {"SpecRuntimeState": None}})
    with pytest.raises(ContractError) as refused:
        check_installed_sglang(doctored, version=SUPPORTED_VERSION, interpreter="/env/bin/python")
    message = str(refused.value)
    assert message.startswith(f"SGLang {SUPPORTED_VERSION} for /env/bin/python: it lacks ")
    assert "SpecRuntimeState" in message and "differs from the release" in message
    assert message.endswith(f"/env/bin/python -m pip install --force-reinstall --no-deps "
                            f"'sglang=={SUPPORTED_VERSION}'")


def failing_import(failures: dict[str, BaseException]):
    """``importlib.import_module`` where importing each module of ``failures`` raises its error."""
    def import_module(name: str) -> types.ModuleType:
        if name in failures:
            raise failures[name]
        return importlib.import_module(name)
    return import_module


def test_a_missing_dependency_is_named_with_the_module_it_breaks_and_a_fix_for_it_not_for_sglang():
    no_triton = ModuleNotFoundError("No module named 'triton'", name="triton")
    doctored = failing_import({"sglang.srt.speculative.eagle_utils": no_triton,
                               "sglang.srt.speculative.spec_utils": no_triton})
    with pytest.raises(ContractError) as refused:
        check_installed_sglang(doctored, version=SUPPORTED_VERSION, interpreter="/env/bin/python")
    message = str(refused.value)
    assert "\n" not in message
    assert message == (
        f"SGLang {SUPPORTED_VERSION} for /env/bin/python: importing sglang.srt.speculative.eagle_utils, "
        "sglang.srt.speculative.spec_utils raised ModuleNotFoundError: No module named 'triton'; 'triton' is a "
        "dependency of SGLang, not part of it: install it for this interpreter (/env/bin/python -m pip install "
        "triton, or the package that provides it)")
    assert "lacks" not in message  # 0.5.23 is there: nothing of it is missing


def test_every_module_whose_import_raises_is_caught_and_reported_with_its_error():
    """A torch/torchvision mismatch raises RuntimeError, a broken CUDA library OSError: both
    are reported per module (grouped by cause), and neither escapes the check."""
    torchvision = RuntimeError("operator torchvision::nms does not exist\n(long traceback text)")
    doctored = failing_import({
        "sglang.srt.server_args": torchvision,
        "sglang.launch_server": torchvision,
        "sglang.srt.managers.tp_worker": OSError("libcudart.so.13: cannot open shared object file"),
    })
    problems = contract_problems(doctored)
    assert problems == [
        "module sglang.srt.server_args (import raised RuntimeError: operator torchvision::nms does not exist)",
        "module sglang.launch_server (import raised RuntimeError: operator torchvision::nms does not exist)",
        "module sglang.srt.managers.tp_worker (import raised OSError: libcudart.so.13: cannot open shared "
        "object file)",
    ]
    with pytest.raises(ContractError) as refused:
        check_installed_sglang(doctored, version=SUPPORTED_VERSION, interpreter="/env/bin/python")
    message = str(refused.value)
    assert "\n" not in message and "long traceback" not in message
    assert ("importing sglang.srt.server_args, sglang.launch_server raised RuntimeError: operator "
            "torchvision::nms does not exist; not a missing part of SGLang") in message
    assert "importing sglang.srt.managers.tp_worker raised OSError" in message
    assert "pip install 'sglang==" not in message and "lacks" not in message


def test_an_entry_whose_inspection_raises_is_reported_not_raised():
    class Exploding(types.ModuleType):
        def __getattr__(self, name):
            raise RuntimeError(f"lazy import of {name} failed")

    def import_module(name: str) -> types.ModuleType:
        real = importlib.import_module(name)
        if name != "sglang.srt.utils.common":
            return real
        module = Exploding(name)
        module.__dict__.update({k: v for k, v in vars(real).items() if k != "fast_topk"})
        return module

    assert contract_problems(import_module) == [
        "sglang.srt.utils.common.fast_topk (inspecting it raised RuntimeError: lazy import of fast_topk failed)"]


def test_sglang_not_installed_is_said_with_the_interpreter_and_the_install_command():
    from sglang_cast.sglang_plugin.contract import ContractReport

    message = ContractReport((), (), None, "/env/bin/python").message()
    assert message == (f"SGLang is not installed for /env/bin/python; the CAST plugin needs SGLang "
                       f"{SUPPORTED_VERSION}: /env/bin/python -m pip install 'sglang=={SUPPORTED_VERSION}'")


def test_the_version_named_is_the_installed_distributions():
    from sglang_cast.sglang_plugin.contract import contract_report

    report = contract_report()
    assert report.version == SUPPORTED_VERSION and report.message() is None


def test_a_module_sglang_does_not_have_is_named_as_missing():
    absent = ModuleNotFoundError("No module named 'sglang.srt.managers.overlap_utils'",
                                 name="sglang.srt.managers.overlap_utils")
    assert contract_problems(failing_import({"sglang.srt.managers.overlap_utils": absent})) == [
        "module sglang.srt.managers.overlap_utils"]


def test_attribute_entries_are_found_in_the_class_or_its_bases():
    """The attribute check reads assignments in the class and every base class."""
    from sglang_cast.sglang_plugin.contract import _assigned_attributes

    class Base:
        def setup(self):
            self.kept: int = 1

    class Child(Base):
        def __init__(self):
            self.own = 2
            self.compared == 3  # noqa: B015 (a comparison, not an assignment)

    assert {"kept", "own"} <= _assigned_attributes(Child) and "compared" not in _assigned_attributes(Child)
    assert any(isinstance(entry, Fields) for entry in CONTRACT)


def test_registration_refuses_a_doctored_sglang(monkeypatch):
    from sglang_cast.sglang_plugin import register as register_module

    registered = []

    def record(name, supports_overlap=False, validate_server_args=None, spec_class=None):
        registered.append(name)
        return lambda worker_class: worker_class

    monkeypatch.setattr(register_module.SpeculativeAlgorithm, "register", record)
    monkeypatch.setattr(register_module, "get_spec", lambda name: None)  # as in a fresh process
    doctored = doctored_import({"sglang.srt.speculative.adaptive_runtime_state": {"SpecRuntimeState": None}})
    monkeypatch.setattr(register_module, "check_installed_sglang",
                        lambda: check_installed_sglang(doctored, version="0.6.0"))
    with pytest.raises(ContractError, match="lacks what the CAST plugin uses: .*SpecRuntimeState"):
        register_module.register()
    assert registered == []  # refused before registering anything
    monkeypatch.setattr(register_module, "check_installed_sglang", check_installed_sglang)
    register_module.register()
    assert registered == ["CAST", "GOODPUT"]
