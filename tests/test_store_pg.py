"""The results store on a real PostgreSQL (tests/fixtures_postgres.py): the same code path as SQLite, two
controllers ingesting at once without losing or duplicating a row, a migration in place, and the bad inputs a
server brings (wrong password, nothing listening): one line, exit 2, the password never shown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.cli import main
from agent.judging.correctness import judged_cells
from agent.store import db, history, select
from agent.store.schema import cells, measurements, sweeps
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "agent.cli"]


def make_sweep(root: Path, name: str, factor: float, n: int = 24) -> Path:
    """n cells × 2 concurrencies × 3 repeats."""
    for i in range(n):
        write_cell(root, backend=f"b{i:02d}", sweep=name, values={c: [factor * c * (50 + i + d) for d in (0, 1, 2)] for c in (1, 8)})  # fmt: skip
    return root / name


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("results")
    return {name: make_sweep(root, name, f) for name, f in (("x", 1.0), ("y", 1.1), ("z", 0.9))}


def counts(url: str) -> tuple[int, int, int]:
    engine = db.open_store(url)
    with engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one())
            for t in (sweeps, cells, measurements)
        )


def test_two_controllers_ingesting_at_once_lose_and_duplicate_nothing(postgres, trees):
    url = postgres.create_database("concurrent")  # empty: both processes also race to create the schema
    env = {**os.environ, db.ENV_URL: url}
    # A: y then x; B: y then z. Both start on y at once (the same rows), then x and z (different sweeps) at once.
    procs = [
        subprocess.Popen(
            CLI + ["store", "ingest", *map(str, order)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for order in ((trees["y"], trees["x"]), (trees["y"], trees["z"]))
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    said = [re.search(r"(\d+) new cell\(s\), 0 updated, (\d+) already in the store", out) for out in outputs]
    assert all(said) and all(int(m[1]) + int(m[2]) == 48 for m in said if m), outputs  # each saw its 48 cells
    assert sum(int(m[1]) for m in said if m) == 72, outputs  # y counted new once, by whoever wrote it
    assert all("s3cret" not in out for out in outputs)
    assert counts(url) == (3, 72, 432)  # every cell and window once
    engine = db.open_store(url)
    for name, tree in trees.items():
        stored = select.load(engine, select.parse([f"sweep={name}"]))
        key = lambda c: c["cell_id"]  # noqa: E731
        assert sorted(stored, key=key) == sorted(judged_cells(tree), key=key)


def test_history_and_compare_on_postgres(postgres, trees, capsys):
    url = postgres.create_database("queries")
    assert main(["store", "ingest", str(trees["x"]), str(trees["z"]), "--store", url]) == 0
    rows = history.query(db.open_store(url), select.parse(["backend=b00", "concurrency=8"]))
    assert [r.sweep for r in rows] == ["x", "z"] and rows[0].values == (400.0, 408.0, 416.0)
    assert main(["compare", "sweep=x", "sweep=z", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "24 of 24 configuration(s) regressed beyond the noise" in out  # z is 10% slower everywhere
    assert "s3cret" not in out


def test_migration_in_place_on_postgres(postgres):
    url = postgres.create_database("old")
    engine = sa.create_engine(url)
    db.migrate(engine, "0001")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO hosts (name, fingerprint, facts) VALUES ('spark-9', 'fp9', '{}')"))
    engine.dispose()
    assert main(["store", "upgrade", "--store", url]) == 0
    engine = db.open_store(url)
    assert db.current_revision(engine) == "0004"
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT host_group FROM hosts")).scalar() == "fp9"


@pytest.mark.parametrize("case", ["wrong password", "nothing listening", "no such database"])
def test_server_bad_input_is_one_line_exit_2_without_the_password(postgres, case, capsys):
    url = {
        "wrong password": postgres.url(password="Wrong-pw-123"),
        "nothing listening": postgres.url().replace(f":{postgres.port}/", ":1/"),
        "no such database": postgres.url("nonexistent"),
    }[case]
    assert main(["history", "--store", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot connect" in err, err
    assert "Wrong-pw-123" not in err and postgres.url().split(":")[2].split("@")[0] not in err


def test_sweep_runs_on_postgres(postgres, tmp_path, capsys):
    """Two folders with one sweep name stay two runs, and a store the old ingest merged is split in place."""
    from tests.test_store import old_merges_split, runs_stay_apart, two_folders_one_name

    roots = two_folders_one_name(tmp_path)
    runs_stay_apart(postgres.create_database("runs"), roots, capsys)
    old_merges_split(postgres.create_database("merged"), roots)
