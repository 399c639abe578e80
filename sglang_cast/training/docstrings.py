"""Requests about the standard library installed here, mined from its docstrings: every
documented public name of `templates.STDLIB_MODULES` with its signature and summary,
asked about through `templates.DOC_TEMPLATES` (a source of the prompts stage)."""

from __future__ import annotations

import importlib
import inspect
import random
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .templates import DOC_TEMPLATES, STDLIB_MODULES

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass(frozen=True)
class DocItem:
    """One documented public name of the standard library."""

    name: str  # qualified: "textwrap.dedent", "str.split"
    signature: str  # "(text)" or "" when unavailable
    summary: str  # first paragraph of the docstring, one line


def _summary(doc: str) -> str:
    paragraph = inspect.cleandoc(doc).split("\n\n")[0]
    return " ".join(paragraph.split())


def _signature(obj: Any) -> str:
    """The call signature, without the memory addresses some defaults print with
    (``<function IS_CHARACTER_JUNK at 0x7f…>``), so prompts are the same in every run."""
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return ""


def _public_members(module_name: str) -> Iterator[tuple[str, Any]]:
    """Public functions/classes defined by the module, plus methods of builtin types."""
    module = importlib.import_module(module_name)
    homes = {module_name.split(".")[0], module.__name__.lstrip("_").split(".")[0]}
    for name, obj in inspect.getmembers(module):
        if name.startswith("_") or not (inspect.isroutine(obj) or inspect.isclass(obj)):
            continue
        # Accept implementation modules too: os.path is posixpath, heapq's functions are _heapq's.
        owner = (getattr(obj, "__module__", None) or "").lstrip("_").split(".")[0]
        if module_name == "builtins" or owner in homes:
            yield f"{module_name}.{name}" if module_name != "builtins" else name, obj
    if module_name == "builtins":
        for cls in (str, list, dict, set, bytes, int, float, tuple):
            for name, obj in inspect.getmembers(cls):
                if not name.startswith("_") and inspect.isroutine(obj):
                    yield f"{cls.__name__}.{name}", obj


def stdlib_doc_items(modules: Sequence[str] = STDLIB_MODULES) -> list[DocItem]:
    """Documented public names of the installed standard library (docstrings >= 6 words)."""
    items: dict[str, DocItem] = {}
    with warnings.catch_warnings():  # deprecated aliases (typing.io) warn when inspected
        warnings.simplefilter("ignore", DeprecationWarning)
        for module_name in modules:
            try:
                members = list(_public_members(module_name))
            except ImportError:
                continue
            for name, obj in members:
                summary = _summary(inspect.getdoc(obj) or "")
                if len(summary.split()) >= 6 and name not in items:
                    items[name] = DocItem(name, _signature(obj), summary[:400])
    return sorted(items.values(), key=lambda item: item.name)


def doc_prompts(items: Sequence[DocItem], count: int, seed: int) -> list[str]:
    """``count`` requests about documented names: each name once before any name twice."""
    rng = random.Random(seed)
    order = list(items)
    rng.shuffle(order)
    prompts = []
    for i in range(min(count, len(order) * len(DOC_TEMPLATES))):
        item = order[i % len(order)]
        template = rng.choice(DOC_TEMPLATES)
        prompts.append(template.format(name=item.name, signature=item.signature, summary=item.summary))
    return prompts
