"""Issue 40: hostile input, round three. Each test tries one attack the third review reproduced against main: the
store steering the site's writes, store rows of the wrong type, a sweep named like the calibration, `init -o`
through a dangling link, a deep config.json, YAML alias bombs in inventories, damaged [correctness] tables and
redaction gaps. The multi-node peers and the archive fetch bound, which need hosts, are in test_round_three_hosts.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.cli import main
from agent.store import db
from agent.store.schema import cells, measurements
from tests.test_store import NEW, OLD, sweep

pytestmark = pytest.mark.unit


@pytest.fixture
def store(tmp_path: Path) -> str:
    root = tmp_path / "results"
    sweep(root, "nv-2511", OLD, 1.0, "2026-11-01")
    sweep(root, "nv-2601", NEW, 0.8, "2026-11-20")
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert main(["store", "ingest", str(root), "--store", url]) == 0
    yield url
    db.close_all()


def _set(url: str, table: sa.Table, **values: object) -> None:
    """Raw SQL, as anyone with the file or the database would write it (no SQLAlchemy type on the way)."""
    with db.open_store(url).begin() as conn:
        for column, value in values.items():
            raw = value if isinstance(value, str | int | float | bytes) else json.dumps(value)
            conn.execute(sa.text(f"UPDATE {table.name} SET {column} = :v"), {"v": raw})


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


# --- 1. the store steers the site ----------------------------------------------------------------------------


@pytest.mark.attack("store: a row's config_key is a path and `site` writes .html and .png outside --out")
@pytest.mark.parametrize("key", ["../../escaped", "/tmp/abs-escape", "..", "a/b", "x\x00y", "0123456789abcdef/.."])
def test_site_never_writes_outside_out(store, tmp_path, capsys, key):
    _set(store, cells, config_key=key)
    before = _files(tmp_path)
    out = tmp_path / "deep" / "site"
    out.parent.mkdir()
    assert main(["site", "--out", str(out), "--store", store]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config_key" in err[0] and "cells row" in err[0]
    assert _files(tmp_path) == before and list(out.parent.iterdir()) == []


def test_the_site_hashes_a_name_of_another_shape_and_guards_every_write(tmp_path):
    from agent.reporting import site

    assert site.page_name("0123456789abcdef") == "0123456789abcdef"
    for key in ("../x", "/etc/passwd", "..", ""):
        name = site.page_name(key)
        assert name.startswith("config-") and "/" not in name and ".." not in name
    root = tmp_path / "site"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    for path in (root / ".." / "x.html", root / "link" / "x.html", Path("/tmp/x.html"), root):
        with pytest.raises(ValueError):
            site.inside(root, path)
    assert site.inside(root, root / "history" / "a.html") == root / "history" / "a.html"


@pytest.mark.attack("store: a file that is not a database gives an internal error")
def test_a_file_that_is_no_database_is_one_line(tmp_path, capsys):
    bogus = tmp_path / "store.sqlite"
    bogus.write_bytes(b"this is not SQLite\n" * 100)
    for argv in (
        ["history", "--store", f"sqlite:///{bogus}"],
        ["site", "--out", str(tmp_path / "s"), "--store", f"sqlite:///{bogus}"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "store" in err and "internal error" not in err


@pytest.mark.attack(
    "store: a row of the wrong type (text for a number, a record that is no table) is an internal error"
)
@pytest.mark.parametrize(
    ("table", "values", "readers"),
    [
        (measurements, {"output_throughput": "fast"}, ("history", "site")),
        (measurements, {"concurrency": "many"}, ("history", "site")),
        (measurements, {"output_throughput": 1e400}, ("history", "site")),
        (cells, {"started_at": b"\xff2026"}, ("history", "site")),
        (cells, {"record": ["not", "a", "table"]}, ("report", "site")),
        (cells, {"record": {"cell_id": 7, "host": "h", "config": {}}}, ("report", "site")),
        (cells, {"record": "{not json"}, ("report", "site")),
        (measurements, {"data": {"concurrency": "x"}}, ("report", "site")),
    ],
)
def test_a_wrong_typed_row_is_one_line_and_exit_2(store, tmp_path, capsys, table, values, readers):
    _set(store, table, **values)
    argv = {
        "history": ["history", "--store", store],
        "site": ["site", "--out", str(tmp_path / "s"), "--store", store],
        "report": ["report", "sweep=nv-2511", "--out", str(tmp_path / "r"), "--store", store],
    }
    for reader in readers:
        code = main(argv[reader])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and " row " in err[0] and "internal error" not in err[0], (reader, err)
