"""docs/security.md's threat model per command, read against the code: every reader it names exists, and the
command's own code reaches it (the reader's module is imported, directly or not, by agent/commands/<command>.py,
and the reader's name is used there, not only defined). A reader renamed, or a command that stops calling it,
fails here until the page says what checks that input now."""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.unit

PAGE = REPO / "docs" / "security.md"
NEW_COMMANDS = {"pin", "watch", "site", "history", "report"}  # issue 48: each states what it takes and from where


def _rows() -> list[tuple[str, str, str, list[str]]]:
    text = PAGE.read_text()
    table = text.split("## Threat model per command", 1)[1]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("command", "---") and not set(cells[0]) <= {"-"}:
            rows.append((cells[0], cells[1], cells[2], re.findall(r"`(agent\.[\w.]+)`", cells[3])))
    return rows


ROWS = _rows()


def _module_path(module: str) -> Path:
    path = REPO / Path(*module.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"


@cache
def _imports(module: str) -> frozenset[str]:
    """The agent modules `module` imports (from x import y: y when it is a module, else x)."""
    tree = ast.parse(_module_path(module).read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("agent.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agent"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if _module_path(sub).is_file() else node.module)
    return frozenset(out)


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(_imports(m))
    return seen


def test_the_table_covers_every_new_command_and_names_readers():
    assert {r[0] for r in ROWS} == NEW_COMMANDS
    assert all(r[3] for r in ROWS), [r for r in ROWS if not r[3]]
    assert {"a host", "command line", "the store"} <= {r[2] for r in ROWS}


@pytest.mark.parametrize(("command", "what", "source", "readers"), ROWS, ids=[f"{r[0]}: {r[1][:40]}" for r in ROWS])
def test_each_named_reader_exists_and_its_command_reaches_it(command, what, source, readers):
    reach = _closure(f"agent.commands.{command}")
    for dotted in readers:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), f"{dotted} does not exist"
        assert module in reach, f"{command} never imports {module} (named for: {what})"
        used = [m for m in reach if re.search(rf"(?<!def )\b{re.escape(name)}\b", _module_path(m).read_text())]
        assert any(m != module for m in used) or _used_inside(module, name), f"nothing calls {dotted}"


def _used_inside(module: str, name: str) -> bool:
    """The reader is used in its own module beyond its definition (a helper its module's entry point calls)."""
    text = _module_path(module).read_text()
    return len(re.findall(rf"\b{re.escape(name)}\b", text)) > len(re.findall(rf"def {re.escape(name)}\b", text))
