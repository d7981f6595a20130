"""Store selections: `key=value` filters → cells, rebuilt as the very tables results/tree.load_cells returns.

A selection is one or more `key=value` terms (several in one argument separated by commas); terms on the same key
are alternatives (OR), terms on different keys all hold (AND); `*` in a value matches anything. since/until compare
the cell's start (ISO 8601 UTC, a date is enough). An unknown key is a UserError naming the keys there are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from agent.errors import UserError
from agent.judging import correctness
from agent.results import tree
from agent.store import readback
from agent.store.schema import cells, hosts, measurements, sweeps

COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "sweep": sweeps.c.name,
    "sweep_started": sweeps.c.started,  # a sweep's runs: one name, each its own start (and results root)
    "results_root": sweeps.c.results_root,
    "host": hosts.c.name,
    "host_group": hosts.c.host_group,
    "fingerprint": hosts.c.fingerprint,
    "checkpoint": cells.c.checkpoint,
    "quant": cells.c.quant,
    "backend": cells.c.backend,
    "image": cells.c.image,
    "image_digest": cells.c.image_digest,
    "vllm_version": cells.c.vllm_version,
    "verdict": cells.c.verdict,
    "failure_class": cells.c.failure_class,
    "cell_id": cells.c.cell_id,
}
RANGES = {"since": ">=", "until": "<="}  # on cells.started_at
WINDOW_KEYS = ("concurrency",)  # restricts the windows, not the cells
KEYS = (*COLUMNS, *RANGES, *WINDOW_KEYS)
CHUNK = 500  # ids per IN (...) list


@dataclass
class Selection:
    terms: dict[str, list[str]] = field(default_factory=dict)

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, values in self.terms.items() for v in values) or "everything"

    @property
    def concurrency(self) -> list[int]:
        return [int(v) for v in self.terms.get("concurrency", [])]


def looks_like_selection(text: str) -> bool:
    return "=" in text.split(",", 1)[0]


def parse(args: Iterable[str]) -> Selection:
    """Terms from the command line; UserError (one line) for a term without '=' or with an unknown key."""
    selection = Selection()
    for arg in args:
        for term in filter(None, (t.strip() for t in arg.split(","))):
            key, eq, value = term.partition("=")
            key = key.strip().replace("-", "_")
            if not eq or not value:
                raise UserError(f"selection term {term!r}: write key=value (keys: {', '.join(KEYS)})")
            if key not in KEYS:
                raise UserError(f"selection: unknown field {key!r} (known: {', '.join(KEYS)})")
            if key == "concurrency" and not value.isdigit():
                raise UserError(f"selection: concurrency={value!r} must be a whole number")
            selection.terms.setdefault(key, []).append(value)
    return selection


def where(selection: Selection) -> list[sa.ColumnElement[bool]]:
    clauses: list[sa.ColumnElement[bool]] = []
    for key, values in selection.terms.items():
        if key in COLUMNS:
            col = COLUMNS[key]
            clauses.append(sa.or_(*(_match(col, v) for v in values)))
        elif key in RANGES:
            for v in values:
                clauses.append(cells.c.started_at >= v if RANGES[key] == ">=" else cells.c.started_at <= _end_of(v))
    return clauses


def _match(col: sa.ColumnElement[Any], value: str) -> sa.ColumnElement[bool]:
    if "*" in value:
        escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").replace("*", "%")
        return col.like(escaped, escape="\\")
    return col == value


def _end_of(value: str) -> str:
    """until=2026-01-31 includes that whole day."""
    return value + "T99" if len(value) == 10 else value


def joined() -> Any:
    return cells.join(hosts, cells.c.host_id == hosts.c.id).join(sweeps, cells.c.sweep_id == sweeps.c.id)


def load(engine: sa.Engine, selection: Selection) -> list[dict[str, Any]]:
    """The selected cells as results/tree.load_cells tables, judged: cell.toml's table + 'runs' (windows sorted by
    load point (rate, depth, concurrency), then repeat) + 'dir' (the folder it was ingested from)."""
    query = sa.select(cells.c.id, cells.c.record, cells.c.source).select_from(joined()).where(*where(selection))
    with engine.connect() as conn, readback.reading("cells"):
        found = conn.execute(query.order_by(cells.c.started_at, cells.c.id)).all()
        runs = _runs(conn, [r.id for r in found], selection.concurrency)
    out = []
    for r in found:
        cell = readback.record("cells", r.id, r.record, "cell")
        cell["runs"] = sorted(runs.get(r.id, []), key=tree.point_key)
        cell["dir"] = readback.text("cells", r.id, "source", r.source)
        out.append(cell)
    correctness.annotate(out)  # as judged_cells does: agreement within what was selected
    return out


def _runs(conn: sa.Connection, ids: Sequence[int], concurrency: list[int]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for start in range(0, len(ids), CHUNK):
        query = sa.select(measurements.c.id, measurements.c.cell_pk, measurements.c.data).where(
            measurements.c.cell_pk.in_(ids[start : start + CHUNK])
        )
        if concurrency:
            query = query.where(measurements.c.concurrency.in_(concurrency))
        with readback.reading("measurements"):
            for pk, cell_pk, data in conn.execute(query):
                out.setdefault(cell_pk, []).append(readback.record("measurements", pk, data, "run"))
    return out


def require(cells_found: list[dict[str, Any]], selection: Selection, url: str) -> list[dict[str, Any]]:
    if not cells_found:
        from agent.store.db import shown

        raise UserError(
            f"store {shown(url)}: no cell matches {selection} (try `spark-agent history` to see what is there)"
        )
    return cells_found
