"""The import direction of the report's layers: reporting → judging → results, never back, and no circle inside
judging or inside reporting. Every import counts: module-level, inside a function and under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

AGENT = Path(__file__).resolve().parent.parent / "agent"


def _modules() -> dict[str, Path]:
    """agent.x.y → its file, for every module of the package (a package is its __init__.py)."""
    out = {}
    for path in sorted(AGENT.rglob("*.py")):
        parts = path.relative_to(AGENT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The deepest module of ours a dotted name lies in (agent.judging.stats.CellSummary → agent.judging.stats)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """Every agent module `module` imports, wherever the import statement stands in it."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            target = _resolve(name)
            if target and target != module:
                found.add(target)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def _in(module: str, layer: str) -> bool:
    return module == f"agent.{layer}" or module.startswith(f"agent.{layer}.")


def test_the_parser_sees_function_level_and_type_checking_imports() -> None:
    """The graph is only as good as its parser: a lazy import and a TYPE_CHECKING one are both edges."""
    assert "agent.reporting.htmlpage" in GRAPH["agent.running.watch"]  # module level
    assert "agent.running.calibration" in GRAPH["agent.reporting.markdown"]  # inside write_report_cells
    assert "agent.judging.stats" in GRAPH["agent.reporting.telemetry"]  # under TYPE_CHECKING


@pytest.mark.parametrize(
    ("layer", "never"),
    [("judging", ("reporting",)), ("results", ("judging", "reporting"))],
)
def test_the_layers_import_one_way(layer: str, never: tuple[str, ...]) -> None:
    wrong = sorted(
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if _in(m, layer)
        for t in targets
        if any(_in(t, n) for n in never)
    )
    assert wrong == [], f"{layer} must not import {', '.join(never)}: " + "; ".join(wrong)


@pytest.mark.parametrize("layer", ["judging", "reporting"])
def test_no_circle_inside_a_layer(layer: str) -> None:
    inside = {m: {t for t in GRAPH[m] if _in(t, layer)} for m in GRAPH if _in(m, layer)}
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(inside[m]):
            if state.get(t) == 1:
                circles.append(" → ".join(path[path.index(t) :] + [m, t]) if t in path else f"{m} → {t}")
            elif t not in state:
                visit(t, [*path, m])
        state[m] = 2

    for m in sorted(inside):
        if m not in state:
            visit(m, [])
    assert circles == [], "import circles: " + "; ".join(circles)
