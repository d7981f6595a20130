"""The end-of-sweep accounting, without hosts: every planned cell lands in exactly one bucket, the printed numbers
add up whatever happened, the exit code follows the final state, and a lost cell is never taken for a finished one."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agent.commands import sweep as command
from agent.results import tree as results
from agent.running.sweep import HostOutcome, SweepOutcome

from .fault_drills import COLUMNS, parse_summary

pytestmark = pytest.mark.unit


def host(name: str, n: int = 4, **buckets) -> HostOutcome:
    o = HostOutcome(host=name, planned=[f"{name}-{i}" for i in range(n)])
    for bucket, ids in buckets.items():
        for i in ids:
            o.add(bucket, f"{name}-{i}", f"{bucket} {i}")
    return o


SCENARIOS = {  # name -> (hosts, skipped verdicts from an earlier run, expected exit code)
    "all measured": (lambda: {"a": host("a", measured=[0, 1, 2, 3])}, {}, 0),
    "one invalid": (lambda: {"a": host("a", measured=[0, 1, 2], invalid=[3])}, {}, 1),
    "one failed": (lambda: {"a": host("a", measured=[0, 1, 2], failed=[3])}, {}, 1),
    "one lost": (lambda: {"a": host("a", measured=[0, 1, 2], lost=[3])}, {}, 1),
    "host stopped half-way": (lambda: {"a": host("a", measured=[0]), "b": host("b", measured=[0, 1, 2, 3])}, {}, 1),
    "resumed, all valid": (lambda: {"a": host("a", measured=[0, 1])}, {"a-2": "valid", "a-3": "valid"}, 0),
    "resumed, one failed earlier": (lambda: {"a": host("a", measured=[0, 1])}, {"a-2": "valid", "a-3": "failed"}, 1),
    "nothing planned": (lambda: {"a": host("a", n=0)}, {}, 0),
}


def outcome_for(name: str) -> SweepOutcome:
    build, skipped, _ = SCENARIOS[name]
    out = SweepOutcome(sweep_dir=Path("/nonexistent"), hosts=build())
    for o in out.hosts.values():
        o.skipped = {k: v for k, v in skipped.items() if k in o.planned}
        o.settle("the host stopped")
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_planned_cell_is_counted_once_and_the_numbers_add_up(name, capsys):
    outcome = outcome_for(name)
    for o in outcome.hosts.values():
        placed = [*o.measured, *o.invalid, *o.failed, *o.lost, *o.skipped]
        assert sorted(placed) == sorted(o.planned), "each planned cell in exactly one bucket"
    command._print_summary(outcome, "console")
    rows = parse_summary(capsys.readouterr().err)
    assert set(rows) == {*outcome.hosts, "total"}
    for counts in rows.values():
        assert counts["planned"] == sum(counts[k] for k in COLUMNS[1:])
    for k in COLUMNS:
        assert rows["total"][k] == sum(rows[h][k] for h in outcome.hosts)
    assert (0 if command.all_valid(outcome) else 1) == SCENARIOS[name][2]


def test_a_cell_is_counted_by_the_first_word_only():
    o = host("a", n=2)
    o.add("lost", "a-0", "interrupted")
    o.add("measured", "a-0")  # a late worker after Ctrl-C settled it
    o.settle("interrupted")
    assert o.lost == {"a-0": "interrupted", "a-1": "not run: interrupted"} and o.measured == []


def test_buckets_hold_under_concurrent_workers():
    o = host("a", n=400)
    threads = [
        threading.Thread(target=lambda b=b: [o.add(b, f"a-{i}") for i in range(400)])
        for b in ("measured", "failed", "lost", "invalid")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(o.counts()[k] for k in COLUMNS[1:]) == 400


def test_lost_hosts_are_named(capsys):
    outcome = outcome_for("host stopped half-way")
    outcome.hosts["a"].host_lost = True
    outcome.hosts["a"].error = "host a became unreachable: ssh: connect to host"
    command._print_summary(outcome, "console")
    err = capsys.readouterr().err
    assert "lost host a: host a became unreachable" in err
    assert "not run a/a-1: the host stopped" in err  # never begun: "not run", not "lost"


def test_a_lost_record_never_marks_a_cell_finished_and_never_overrides_one(tmp_path):
    results.record_lost(tmp_path, "s", "h", "c1c1c1c1c1c1", "host_lost", "gone", "2026-12-01T00:00:00Z")
    assert not results.is_finished(tmp_path, "s", "h", "c1c1c1c1c1c1"), "resume must measure a lost cell again"
    assert (
        results.read_toml(results.cell_dir(tmp_path, "s", "h", "c1c1c1c1c1c1") / results.LOST_FILE)["reason"]
        == "host_lost"
    )
    assert results.load_cells(tmp_path) == [], "a lost cell is no result"
    done = results.cell_dir(tmp_path, "s", "h", "c2c2c2c2c2c2")
    results.atomic_write_toml(done / results.CELL_FILE, {"cell_id": "c2c2c2c2c2c2", "verdict": "valid"})
    results.record_lost(tmp_path, "s", "h", "c2c2c2c2c2c2", "lost", "late", "2026-12-01T00:00:00Z")
    assert not (done / results.LOST_FILE).exists()
    results.clear_lost(tmp_path, "s", "h", "c1c1c1c1c1c1")
    assert not list(tmp_path.rglob(results.LOST_FILE))


def test_temp_files_of_a_killed_write_are_dropped_before_a_resume(tmp_path):
    folder = results.cell_dir(tmp_path, "s", "h", "c1c1c1c1c1c1")
    folder.mkdir(parents=True)
    (folder / ".cell.toml.k3j2.tmp").write_bytes(b"schema = 1\ncell_")  # cut short by SIGKILL
    (folder / "server.log").write_text("kept")
    other = tmp_path / "other-sweep" / ".x.toml.a1.tmp"
    other.parent.mkdir()
    other.write_text("another sweep's")
    results.clear_temp_files(tmp_path, "s")
    assert [p.name for p in folder.iterdir()] == ["server.log"]
    assert other.exists(), "only this sweep's folder is cleaned"
