"""slm_router's modules import each other without cycles, counting imports inside functions (the lazy botocore
ones too): a cycle makes the import order matter and hides which module owns what (issue 15: aws <-> backends
<-> secret_key). The graph comes from the source itself (ast), not from a list kept here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "containers" / "router" / "slm_router"


def import_graph(package: Path) -> dict[str, set[str]]:
    modules = {p.stem for p in package.glob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module in modules:
        for node in ast.walk(ast.parse((package / f"{module}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (
                node.level == 1 or node.module == package.name or (node.module or "").startswith(f"{package.name}.")
            ):
                base = (node.module or "").removeprefix(f"{package.name}").lstrip(".")
                targets = [base.split(".")[0]] if base else [alias.name for alias in node.names]
                graph[module].update(t for t in targets if t in modules and t != module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(f"{package.name}."):
                        graph[module].add(alias.name.split(".")[1])
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_imports() -> None:
    graph = import_graph(PACKAGE)
    assert {"aws", "secret_key"} <= graph["backends"]  # both imported inside functions (botocore only when used)
    assert "answer" in graph["aws"]


def test_slm_router_has_no_import_cycles() -> None:
    assert cycles(import_graph(PACKAGE)) == []
