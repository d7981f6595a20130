"""Rows read back from the store are checked like host data: whoever can write the store (a team's PostgreSQL, a
writable SQLite file) could have put anything there. A record is checked by the results tree's own shape
(tree.record_problem, its size bounded too), a typed column by its type, length and range, a name that becomes a
file by its shape. A bad row is
one line naming the table and row (UserError, exit 2); so is a row the database driver cannot even decode.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from agent.errors import UserError
from agent.escape import plain
from agent.results import tree

CONFIG_KEY = re.compile(r"[0-9a-f]{16}")  # ingest.config_key: a sha256 prefix


class BadRow(UserError):
    pass


def bad(table: str, pk: object, why: str) -> BadRow:
    return BadRow(
        f"store: {table} row {plain(str(pk))[:40]}: {plain(why)[:200]}; the store was written by something other "
        "than spark-agent: ingest the results tree again into a new store"
    )


@contextlib.contextmanager
def reading(table: str) -> Iterator[None]:
    """Rows the driver cannot decode (text in a number column, JSON that is not JSON) are bad rows too."""
    try:
        yield
    except (ValueError, TypeError, OverflowError, sa.exc.DBAPIError, sa.exc.StatementError) as exc:
        raise bad(table, "?", f"cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None


def record(table: str, pk: object, value: Any, kind: str) -> dict[str, Any]:
    """A cell's record (kind "cell") or a window's (kind "run"), checked by the tree's shape."""
    problem = tree.record_problem(value, kind)
    if problem:
        raise bad(table, pk, problem)
    return dict(value)


MAX_COLUMN = 4096  # a name, a host, an image reference, a folder: PATH_MAX at most


def text(table: str, pk: object, name: str, value: Any, most: int = MAX_COLUMN) -> str:
    """A text column, bounded: a 32 MiB name would make every page that shows it slow."""
    if not isinstance(value, str):
        raise bad(table, pk, f"'{name}' is not text ({type(value).__name__})")
    if len(value) > most:
        raise bad(table, pk, f"'{name}' is {len(value)} characters long (at most {most})")
    return value


def table_of(table: str, pk: object, name: str, value: Any, most: int = 64 * 1024) -> dict[str, Any]:
    """A JSON column that holds a table (a cell's config), bounded like a record."""
    if not isinstance(value, dict):
        raise bad(table, pk, f"'{name}' is not a table")
    problem = tree.size_problem(value, most)
    if problem:
        raise bad(table, pk, f"'{name}' {problem}")
    return value


def whole(table: str, pk: object, name: str, value: Any, low: int = 0, high: int = 10**9) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad(table, pk, f"'{name}' is not a whole number in {low}..{high} ({plain(repr(value))[:40]})")
    return value


def number(table: str, pk: object, name: str, value: Any, low: float = 0.0, high: float = 1e12) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not low <= value <= high:
        raise bad(table, pk, f"'{name}' is not a finite number in {low:g}..{high:g} ({plain(repr(value))[:40]})")
    return float(value)


def config_key(table: str, pk: object, value: Any) -> str:
    """It names a page of the site: exactly the hash ingest writes, nothing that could be a path."""
    if not isinstance(value, str) or not CONFIG_KEY.fullmatch(value):
        raise bad(table, pk, f"config_key {plain(repr(value))[:40]} is not a 16-hex hash")
    return value
