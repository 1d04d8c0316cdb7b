"""The import layers of the measuring code: no cycles between bench, runtime, html, timing and reports.

Every ``onnxsat`` import in every module is read from the source (module level and inside functions:
a function-level import hides a cycle from Python, not from this test; ``if TYPE_CHECKING:`` imports
are left out, since they never run). Modules are grouped into units, mostly the top-level subpackage
or module; ``pruning.bench`` (a benchmark) and ``pruning.report`` (a
report) are their own units, since they sit on different layers of one package.

The layers, top to bottom: commands and benchmarks (``bench``, ``pruning.bench``, ``runtime``'s
``tune``) above ``html`` pages above reports (``report``, ``pruning.report``, ``sparsity``, ``verification``);
``timing`` is the measuring library the benchmarks, ``tune`` and ``latency`` share.

Run as a script (``python tests/test_layers.py``) it prints every cycle between units with the imports
that close it, and every function-level ``onnxsat`` import of the measuring code.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnxsat

PACKAGE = Path(onnxsat.__file__).parent
SPLIT = ("onnxsat.pruning.bench", "onnxsat.pruning.report")
"""Modules that are units of their own (see the module doc)."""
MEASURING = ("bench", "runtime", "html", "timing", "latency", "report", "pruning.bench")
"""The units whose layering this test holds (the measuring code and what it renders)."""
BELOW_PAGES = ("bench", "pruning.bench", "html")
"""What no lower layer may import: the benchmarks and the pages."""
LOWER = ("core", "report", "pruning.report", "sparsity", "verification", "timing", "latency", "eqsat", "passes")
"""Units below the pages: none of them imports a benchmark or a page."""


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    kind: str
    """``top`` (module level), ``function`` (inside a def) or ``typing`` (under TYPE_CHECKING)."""


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(node: ast.AST, module: str, known: dict[str, Path], kind: str) -> Iterator[Import]:
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        for child in node.body:
            yield from _imports(child, module, known, "typing")
        for child in node.orelse:
            yield from _imports(child, module, known, kind)
        return
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "onnxsat":
        for alias in node.names:
            name = f"{node.module}.{alias.name}"
            yield Import(module, name if name in known else node.module, kind)
        return
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] == "onnxsat":
                yield Import(module, alias.name, kind)
        return
    inner = "function" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and kind == "top" else kind
    for child in ast.iter_child_nodes(node):
        yield from _imports(child, module, known, inner)


def all_imports() -> list[Import]:
    known = modules()
    found = []
    for module, path in known.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            found.extend(_imports(node, module, known, "top"))
    return found


def unit(module: str) -> str:
    for split in SPLIT:
        if module == split or module.startswith(split + "."):
            return split.removeprefix("onnxsat.")
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "onnxsat"


def unit_graph() -> dict[tuple[str, str], list[Import]]:
    """(importing unit, imported unit) -> the imports behind that edge (those that run)."""
    edges: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for found in all_imports():
        source, target = unit(found.source), unit(found.target)
        if found.kind != "typing" and source != target and target != "onnxsat":
            edges[(source, target)].append(found)
    return edges


def cycles(edges: dict[tuple[str, str], list[Import]]) -> list[set[str]]:
    """Strongly connected components of more than one unit (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_cycle_reaches_the_measuring_code() -> None:
    edges = unit_graph()
    tangled = [c for c in cycles(edges) if c & set(MEASURING)]
    described = [
        f"{sorted(c)}: "
        + "; ".join(f"{i.source} -> {i.target} ({i.kind})" for a in c for b in c for i in edges.get((a, b), []))
        for c in tangled
    ]
    assert not tangled, "\n".join(described)


def test_no_cycle_between_any_units() -> None:
    """The whole package layers cleanly, not only the measuring code (see the README's Layers)."""
    assert cycles(unit_graph()) == []


def test_only_the_executable_imports_the_commands() -> None:
    """Commands are the top layer: a module that needs one of them has its logic in the wrong place."""
    users = {i.source for i in all_imports() if unit(i.target) == "commands" and unit(i.source) != "commands"}
    assert users <= {"onnxsat.cli"}, users


def test_imports_sit_at_module_top() -> None:
    """Two function-level imports are left. One makes a registry complete on demand: the surgeon catalogue
    imports ``surgeon.py`` to subclass it, so ``surgeon.py`` cannot import the catalogue at its top. The other
    is the executable's commands, imported inside ``main``'s handlers: a Ctrl-C in the two seconds they take
    to import was a 30-60 line traceback."""
    late = sorted(f"{i.source} -> {i.target}" for i in all_imports() if i.kind == "function")
    assert late == ["onnxsat.cli -> onnxsat.commands", "onnxsat.surgery.surgeon -> onnxsat.surgery.surgeons"], late


def test_lower_layers_import_no_benchmark_and_no_page() -> None:
    wrong = [found for (source, target), found in unit_graph().items() if source in LOWER and target in BELOW_PAGES]
    assert not wrong, wrong


def test_pages_import_no_benchmark() -> None:
    wrong = [found for (source, target), found in unit_graph().items() if source == "html" and target in BELOW_PAGES]
    assert not wrong, wrong


def test_runtime_imports_no_benchmark_and_no_page() -> None:
    wrong = [found for (source, target), found in unit_graph().items() if source == "runtime" and target in BELOW_PAGES]
    assert not wrong, wrong


def test_timing_is_imported_from_timing_not_from_bench() -> None:
    """``tune``, ``latency`` and ``bench prune`` time through ``onnxsat.timing``; bench imports it too."""
    users = {i.source for i in all_imports() if i.target == "onnxsat.timing" and i.kind == "top"}
    assert {"onnxsat.runtime.tune", "onnxsat.latency", "onnxsat.pruning.bench", "onnxsat.bench.compare"} <= users


def main() -> int:
    edges = unit_graph()
    for component in cycles(edges):
        print(f"cycle: {' <-> '.join(sorted(component))}")
        for a in sorted(component):
            for b in sorted(component):
                for found in edges.get((a, b), []):
                    print(f"    {found.source} -> {found.target} ({found.kind})")
    measuring = tuple(f"onnxsat.{name}" for name in (*MEASURING, "show"))
    late = [i for i in all_imports() if i.kind == "function" and i.source.startswith(measuring)]
    print(f"function-level onnxsat imports in the measuring code: {len(late)}")
    for found in late:
        print(f"    {found.source} -> {found.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
