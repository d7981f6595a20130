"""Issue 13 §1 and §4 over three real sshd hosts with the simulated Spark (calibrated rate, which sleeps): the vLLM
version a host's log gives joins its fingerprint (a host whose simulated vLLM differs is named, never replicated with
the others, and forms its own group in the next sweep), and a host lost in a detached sweep costs
only its cell, which is recorded host_lost and measured by the others."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

import pytest
import yaml

from agent.hostside import supervise
from agent.judging import replicas, stats
from agent.results import tree as results
from agent.running import hostmemory

from .sshd_hosts import SIM_HOST_VARS, inventory_for, lose_host, restore_host, start_fleet, stop_fleet
from .test_fleet import cli, fleet_spec, stored
from .test_sweep import write_spec

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
    """The fleet's inventory with spark-c's simulated server logging another vLLM version (a sim option, set per
    host through spark_serve_env like any server plumbing)."""
    inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8102})
    c = inv["all"]["children"]["sparks"]["hosts"]["spark-c"]
    c["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], "SPARK_SIM_VLLM_VERSION": OTHER_VLLM}
    path = tmp / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def test_a_host_whose_log_gives_another_vllm_is_named_and_kept_apart(tmp_path, three):
    out = tmp_path / "results"
    inventory = _inventory_with_other_vllm(three, tmp_path)
    spec = write_spec(tmp_path, "versions", backends=("marlin",), duration=0.5, concurrency=(1,), warmup=0)
    spec.write_text(spec.read_text().replace('vllm_version = "0.24.0"\n', ""))  # else it sets every host's version
    swept = cli("sweep", str(spec), "-i", str(inventory), "--results", str(out), "--replicas", "3", "--no-progress")
    assert swept.returncode == 0, swept.stderr[-3000:]
    assert re.search(rf"vLLM {OTHER_VLLM} in the log of spark-c vs 0\.24\.0 on spark-[ab]", swept.stderr) or re.search(
        rf"vLLM 0\.24\.0 in the log of spark-[ab] vs {OTHER_VLLM} on spark-c", swept.stderr
    ), swept.stderr[-3000:]
    known = hostmemory.load(out)
    assert {h: k.vllm_version for h, k in known.items()} == {
        "spark-a": "0.24.0",
        "spark-b": "0.24.0",
        "spark-c": OTHER_VLLM,
    }

    cells = results.load_cells(out / "versions")
    assert len(cells) == 3
    points = replicas.replica_points(stats.summarize_cells(cells))
    assert points and all(p.hosts == ("spark-a", "spark-b") for p in points), points  # never with spark-c
    recs = stats.recommend(stats.summarize_cells(cells))
    assert sorted(r.hardware.rsplit("vLLM ", 1)[-1] for r in recs) == [OTHER_VLLM, "0.24.0"]

    # the next sweep groups by the remembered version: spark-c alone, so three replicas cannot be had
    again = cli("sweep", str(spec), "-i", str(inventory), "--results", str(out), "--replicas", "3", "--no-progress")
    assert again.returncode == 2, again.stderr[-3000:]
    assert f"spark-c: vLLM {OTHER_VLLM} vs 0.24.0" in again.stderr
    assert re.search(
        r"--replicas 3: group g1 \(spark-a, spark-b: .*\) has only 2 host\(s\); give at most 1", again.stderr
    )


def test_a_host_lost_in_a_detached_sweep_costs_only_its_cell(tmp_path, three):
    """2 cells handed to 3 equal hosts (spark-a and spark-b one each); spark-a's sshd stops while its cell's server
    is up. `collect --wait --lost-after 2` declares it lost, records that cell host_lost and hands it to spark-c:
    every cell is measured. spark-a comes back: a later collect brings what it sealed, as a replica."""
    out = tmp_path / "results"
    spec = fleet_spec(tmp_path, "lost", ["auto"])
    started = cli("sweep", str(spec), "-i", str(three.inventory), "--results", str(out), "--detach")
    assert started.returncode == 0, started.stderr[-3000:]
    assert "spark-a: 1 cell(s)" in started.stderr, started.stderr[-2000:]
    a = three.host("spark-a")
    deadline = time.monotonic() + 60
    while not supervise.find_engines(str(a.workdir), scope="workdir") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert supervise.find_engines(str(a.workdir), scope="workdir"), "spark-a never started its first cell"
    lose_host(three, "spark-a")  # mid-cell: its server is up
    try:
        collected = cli(
            "collect", "lost", "--results", str(out), "--wait", "--lost-after", "2", "--interval", "0.5", timeout=120
        )
        assert collected.returncode == 0, collected.stderr[-3000:]
        assert "lost host spark-a: no answer" in collected.stderr, collected.stderr[-3000:]
        cells = stored(out, "lost")
        assert sorted(cells.values()) == [["spark-b"], ["spark-c"]], cells
        assert "collected 2 new cell(s)" in collected.stderr, collected.stderr[-2000:]
        assert re.search(r"requeued spark-a/[0-9a-f]{12} -> spark-c", collected.stderr), collected.stderr[-2000:]
        (lost,) = list((out / "lost" / "spark-a").glob(f"*/{results.LOST_FILE}"))
        assert results.read_toml(lost)["reason"] == "host_lost"  # never a backend failure
    finally:
        restore_host(three, "spark-a")

    # spark-a's runner went on alone; once it is done, a later collect brings its sealed cells as replicas
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = cli("status", "lost", "--results", str(out))
        if "spark-a: finished" in status.stdout:
            break
        time.sleep(1)
    later = cli("collect", "lost", "--results", str(out))
    assert later.returncode == 0, later.stderr[-3000:]
    cells = stored(out, "lost")
    assert sorted(cells.values()) == [["spark-a", "spark-c"], ["spark-b"]], cells  # a replica, not a duplicate
    assert not list((out / "lost" / "spark-a").glob(f"*/{results.LOST_FILE}"))  # measured after all: not lost
