"""The results store on SQLite in a temp folder, through the real CLI: back-fill, idempotence, half-written trees,
history with regression markers, compare/report/export from store selections, migrations in place, and the bad
inputs (one line, exit 2). PostgreSQL: tests/test_store_pg.py."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.cli import main
from agent.judging.correctness import judged_cells
from agent.results.tree import load_cells
from agent.store import db, history, ingest, select
from agent.store.schema import cells, hosts, measurements, sweeps
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

OLD = "nvcr.io/nvidia/vllm:25.11-py3@sha256:" + "ab" * 32
NEW = "nvcr.io/nvidia/vllm:26.01-py3@sha256:" + "cd" * 32
C = (1, 8)


def sweep(root: Path, name: str, image: str, marlin: float, day: str) -> None:
    """marlin at `marlin` × the old speed (tight repeats); b12x noisy and the same on both images."""
    common = dict(sweep=name, image=image, finished_at=day + "T12:00:00Z")
    write_cell(root, backend="marlin", values={c: [60.0 * c * marlin + d for d in (-1, 0, 1)] for c in C},
               started_at=day + "T10:00:00Z", **common)  # fmt: skip
    write_cell(root, backend="flashinfer_b12x", values={c: [25.0 * c, 30.0 * c, 40.0 * c] for c in C},
               started_at=day + "T11:00:00Z", **common)  # fmt: skip


@pytest.fixture
def trees(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    sweep(root, "nv-2511", OLD, 1.0, "2026-11-01")
    sweep(root, "nv-2601", NEW, 0.8, "2026-11-20")  # marlin 20% slower: a regression beyond the noise
    return root


@pytest.fixture
def url(tmp_path: Path) -> str:
    yield f"sqlite:///{tmp_path / 'store.sqlite'}"
    db.close_all()


def count(url: str, table: sa.Table) -> int:
    with db.open_store(url).connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def test_backfill_is_idempotent_and_rebuilds_the_trees_tables(trees, url, capsys):
    assert main(["store", "ingest", str(trees), "--store", url]) == 0
    assert "4 new cell(s), 0 updated, 0 already in the store as they are; 24 measurement(s)" in capsys.readouterr().out
    assert main(["store", "ingest", str(trees / "nv-2511"), str(trees), "--store", url]) == 0  # again, overlapping
    assert "0 new cell(s), 0 updated, 4 already in the store as they are; 0 measurement(s)" in capsys.readouterr().out
    assert (count(url, cells), count(url, measurements), count(url, hosts)) == (4, 24, 1)
    from_store = select.load(db.open_store(url), select.Selection())
    from_tree = judged_cells(trees)
    key = lambda c: (c["sweep"], c["cell_id"])  # noqa: E731
    assert sorted(from_store, key=key) == sorted(from_tree, key=key)  # the very tables readers take


def test_a_remeasured_cell_replaces_its_windows(trees, url):
    engine = db.open_store(url)
    ingest.ingest_tree(engine, trees)
    folder = next(p.parent for p in trees.rglob("cell.toml"))
    (folder / "c008-r3.toml").unlink()
    ingest.ingest_tree(engine, folder)
    assert count(url, measurements) == 23


def test_half_written_cell_is_skipped_with_a_warning_naming_it(trees, url, capsys):
    half = trees / "nv-2601" / "spark-1" / "0123456789ab"
    half.mkdir(parents=True)
    shutil.copy(next(trees.rglob("c001-r1.toml")), half / "c001-r1.toml")
    assert main(["store", "ingest", str(trees), "--store", url]) == 0
    captured = capsys.readouterr()
    assert "0123456789ab" in captured.err and "half-written" in captured.err and "skipped" in captured.err
    assert "4 new cell(s)" in captured.out and "1 skipped" in captured.out


def test_history_marks_the_regression_beyond_the_noise_only(trees, url, tmp_path, capsys):
    ingest.ingest_tree(db.open_store(url), trees)
    rows = history.query(db.open_store(url), select.parse(["checkpoint=uns-fast"]))
    marlin = [r for r in rows if r.backend == "marlin"]
    b12x = [r for r in rows if r.backend == "flashinfer_b12x"]
    assert [r.change for r in marlin] == ["", "regression"] * 2  # c=1 then c=8, old then new
    assert all(r.change in ("", "cannot rank") for r in b12x)  # same medians, 50% spread: never a regression
    assert marlin[1].ratio == pytest.approx(0.8, abs=0.01)
    plot = tmp_path / "h.png"
    assert main(["history", "backend=marlin", "concurrency=8", "--store", url, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "1 regression(s)" in out and plot.read_bytes()[:4] == b"\x89PNG"
    assert main(["history", "backend=marlin", "--store", url, "--fail-on-regression"]) == 1


def test_n1_history_row_has_no_spread(tmp_path, url):
    write_cell(tmp_path / "r", backend="marlin", values={1: [50.0]})
    ingest.ingest_tree(db.open_store(url), tmp_path / "r")
    (row,) = history.query(db.open_store(url), select.Selection())
    assert row.spread is None and row.median == 50.0


def test_compare_export_report_from_store_selections(trees, url, tmp_path, capsys):
    ingest.ingest_tree(db.open_store(url), trees)
    md = tmp_path / "cmp.md"
    args = ["compare", "image=*25.11*", "image=*26.01*", "--store", url, "--markdown", str(md)]
    assert main([*args, "--fail-on-regression"]) == 1
    assert "1 of 2 configuration(s) regressed beyond the noise" in capsys.readouterr().out
    text = md.read_text()
    assert text.count("| slower |") == 2 and text.count("| REGRESSION |") == 1  # marlin's two points, one config
    assert "within noise" in text  # b12x: noise, not a regression
    # a tree against a selection of the same sweep: identical numbers
    assert main(["compare", str(trees / "nv-2511"), "sweep=nv-2511", "--store", url]) == 0
    assert "0 of 2 configuration(s) regressed beyond the noise" in capsys.readouterr().out
    out = tmp_path / "e.csv"
    assert main(["export", "sweep=nv-2601,backend=marlin", "--store", url, "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 6 and {r["output_throughput"] for r in rows} >= {"48.0", "384.0"}
    rep = tmp_path / "rep"
    assert main(["report", "sweep=nv-2601", "--store", url, "--out", str(rep)]) == 0
    assert "**Run marlin.**" in (rep / "report.md").read_text()
    assert main(["report", "sweep=nv-2601", "--store", url]) == 2  # where to write?
    assert "--out" in capsys.readouterr().err


def test_migration_upgrades_an_old_store_in_place(trees, url):
    engine = sa.create_engine(url)
    db.migrate(engine, "0001")  # the first schema, without host groups
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO sweeps (name) VALUES ('old')"))
        conn.execute(sa.text("INSERT INTO hosts (name, fingerprint, facts) VALUES ('spark-9', 'fp9', '{}')"))
    engine.dispose()
    assert main(["store", "info", "--store", url]) == 0  # opening migrates
    engine = db.open_store(url)
    assert db.current_revision(engine) == db.head() == "0004"
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT host_group FROM hosts WHERE name = 'spark-9'")).scalar() == "fp9"
    ingest.ingest_tree(engine, trees)
    assert len(select.load(engine, select.parse(["host_group=a1b2c3d4"]))) == 4


def test_newer_schema_is_refused(url, capsys):
    db.open_store(url)
    db.close_all()
    with sa.create_engine(url).begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0999'"))
    assert main(["history", "--store", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "0999" in err and "newer than this spark-agent knows" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["history", "colour=blue"], "unknown field 'colour'"),
        (["history", "concurrency=lots"], "must be a whole number"),
        (["compare", "image=a", "imag=b"], "unknown field 'imag'"),
        (["history", "--store", "nosuchdb://x"], "unknown database kind"),
        (["history", "--store", "not a url"], "not a database URL"),
        (["history", "--store", "sqlite:////nonexistent-dir/x.db"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, says, url, capsys):
    argv = argv if "--store" in argv else [*argv, "--store", url]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


def test_store_url_from_env_and_config_file(tmp_path, monkeypatch):
    monkeypatch.delenv(db.ENV_URL, raising=False)
    config = tmp_path / "config.toml"
    config.write_text('[store]\nurl = "postgresql+psycopg://u:hunter2-secret@db.example/results"\n')
    monkeypatch.setenv(db.ENV_CONFIG, str(config))
    url = db.resolve_url(None, tmp_path)
    assert url.startswith("postgresql") and "hunter2-secret" not in db.shown(url)
    from agent.hostside import redact

    assert "hunter2-secret" not in redact.redact_text(f"connecting to {url} failed")  # remembered as a secret
    monkeypatch.setenv(db.ENV_URL, "sqlite:///x.db")
    assert db.resolve_url(None, tmp_path) == "sqlite:///x.db"
    assert db.resolve_url("sqlite:///y.db", tmp_path) == "sqlite:///y.db"
    monkeypatch.delenv(db.ENV_URL)
    monkeypatch.setenv(db.ENV_CONFIG, str(tmp_path / "none.toml"))
    assert db.resolve_url(None, tmp_path) == f"sqlite:///{(tmp_path / db.DEFAULT_NAME).resolve()}"


def test_collect_hook_indexes_a_landed_cell_and_only_warns_when_the_store_is_unreachable(
    trees, tmp_path, monkeypatch, capsys
):
    folder = next(p.parent for p in sorted(trees.rglob("cell.toml")))
    monkeypatch.delenv(db.ENV_URL, raising=False)
    monkeypatch.setenv(db.ENV_CONFIG, str(tmp_path / "none.toml"))
    ingest.on_cell_landed(trees, folder)  # default: SQLite in the results root
    default = db.resolve_url(None, trees)
    assert (trees / db.DEFAULT_NAME).is_file() and count(default, measurements) == 6
    monkeypatch.setenv(db.ENV_URL, "postgresql+psycopg://u:pw-never-shown@127.0.0.1:1/none")
    ingest.on_cell_landed(trees, folder)
    err = capsys.readouterr().err
    assert "not ingested" in err and folder.name in err and "pw-never-shown" not in err
    monkeypatch.setenv(db.ENV_URL, db.OFF)
    (trees / db.DEFAULT_NAME).unlink()
    db.close_all()
    ingest.on_cell_landed(trees, folder)
    assert not (trees / db.DEFAULT_NAME).exists()


def two_folders_one_name(tmp_path: Path) -> list[Path]:
    """The same sweep name measured into two results folders (two people, or a rerun elsewhere): two runs."""
    roots = []
    for i, (factor, day) in enumerate(((1.0, "2026-11-01"), (0.8, "2026-11-20"))):
        root = tmp_path / f"folder{i}"
        sweep(root, "quick", OLD, factor, day)
        roots.append(root)
    return roots


def runs_stay_apart(url: str, roots: list[Path], capsys) -> None:
    """Shared by SQLite and PostgreSQL: every run kept as itself, counts true, history and site per run."""
    assert main(["store", "ingest", *map(str, roots), "--store", url]) == 0
    assert "4 new cell(s), 0 updated, 0 already in the store as they are" in capsys.readouterr().out
    assert main(["store", "ingest", *map(str, roots), "--store", url]) == 0  # again: idempotent, and says so
    assert "0 new cell(s), 0 updated, 4 already in the store as they are" in capsys.readouterr().out
    engine = db.open_store(url)
    assert count(url, cells) == 4
    with engine.connect() as conn:
        runs = conn.execute(sa.select(sweeps.c.name, sweeps.c.results_root, sweeps.c.started)).all()
    assert sorted(r.results_root for r in runs) == [str(r.resolve()) for r in roots]
    assert {r.name for r in runs} == {"quick"} and len({r.started for r in runs}) == 2
    rows = history.query(engine, select.parse(["backend=marlin", "concurrency=8"]))
    assert len({r.run for r in rows}) == 2  # each run its own row
    assert main(["history", "backend=marlin", "--store", url]) == 0
    shown = capsys.readouterr().out
    assert "quick 2026-11-01T10:00" in shown and "quick 2026-11-20T10:00" in shown
    site = roots[0].parent / "site"
    assert main(["site", "--out", str(site), "--store", url]) == 0
    pages = sorted(p.parent.name for p in (site / "sweeps").glob("*/report.html"))
    assert len(pages) == 2 and all(p.startswith("quick-2026112") or p.startswith("quick-2026110") for p in pages)
    for page in pages:  # one run per page: its own two cells, never the other's
        assert (site / "sweeps" / page / "report.md").read_text().count("| spark-1 | uns-fast | marlin |") == 2


def test_two_folders_with_one_sweep_name_stay_two_runs(tmp_path, url, capsys):
    runs_stay_apart(url, two_folders_one_name(tmp_path), capsys)


def test_a_fresh_rerun_is_a_new_run_and_a_resume_is_not(tmp_path):
    from agent.results import tree

    root = tmp_path / "results"
    first = tree.begin_run(root, "quick", False, "2026-12-01T10:00:00Z")
    assert tree.begin_run(root, "quick", False, "2026-12-01T11:00:00Z") == first  # a resume, a tune round
    assert tree.begin_run(root, "quick", True, "2026-12-01T12:00:00Z") == "2026-12-01T12:00:00Z"  # --fresh
    sweep(tmp_path / "old", "quick", OLD, 1.0, "2026-11-01")  # a tree from before sweep.toml: its first cell's start
    assert tree.run_start(tmp_path / "old" / "quick") == "2026-11-01T10:00:00Z"


def merged_old_store(url: str, roots: list[Path]) -> None:
    """A store at revision 0002 where the old ingest merged two folders' sweeps of one name into one row."""
    engine = sa.create_engine(url)
    db.migrate(engine, "0002")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO sweeps (name, first_started) VALUES ('quick', '2026-11-01T10:00:00Z')"))
        conn.execute(sa.text("INSERT INTO hosts (name, fingerprint, facts) VALUES ('spark-1', 'a1b2c3d4', '{}')"))
        for i, root in enumerate(roots):
            for cell in load_cells(root):  # ids kept apart: the old key (sweep, host, cell id) overwrote twins
                conn.execute(
                    sa.text(
                        "INSERT INTO cells (sweep_id, host_id, cell_id, checkpoint, quant, backend, image, "
                        "image_digest, vllm_version, status, verdict, failure_class, started_at, finished_at, "
                        "config_key, config, attestation, record, source) VALUES (1, 1, :id, 'uns-fast', 'nvfp4', "
                        ":backend, '', '', '', 'done', 'valid', '', :start, '', '', '{}', '{}', '{}', :source)"
                    ),
                    {"id": cell["cell_id"][:11] + str(i), "backend": cell["config"]["moe_backend"],
                     "start": cell["started_at"], "source": cell["dir"]},
                )  # fmt: skip
    engine.dispose()


def old_merges_split(url: str, roots: list[Path]) -> None:
    merged_old_store(url, roots)
    engine = db.open_store(url)  # opening migrates
    assert db.current_revision(engine) == "0004"
    with engine.connect() as conn:
        runs = conn.execute(sa.select(sweeps.c.id, sweeps.c.results_root, sweeps.c.started)).all()
        assert sorted((r.results_root, r.started) for r in runs) == [
            (str(roots[0]), "2026-11-01T10:00:00Z"),
            (str(roots[1]), "2026-11-20T10:00:00Z"),
        ]
        per_run = conn.execute(sa.select(cells.c.sweep_id, sa.func.count()).group_by(cells.c.sweep_id)).all()
        assert sorted(n for _, n in per_run) == [2, 2]  # each folder's cells under its own run


def test_migration_splits_sweeps_the_old_ingest_merged(tmp_path, url):
    old_merges_split(url, two_folders_one_name(tmp_path))
