"""Issue 13 §1 and §4 over three real sshd hosts with the simulated Spark (calibrated rate, which sleeps), in one
detached sweep (CI time): a host lost mid-sweep costs only its cell, which is recorded host_lost and measured by
another host; and the vLLM version a host's log gives joins its fingerprint: a host whose simulated vLLM differs is
named, never replicated with the others, and forms its own group in the next sweep."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

import pytest
import yaml

from agent.hostside import supervise
from agent.judging import correctness, replicas, stats, summary
from agent.results import tree as results
from agent.running import hostmemory

from .sshd_hosts import SIM_HOST_VARS, inventory_for, lose_host, restore_host, start_fleet, stop_fleet
from .test_fleet import cli, fleet_spec, stored

pytestmark = pytest.mark.integration

HOSTS = ["spark-a", "spark-b", "spark-c"]
OTHER_VLLM = "0.23.0"  # spark-c's simulated vLLM in the version test (the simulator's default is 0.24.0)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Three equal sshd hosts (simulated GB10s). Port 8102: never another module's fleet's."""
    fleet = start_fleet(tmp_path_factory.mktemp("three"), count=3)
    try:
        inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8102})
        assert fleet.inventory is not None
        fleet.inventory.write_text(yaml.safe_dump(inv))
        yield fleet
    finally:
        for h in fleet.hosts:  # a lost host's runner and server kept going on their own: stop them by supervisor
            with contextlib.suppress(Exception):
                supervise.stop(str(h.workdir))
        stop_fleet(fleet)


def _inventory_with_other_vllm(fleet, tmp: Path) -> Path:
    """The fleet's inventory with spark-c's simulated server logging another vLLM version, as docs/detached-sweeps.md
    gives it: a host var of its own, added to the group's spark_serve_env (which holds the simulator's PYTHONPATH)."""
    inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8102})
    inv["all"]["children"]["sparks"]["hosts"]["spark-c"]["spark_sim_vllm_version"] = OTHER_VLLM
    path = tmp / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _spec(tmp: Path, name: str) -> Path:
    """2 cells (one short window each); no [image] vllm_version, which would set every simulated host's version."""
    spec = fleet_spec(tmp, name, 1)
    spec.write_text(spec.read_text().replace('vllm_version = "0.24.0"\n', ""))
    return spec


def test_a_lost_host_costs_only_its_cell_and_another_vllm_is_kept_apart(tmp_path, three):
    """2 cells handed to 3 hosts of one group: both to spark-a (splitting two cells would cost a reference cell as
    long as the cell it saves: planning/blocks.py); spark-a's sshd stops while its first cell's server is up.
    `collect --wait --lost-after 2` declares it lost, records that cell host_lost and hands its cells to spark-b and
    spark-c, whose simulated vLLM logs another version: named, and never a replica of spark-a's measurement, which a
    later collect brings back once spark-a answers again. The next sweep puts spark-c in a group of its own."""
    out = tmp_path / "results"
    inventory = _inventory_with_other_vllm(three, tmp_path)
    started = cli("sweep", str(_spec(tmp_path, "lost")), "-i", str(inventory), "--results", str(out), "--detach")
    assert started.returncode == 0, started.stderr[-3000:]
    assert "spark-a: 2 cell(s)" in started.stderr and "spark-c: 0 cell(s)" in started.stderr, started.stderr[-2000:]
    a = three.host("spark-a")
    deadline = time.monotonic() + 60
    while not supervise.find_engines(str(a.workdir), scope="workdir") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert supervise.find_engines(str(a.workdir), scope="workdir"), "spark-a never started its cell"
    lose_host(three, "spark-a")  # mid-cell: its server is up
    try:
        collected = cli(
            "collect", "lost", "--results", str(out), "--wait", "--lost-after", "2", "--interval", "0.5", timeout=120
        )
        err = collected.stderr
        assert collected.returncode == 0, err[-3000:]
        assert "lost host spark-a: no answer" in err, err[-3000:]
        cells = stored(out, "lost")
        assert sorted(cells.values()) == [["spark-b"], ["spark-c"]], cells
        assert "collected 2 new cell(s)" in err, err[-2000:]  # every cell measured: 2 planned = 2 collected
        assert re.search(r"requeued spark-a/[0-9a-f]{12} -> spark-c", err), err[-2000:]
        (lost,) = list((out / "lost" / "spark-a").glob(f"*/{results.LOST_FILE}"))
        assert results.read_toml(lost)["reason"] == "host_lost"  # never a backend failure
        assert re.search(rf"vLLM {OTHER_VLLM} in the log of spark-c vs 0\.24\.0 on spark-b", err) or re.search(
            rf"vLLM 0\.24\.0 in the log of spark-b vs {OTHER_VLLM} on spark-c", err
        ), err[-3000:]
    finally:
        restore_host(three, "spark-a")

    # spark-a's runner went on alone; once it is done, a later collect brings its sealed cell back
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "spark-a: finished" in cli("status", "lost", "--results", str(out)).stdout:
            break
        time.sleep(1)
    later = cli("collect", "lost", "--results", str(out))
    assert later.returncode == 0, later.stderr[-3000:]
    cells = stored(out, "lost")
    assert sorted(cells.values()) == [["spark-a", "spark-b"], ["spark-a", "spark-c"]], cells  # each on two hosts
    assert not list((out / "lost" / "spark-a").glob(f"*/{results.LOST_FILE}"))  # measured after all: not lost
    known = {h: k.vllm_version for h, k in hostmemory.load(out).items()}
    assert known == {"spark-a": "0.24.0", "spark-b": "0.24.0", "spark-c": OTHER_VLLM}
    loaded = correctness.judged_cells(out / "lost")
    assert [c["verdict"] for c in loaded] == ["valid"] * 4, [c.get("verdict_reasons") for c in loaded]
    summaries = summary.summarize_cells(loaded)
    # spark-a and spark-b are replicas of one cell; spark-a and spark-c measured the other under different vLLMs
    assert [p.hosts for p in replicas.replica_points(summaries)] == [("spark-a", "spark-b")]
    assert sorted(r.hardware.rsplit("vLLM ", 1)[-1] for r in stats.recommend(summaries)) == [OTHER_VLLM, "0.24.0"]

    # the next sweep groups by the remembered version: spark-c alone, so three replicas cannot be had
    again = cli("sweep", str(_spec(tmp_path, "next")), "-i", str(inventory), "--results", str(out), "--replicas", "3")
    assert again.returncode == 2, again.stderr[-3000:]
    assert f"spark-c: vLLM {OTHER_VLLM} vs 0.24.0" in again.stderr, again.stderr[-2000:]
    assert re.search(r"--replicas 3: group g1 \(spark-a, spark-b: .*\) has only 2 host\(s\)", again.stderr)
