"""The whole suite's hooks: one torch thread, the ``requires_sglang`` marker, and the
one loud line a run ends with when tests were skipped because SGLang does not import
here.

Test modules that import SGLang at their top call `support.plugin.require_sglang`
first (the module is skipped, reason tagged ``SGLANG:``); a test that needs SGLang
only inside is marked ``@pytest.mark.requires_sglang("sglang.module", ...)`` and
skipped at collection by the same check.  Either way the skips are counted here and
said once, at the end, with the command that runs them."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
import torch

from support.plugin import RUN_THEM, SGLANG_VERSION, SKIP_TAG, sglang_problem, skip_reason

DEFAULT_MODULES = ("sglang.srt.speculative.eagle_worker_v2",)  # the plugin's worker: what most tests need


def pytest_configure(config: pytest.Config) -> None:
    torch.set_num_threads(1)  # see one_torch_thread
    config.addinivalue_line(
        "markers", "requires_sglang(*modules): needs SGLang 0.5.23's modules (default: its EAGLE worker); "
        "skipped, and counted in the run's one SGLANG line, where they do not import")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test runs torch on one intra-op thread.  The tests' models are tiny (the
    largest, the embedded SmolLM2-135M, decodes a few tokens), so a second thread buys
    nothing on an idle machine, and on a CPU shared with other processes torch's
    threads spin-wait against them: with one busy process beside it, tests/engine and
    test_step_profile took 88 s on two threads and 30 s on one (2-core EPYC), and a
    tiny forward was once measured a hundredfold slower.  Set before each test, since
    code under test may set its own (tools/prefill_ab.py, training's gap report)."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("requires_sglang")
        if marker is None:
            continue
        problem = sglang_problem(*(marker.args or DEFAULT_MODULES))
        if problem is not None:
            item.add_marker(pytest.mark.skip(reason=skip_reason(problem)))


def _reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _test_functions(path: Path) -> int:
    """How many test functions a module that was skipped whole defines (parametrized
    cases not expanded: it did not load)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return 0
    return sum(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
               for node in ast.walk(tree))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """One line when SGLang's absence skipped anything: how much, why, how to run it."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if SKIP_TAG in _reason(r)]
    if not skipped:
        return
    modules = [r for r in skipped if r.when == "collect"]
    tests = len(skipped) - len(modules)
    functions = sum(_test_functions(config.rootpath / r.nodeid) for r in modules)
    problems = Counter(_reason(r).split("does not import here (", 1)[-1].rsplit(")", 1)[0] for r in skipped)
    parts = ([f"{functions} test functions of {len(modules)} modules that did not load"] if modules else []) + (
        [f"{tests} tests"] if tests else [])
    counted = f"{tests + functions} tests skipped ({' + '.join(parts)})"
    terminalreporter.write_line(
        f"{SKIP_TAG} {counted}: SGLang {SGLANG_VERSION} does not import here ({problems.most_common(1)[0][0]}); "
        f"run them with {RUN_THEM}", yellow=True, bold=True)
