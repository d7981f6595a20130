"""The results tree: atomic writes, resume, reading back.

Layout (see ARCHITECTURE.md): results/<sweep>/<host>/<cell_id>/{cell.toml, server.log, launch.txt, cNNN-rK.toml}.
cell.toml is written last; its presence means the cell is finished.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomli_w

from agent.hostside import atomic

CELL_FILE = "cell.toml"
SCHEMA = 1


def run_name(concurrency: int, repeat: int) -> str:
    return f"c{concurrency:03d}-r{repeat}.toml"


def atomic_write_toml(path: Path, data: dict[str, Any]) -> None:
    atomic.write_bytes(path, tomli_w.dumps(_drop_none(data)).encode())


def _drop_none(value: Any) -> Any:
    """TOML has no null: leave None out."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value if v is not None]
    return value


def read_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


# One folder name of the tree: a sweep name, an inventory host name, a cell id. Starting with a letter or digit and
# without separators, none of them can be ".", "..", hidden, absolute or a path of several parts.
PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
CELL_ID = re.compile(r"[0-9a-f]{12}")


def path_part(name: str, what: str) -> str:
    """name, if it is one plain folder name; ValueError otherwise (nothing may be written outside the tree)."""
    if not isinstance(name, str) or not PART.fullmatch(name):
        raise ValueError(f"{what} {name!r} cannot name a results folder (letters, digits, . _ - only)")
    return name


def cell_dir(root: Path, sweep: str, host: str, cell_id: str) -> Path:
    if not isinstance(cell_id, str) or not CELL_ID.fullmatch(cell_id):
        raise ValueError(f"cell id {cell_id!r} is not 12 hex characters")
    return Path(root) / path_part(sweep, "sweep") / path_part(host, "host") / cell_id


def is_finished(root: Path, sweep: str, host: str, cell_id: str) -> bool:
    return (cell_dir(root, sweep, host, cell_id) / CELL_FILE).is_file()


def iter_cell_dirs(root: Path) -> Iterator[Path]:
    """Finished cells under root, which may be the results root, one sweep, or one host folder."""
    root = Path(root)
    for cell_file in sorted(root.rglob(CELL_FILE)):
        yield cell_file.parent


def load_cell(cell_path: Path) -> dict[str, Any]:
    """cell.toml plus 'runs' (its measurements, sorted by concurrency then repeat) and 'dir'."""
    cell = read_toml(cell_path / CELL_FILE)
    runs = [read_toml(p) for p in sorted(cell_path.glob("c[0-9][0-9][0-9]-r*.toml"))]
    runs.sort(key=lambda r: (r.get("concurrency", 0), r.get("repeat", 0)))
    cell["runs"] = runs
    cell["dir"] = str(cell_path)
    return cell


def load_cells(root: Path) -> list[dict[str, Any]]:
    return [load_cell(p) for p in iter_cell_dirs(root)]
