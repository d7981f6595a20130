"""Results tree → store rows. A cell is one transaction: its row and all its windows, or nothing.

Identity: a sweep row is one run of a sweep, (results root, name, start) — the start from results/<sweep>/sweep.toml
(tree.run_start) — so two folders holding a sweep of one name, or a --fresh re-run, stay apart. A cell row is (that
sweep run, host, cell id) — the cell id hashes config + env, so the same configuration on two hosts or in two sweeps
shares it — and a measurement row is (that cell, window). A cell the store already holds exactly as the tree does is
left alone ("unchanged"); one the tree holds differently now is replaced ("updated"), so ingest is idempotent and
its counts say what it did. Two controllers ingesting at once: unique constraints keep one row per key and the
loser of a race retries its whole transaction, so nothing is lost and nothing duplicated (tests/test_store_pg.py).
"""

from __future__ import annotations

import getpass
import hashlib
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agent.errors import UserError
from agent.escape import plain
from agent.hostside import loadpoints
from agent.judging.summary import cell_verdict, summarize_cell
from agent.reporting.compare import match_key
from agent.results import tree
from agent.store import db
from agent.store.schema import WINDOW_COLUMNS, cells, hosts, measurements, sweeps

RETRIES = 8


@dataclass
class IngestCounts:
    cells: int = 0  # new to the store
    measurements: int = 0  # of those new or updated cells
    updated: int = 0  # in the store already, and the tree holds something else now (replaced)
    unchanged: int = 0  # in the store already, exactly as the tree holds it (nothing written)
    skipped: list[str] = field(default_factory=list)  # half-written or damaged cells, named

    def add(self, other: IngestCounts) -> None:
        self.cells += other.cells
        self.measurements += other.measurements
        self.updated += other.updated
        self.unchanged += other.unchanged
        self.skipped += other.skipped


@dataclass(frozen=True)
class Run:
    """Which run of a sweep a cell belongs to: the results root it was written under (absolute) and the run's start
    (results/tree.run_start). With the name, a sweep's identity in the store."""

    root: str
    started: str

    @staticmethod
    def of(cell_folder: Path) -> Run:
        sweep_folder = Path(cell_folder).resolve().parent.parent
        return Run(str(sweep_folder.parent), tree.run_start(sweep_folder))

    def of_cell(self, cell: dict[str, Any]) -> Run:
        """The run the cell was measured in, as it landed (a cell kept from an earlier run of the folder stays
        that run's); a cell from before the record kept it: the folder's run."""
        started = cell.get("run_started")
        return Run(self.root, started) if isinstance(started, str) and started else self


def config_key(cell: dict[str, Any]) -> str:
    """The configuration without image and schedule (compare's match key), hashed: history groups on it."""
    return hashlib.sha256(match_key(cell, with_host=False).encode()).hexdigest()[:16]


def _digest(image: str) -> str:
    return image.rsplit("@", 1)[1] if "@" in image else ""


def _window_name(run: dict[str, Any]) -> str:
    """The measurement's key in its cell: its load point and repeat (c008-r1, q2-c008-d8192-r1)."""
    return loadpoints.of_window(run).window(int(run.get("repeat", 0)))


def _text(value: Any, limit: int) -> str:
    return str(value or "")[:limit]


def ingest_cell(engine: sa.Engine, cell: dict[str, Any], run: Run | None = None) -> str:
    """One cell table as results/tree.load_cell returns it (validated and redacted) → rows, in the sweep run its
    folder belongs to (`run`, else read from the tree). Returns "new", "updated" or "unchanged"."""
    run = (run or (Run.of(Path(str(cell["dir"]))) if cell.get("dir") else Run("", ""))).of_cell(cell)
    for attempt in range(RETRIES):
        try:
            with engine.begin() as conn:
                return _ingest(conn, cell, run)
        except (sa.exc.IntegrityError, sa.exc.OperationalError) as exc:
            # a concurrent ingest inserted the same sweep, host or cell first (or SQLite was busy): retry
            if attempt == RETRIES - 1:
                raise UserError(f"store: cannot ingest cell {cell.get('cell_id')}: {str(exc.orig)[:160]}") from None
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _ingest(conn: sa.Connection, cell: dict[str, Any], run: Run) -> str:
    record = {k: v for k, v in cell.items() if k not in ("runs", "dir")}
    config = dict(cell.get("config", {}))
    facts = dict(cell.get("facts", {}))
    attestation = dict(cell.get("attestation", {}))
    sweep_pk = _sweep(
        conn, str(cell.get("sweep", "")), run, str(cell.get("started_at", "")), str(cell.get("finished_at", ""))
    )
    host_pk = _host(conn, str(cell.get("host", "")), facts)
    summary = summarize_cell({**cell, "runs": []})
    row = {
        "sweep_id": sweep_pk,
        "host_id": host_pk,
        "cell_id": str(cell["cell_id"]),
        "checkpoint": _text(summary.checkpoint, 255),
        "quant": _text(config.get("quant"), 64),
        "backend": _text(summary.backend, 255),
        "image": _text(config.get("image"), 512),
        "image_digest": _text(_digest(str(config.get("image", ""))), 80),
        "vllm_version": _text(attestation.get("vllm_version"), 64),
        "status": _text(cell.get("status"), 32),
        "verdict": cell_verdict(cell),
        "failure_class": _text(cell.get("failure_class"), 64),
        "started_at": _text(cell.get("started_at"), 40),
        "finished_at": _text(cell.get("finished_at"), 40),
        "config_key": config_key(cell),
        "config": config,
        "attestation": attestation,
        "record": record,
        "source": _text(Path(str(cell["dir"])).resolve() if cell.get("dir") else "", 1024),  # one spelling
    }
    key = (cells.c.sweep_id == sweep_pk) & (cells.c.host_id == host_pk) & (cells.c.cell_id == row["cell_id"])
    found = conn.execute(sa.select(cells.c.id, cells.c.record, cells.c.source).where(key)).first()
    if found is None:
        pk, outcome = conn.execute(sa.insert(cells).values(row).returning(cells.c.id)).scalar_one(), "new"
    elif _same(conn, found, row, cell.get("runs", [])):
        return "unchanged"
    else:
        pk, outcome = found.id, "updated"
        conn.execute(sa.update(cells).where(cells.c.id == pk).values(row))
        conn.execute(sa.delete(measurements).where(measurements.c.cell_pk == pk))
    rows = [_measurement(pk, w) for w in cell.get("runs", [])]
    if rows:
        conn.execute(sa.insert(measurements), rows)
    return outcome


def _same(conn: sa.Connection, found: Any, row: dict[str, Any], runs: list[dict[str, Any]]) -> bool:
    """Does the store hold this cell exactly as the tree does (record, folder and every window)?"""
    if found.record != row["record"] or found.source != row["source"]:
        return False
    stored = conn.execute(
        sa.select(measurements.c.window, measurements.c.data).where(measurements.c.cell_pk == found.id)
    )
    return {w: dict(d) for w, d in stored} == {_window_name(r): r for r in runs}


def _measurement(cell_pk: int, run: dict[str, Any]) -> dict[str, Any]:
    return {
        "cell_pk": cell_pk,
        "window": _window_name(run),
        "concurrency": int(run["concurrency"]),
        "repeat": int(run.get("repeat", 0)),
        "ok": bool(run.get("ok", True)),
        "started_at": _text(run.get("started_at"), 40),
        **{name: float(run.get(name, 0.0) or 0.0) for name in WINDOW_COLUMNS},
        "data": run,
    }


def _sweep(conn: sa.Connection, name: str, run: Run, started: str, finished: str) -> int:
    """The sweep run's row: (results root, name, start) is its identity; its first start and last finish follow
    its cells."""
    root, start = _text(run.root, 1024), _text(run.started, 40)
    key = (sweeps.c.name == name) & (sweeps.c.results_root == root) & (sweeps.c.started == start)
    row = conn.execute(sa.select(sweeps).where(key)).mappings().first()
    if row is None:
        values = {
            "name": name,
            "results_root": root,
            "started": start,
            "ingested_by": _who(),
            "first_started": started,
            "last_finished": finished,
        }
        return int(conn.execute(sa.insert(sweeps).values(values).returning(sweeps.c.id)).scalar_one())
    changes = {}
    if started and (not row["first_started"] or started < row["first_started"]):
        changes["first_started"] = started
    if finished > row["last_finished"]:
        changes["last_finished"] = finished
    if changes:
        conn.execute(sa.update(sweeps).where(sweeps.c.id == row["id"]).values(changes))
    return int(row["id"])


def _host(conn: sa.Connection, name: str, facts: dict[str, Any]) -> int:
    fingerprint = _text(facts.get("fingerprint"), 255)
    key = (hosts.c.name == name) & (hosts.c.fingerprint == fingerprint)
    pk = conn.execute(sa.select(hosts.c.id).where(key)).scalar()
    if pk is not None:
        return int(pk)
    values = {
        "name": name,
        "fingerprint": fingerprint,
        "gpu": _text(facts.get("gpu_name") or facts.get("arch"), 255),
        "facts": facts,
        "host_group": _text(facts.get("group") or fingerprint, 255),
    }
    return int(conn.execute(sa.insert(hosts).values(values).returning(hosts.c.id)).scalar_one())


def _who() -> str:
    try:
        return getpass.getuser()[:255]
    except (KeyError, OSError):
        return ""


# ---------------------------------------------------------------- trees


def half_written(root: Path) -> list[Path]:
    """Cell folders with something in them but no cell.toml: a cell cut short (a lost.toml says why)."""
    out = []
    for folder in sorted(Path(root).rglob("*")):
        if not (folder.is_dir() and tree.CELL_ID.fullmatch(folder.name)) or ".incoming" in folder.parts:
            continue
        if not (folder / tree.CELL_FILE).is_file() and any(folder.iterdir()):
            out.append(folder)
    return out


def warn(message: str) -> None:
    print(f"spark-agent: warning: {plain(message)}", file=sys.stderr)


def ingest_tree(
    engine: sa.Engine, root: Path, on_warning: Callable[[str], None] = warn, seen: set[Path] | None = None
) -> IngestCounts:
    """Every finished cell below root (a results root, a sweep or a host folder). A cell without cell.toml, or with
    a damaged one, is skipped with a warning naming it; the others are ingested. `seen`: cell folders already
    ingested by this command (not counted twice)."""
    counts = IngestCounts()
    runs: dict[Path, Run] = {}
    seen = set() if seen is None else seen
    for folder in half_written(root):
        why = "no cell.toml (half-written: the cell was cut short or is still running)"
        counts.skipped.append(str(folder))
        on_warning(f"{folder}: {why}; skipped")
    for folder in tree.iter_cell_dirs(root):
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        try:
            cell = tree.load_cell(folder, lambda path, why: on_warning(f"{path}: {why}; window skipped"))
        except tree.BadFile as exc:
            counts.skipped.append(str(folder))
            on_warning(f"{folder / tree.CELL_FILE}: {exc}; cell skipped")
            continue
        sweep_folder = folder.resolve().parent.parent
        if sweep_folder not in runs:  # read once per sweep folder, not per cell
            runs[sweep_folder] = Run.of(folder)
        outcome = ingest_cell(engine, cell, runs[sweep_folder])
        if outcome == "unchanged":
            counts.unchanged += 1
            continue
        counts.measurements += len(cell.get("runs", []))
        counts.cells += outcome == "new"
        counts.updated += outcome == "updated"
    return counts


def ingest_trees(engine: sa.Engine, roots: Iterable[Path]) -> IngestCounts:
    """Every tree; a cell below two of the roots given (a root and its sweep) is counted once."""
    total = IngestCounts()
    seen: set[Path] = set()
    for root in roots:
        total.add(ingest_tree(engine, root, seen=seen))
    return total


def on_cell_landed(results_root: Path, cell_folder: Path) -> None:
    """collect's hook: index a cell the moment its cell.toml is in place. The tree stays the record, so a store that
    cannot be reached only warns (`spark-agent store ingest` catches up later); $SPARK_AGENT_STORE=off skips it."""
    try:
        url = db.resolve_url(None, results_root)
        if url == db.OFF:
            return
        cell = tree.load_cell(cell_folder, lambda path, why: None)
        ingest_cell(db.open_store(url), cell)
    except (UserError, tree.BadFile, sa.exc.SQLAlchemyError, OSError) as exc:
        warn(f"store: cell {cell_folder.name} not ingested ({str(exc)[:200]}); run `spark-agent store ingest` later")
