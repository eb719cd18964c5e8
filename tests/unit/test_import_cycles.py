"""No module of the framework imports itself back: consumer/, infra/ and bench/ hold no import cycle.

Read from the source with ``ast``, not by importing. Every import statement counts, wherever it stands: at module
level, under ``if TYPE_CHECKING:`` (the type checker follows it) and inside a function (a lazy import only delays
the circle to the first call, and still ties the two modules to each other). Two modules that need the same types
share a third that holds them, as the chaos suite's run and reports share bench/chaos_accounting.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("consumer", "infra", "bench")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of :data:`PACKAGES` (a package is its ``__init__``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(path: Path, module: str) -> Iterator[str]:
    """Every name ``path`` imports, anywhere in it: ``import a.b`` gives ``a.b``; ``from a import b`` gives ``a`` and
    ``a.b`` (``b`` may be a module); relative imports are resolved against ``module``'s package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (a name resolves to its longest prefix that is a module)."""
    known = modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        targets = {resolve(name) for name in imported_names(path, module)}
        graph[module] = {target for target in targets if target is not None and target != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted: every module in
    one imports, directly or not, every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_module_of_the_framework_is_part_of_an_import_cycle() -> None:
    """consumer/, infra/ and bench/ import no module that imports them back, however indirectly."""
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_a_circle_through_a_lazy_or_type_checking_import(tmp_path: Path) -> None:
    """The check itself: a run and its report importing each other (one at module level, one under TYPE_CHECKING
    and inside a function, as bench/chaos.py and chaos_report.py did) is found; the shared-types fix is clean."""
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "__init__.py").write_text("")
    (bench / "run.py").write_text("from bench.report import render\n")
    (bench / "report.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bench.run import Result\n"
        "def kinds():\n    from .run import KINDS\n    return KINDS\n"
    )
    for package in ("consumer", "infra"):
        (tmp_path / package).mkdir()
    assert cycles(import_graph(tmp_path)) == [["bench.report", "bench.run"]]
    (bench / "types.py").write_text("KINDS = {}\nclass Result: ...\n")
    (bench / "report.py").write_text("from bench.types import KINDS, Result\n")
    assert cycles(import_graph(tmp_path)) == []
