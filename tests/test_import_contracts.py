"""No import cycles among ``leoflow`` modules, and the layer contracts of ``[tool.importlinter]`` hold.

A cycle through a type-only or a function-level import still says two modules are one (see
docs/adr/0008-layers.md), so the graph counts every import statement wherever it is — grimp, the
graph library import-linter is built on, records imports inside functions and under
``TYPE_CHECKING`` (the first test proves it) — plus module names kept as strings for
``importlib.import_module`` (the lazy exports of ``leoflow.settings``), which grimp cannot see.

A package's ``__init__`` runs before any of its modules, so "a module imports its own package" is
not an edge here (``from leoflow.settings import declared`` depends on ``declared``), as in grimp.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "leoflow"
MODULE_NAME = re.compile(r"leoflow(\.\w+)+")


def import_graph(package: str = "leoflow") -> grimp.ImportGraph:
    """Every import of ``package``'s modules: top level, inside functions, under TYPE_CHECKING."""
    return grimp.build_graph(package, cache_dir=None)


def string_imports(graph: grimp.ImportGraph) -> Iterable[tuple[str, str]]:
    """(importer, imported) for module names held as strings (``importlib.import_module(home)``)."""
    known = graph.modules
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        importer = ".".join(parts)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value)
                    and node.value in known and node.value != importer):
                yield importer, node.value


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    graph = {m: sorted(set(targets)) for m, targets in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(graph[root]))]
        while work:
            module, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph.get(target, ()))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def leoflow_cycles() -> list[list[str]]:
    graph = import_graph()
    edges: dict[str, set[str]] = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    for importer, imported in string_imports(graph):
        edges[importer].add(imported)
    return cycles(edges)


def test_the_graph_counts_type_checking_and_function_level_imports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If grimp dropped either kind, the cycle check below would be hollow."""
    package = tmp_path / "cyclesprobe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\n\n"
                                  "if TYPE_CHECKING:\n    from cyclesprobe import b\n")
    (package / "b.py").write_text("def f() -> None:\n    from cyclesprobe import c\n")
    (package / "c.py").write_text("import cyclesprobe.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = import_graph("cyclesprobe")
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert cycles(edges) == [["cyclesprobe.a", "cyclesprobe.b", "cyclesprobe.c"]]
    assert cycles({"x": {"y"}, "y": set(), "z": {"z"}}) == []


def test_no_import_cycles() -> None:
    found = leoflow_cycles()
    assert not found, "import cycles (move what both sides need into a leaf module):\n" + "\n".join(
        " <-> ".join(component) for component in found)


def test_the_import_linter_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """``lint-imports`` with the contracts of pyproject.toml (layers, the election apart, one door each
    to Kubernetes and the database driver)."""
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 broken" in out and "BROKEN" not in out, out
