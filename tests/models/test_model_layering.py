"""`sglang_cast/models` imports one way: no module imports, even for type checking
only, a module that imports it back (directly or through others)."""

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import sglang_cast.models

PACKAGE = Path(sglang_cast.models.__file__).parent


def local_imports(path: Path) -> set[str]:
    """Sibling modules ``path`` imports anywhere in it (``if TYPE_CHECKING:`` and
    function bodies included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module.split(".")[0])
            else:
                names.update(alias.name for alias in node.names)
    return {n for n in names if (PACKAGE / f"{n}.py").is_file()}


def import_graph() -> dict[str, set[str]]:
    return {p.stem: local_imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def test_models_import_graph_has_no_cycle():
    graph = import_graph()
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        raise AssertionError(f"models/ imports in a circle: {' -> '.join(err.args[1])}") from None
    assert set(order) >= set(graph)


def test_the_graph_sees_type_checking_imports(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .llama import LlamaModel\n")
    assert "llama" in local_imports(module)
