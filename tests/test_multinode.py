"""Multi-node cells end to end (issue 19): two real sshd hosts, a real Ray cluster (head and worker, each with its
own temp dir and ports, bound to its own loopback address) started by the playbooks over SSH, the simulated engine
running TP=2 across it, attested from its log, then everything stopped. One module-wide inventory; three sweeps
(valid over RDMA, sockets forced -> INVALID, a worker lost mid-cell -> failed, and the sweep goes on)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from agent import logs
from agent.commands import env as env_cmd
from agent.hostside import raynode, supervise
from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.results import tree as results
from agent.running.follow import run_sweep

from .sshd_hosts import SIM_HOST_VARS, inventory_for, lose_host, restore_host

pytestmark = pytest.mark.integration

RAY = str(Path(sys.executable).parent / "ray")
SPEC = """
[sweep]
name = "{name}"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "uns-fast"
model = "uns-fast"
quant = "nvfp4"
[server]
max_model_len = 8192
max_num_seqs = 8
nodes = 2
tensor_parallel_size = 2
{server}
[matrix]
moe_backend = {backends}
concurrency = [1]
duration_s = {duration}
warmup = 0
repeats = {repeats}
[load]
prompt_len = 64
output_len = 32
{env}
"""


_ISSUED: list[int] = []  # the bases handed out in this process: a head's --port is one, its node's ports another


def _free_base() -> int:
    """A run of 100 ports nobody listens on (Ray binds some of them on every address), overlapping no run handed out
    before in this process: a head's --port inside its own node's range makes `ray start` refuse both."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            base = s.getsockname()[1] - 50
        clear = all(abs(base - other) >= 100 for other in _ISSUED)
        if 20000 < base < 60000 and clear and all(_free(base + i) for i in range(10)):
            _ISSUED.append(base)
            return base
    raise RuntimeError("no free port range for a Ray node")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def ray_inventory(ssh_fleet, tmp_path_factory):
    """The SSH test hosts as simulated Sparks whose engine can reach Ray (this venv's python and `ray`)."""
    inv = inventory_for(ssh_fleet, dict(SIM_HOST_VARS, spark_serve_cmd=[sys.executable, "-m", "agent.sim", "serve"]))
    temp_dirs = []
    gcs = _free_base()
    for _name, host_vars in inv["all"]["children"]["sparks"]["hosts"].items():
        temp = tempfile.mkdtemp(prefix="sa-ray-", dir="/tmp")  # short: Ray's unix sockets live under it
        temp_dirs.append(temp)
        host_vars.update(
            spark_ray_cmd=[RAY],
            spark_ray_port=gcs,
            spark_ray_port_base=_free_base(),
            spark_ray_temp_dir=temp,
            spark_ray_object_store_mb=80,
            spark_health_timeout=120,
        )
    # the worker drops its (real) machine's page cache when a spec asks (root); the head records it as simulated
    list(inv["all"]["children"]["sparks"]["hosts"].values())[1].update(spark_page_cache_drop="always")
    path = tmp_path_factory.mktemp("inv") / "ray-fleet.yml"
    path.write_text(yaml.safe_dump(inv))
    yield path
    for _name, host_vars in inv["all"]["children"]["sparks"]["hosts"].items():
        raynode.stop(host_vars["spark_workdir"])  # a failed test leaves no Ray behind (by our process group only)
    for temp in temp_dirs:
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def _spec(tmp_path: Path, name: str, backends=("marlin",), duration=1.0, repeats=1, env="", server="") -> Path:
    path = tmp_path / f"{name}.toml"
    text = SPEC.format(
        name=name,
        digest="cd" * 32,
        backends=list(backends),
        duration=duration,
        repeats=repeats,
        env=env,
        server=server,
    )
    path.write_text(text.replace("'", '"'))
    return path


def _ray_left(workdir: str) -> list[str]:
    """Processes of a Ray node or server started from this host's work dir that are still alive."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            env = supervise._environ(int(entry))
            if env.get(supervise.WORKDIR_ENV) == str(Path(workdir)) and supervise._alive(int(entry)):
                found.append(f"{entry}: {' '.join(supervise._argv(int(entry)))[:160]}")
    return found


def _hosts(inventory: Path):
    return load_inventory(inventory)


def test_two_node_cell_over_rdma_is_attested_and_torn_down(ray_inventory, tmp_path, capsys):
    hosts = _hosts(ray_inventory)
    head, worker = hosts[0], hosts[1]
    spec_path = _spec(tmp_path, "mn", server="drop_page_cache = true")
    # `spark-agent env` over the same hosts (facts gathered by the playbook over SSH): each node's own link variables
    logs.configure()  # structlog to stderr, as the CLI sets it up: stdout stays the command's
    parser = argparse.ArgumentParser()
    env_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["env", str(spec_path), "-i", str(ray_inventory), "--json"])
    assert args.func(args) == 0
    (node_set,) = json.loads(capsys.readouterr().out)["node_sets"]
    assert node_set["hosts"] == [head.name, worker.name] and node_set["transport"] == "rdma"
    shown = {n["host"]: n["env"]["VLLM_HOST_IP"] for n in node_set["cells"][0]["nodes"]}
    assert shown == {h.name: h.vars["ansible_host"] for h in hosts}
    spec = load_spec(spec_path)
    outcome = run_sweep(spec, ray_inventory, hosts, tmp_path / "results")
    assert outcome.totals()["measured"] == 1, outcome.hosts
    assert outcome.hosts[worker.name].planned == []  # the worker serves the head's cell
    (cell_id,) = outcome.hosts[head.name].measured
    cell = results.read_toml(results.cell_dir(tmp_path / "results", "mn", head.name, cell_id) / "cell.toml")
    assert cell["verdict"] == "valid", cell["verdict_reasons"]
    assert cell["config"]["nodes"] == 2 and cell["config"]["tensor_parallel_size"] == 2
    assert cell["config"]["distributed_executor_backend"] == "ray" and cell["config"]["transport"] == "rdma"
    cluster = cell["attestation"]["cluster"]
    assert cluster["world_size"] == 2 and cluster["ray_nodes"] == 2
    assert sorted(link["transport"] for link in cluster["links"]) == ["IB", "IB"]
    assert worker.vars["ansible_host"] in {link["node"] for link in cluster["links"]}
    assert all("rocep1s0f0:1/RoCE" in link["device"] for link in cluster["links"])
    rules = {(p["name"], p["rule"]) for p in cell["env_provenance"]}
    assert ("NCCL_IB_HCA", "multinode-ib-hca") in rules and ("VLLM_HOST_IP", "multinode-host-ip") in rules
    folder = results.cell_dir(tmp_path / "results", "mn", head.name, cell_id)
    for h in hosts:  # collect brought every node's Ray log back
        assert (
            "ray start" in (folder / f"node-{h.name}.log").read_text()
            or "Ray runtime" in (folder / f"node-{h.name}.log").read_text()
        )
    assert "--tensor-parallel-size 2" in cell["launch"]["command"]
    # the server joined Ray with the cell's token (issue 30), which no record shows; each node's folder went with it
    assert "RAY_AUTH_MODE=" in cell["launch"]["command"] and "RAY_AUTH_TOKEN=%REDACTED%" in cell["launch"]["command"]
    for h in hosts:
        assert not (Path(h.vars["spark_ray_temp_dir"]) / cell_id).exists()
    # the page cache: dropped for real on the worker (the test machine is root), recorded as simulated on the head
    assert [(n["host"], n["role"], n["page_cache"], n["image"]) for n in cell["nodes"]] == [
        (head.name, "head", "simulated host: not dropped", ""),
        (worker.name, "worker", "dropped", ""),
    ]
    for h in hosts:
        assert _ray_left(h.vars["spark_workdir"]) == [], f"{h.name}: Ray or the server still runs"


def test_sockets_where_rules_expect_rdma_is_invalid(ray_inventory, tmp_path):
    hosts = _hosts(ray_inventory)
    spec = load_spec(_spec(tmp_path, "mn-sock", env='[env]\nNCCL_IB_DISABLE = "1"'))
    outcome = run_sweep(spec, ray_inventory, hosts, tmp_path / "results")
    (cell_id,) = outcome.hosts[hosts[0].name].invalid
    cell = results.read_toml(results.cell_dir(tmp_path / "results", "mn-sock", hosts[0].name, cell_id) / "cell.toml")
    assert any("expect RDMA" in r and "Socket" in r for r in cell["verdict_reasons"]), cell["verdict_reasons"]
    assert any("Using network Socket" in e for e in cell["verdict_evidence"])


def test_a_lost_worker_node_fails_its_cell_a_lost_worker_host_is_a_lost_host(ssh_fleet, ray_inventory, tmp_path):
    """One sweep, three cells (one Ray cluster per cell, as always). Cell 1: the worker's Ray node dies (SIGKILL, the
    host still reachable): the engine dies as vLLM does, the cell fails with the engine-death class and the Ray
    evidence, and the sweep goes on. Cell 2 is measured. Cell 3: the worker machine drops off (its sshd and its Ray
    node gone): the worker is the lost host, the cell is lost as host_lost naming it (never a failure of the
    config), and the head's server and Ray are stopped."""
    hosts = _hosts(ray_inventory)
    head, worker = hosts[0], hosts[1]
    spec = load_spec(
        _spec(tmp_path, "mn-lost", backends=("marlin", "flashinfer_b12x", "emulation"), duration=1.5, repeats=4)
    )
    state = Path(worker.vars["spark_workdir"]) / "state" / raynode.STATE_FILE
    seen: list[str] = []  # the cells whose Ray node came up on the worker, in order
    acted: dict[str, str] = {}
    begun = time.time()  # earlier tests' run folders are on the same hosts

    def worker_node() -> dict:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(state.read_text())
        return {}

    def lose_the_worker() -> None:  # mid-bench (its first window is in) of cell 1: its Ray node; of cell 3: the machine
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(acted) < 2:
            node = worker_node()
            if node.get("cell_id") and node["cell_id"] not in seen and node.get("started", 0) > begun:
                seen.append(node["cell_id"])
            benched = [
                cid
                for cid in seen
                if any(
                    p.stat().st_mtime > begun for p in Path(head.vars["spark_workdir"]).glob(f"runs/{cid}/c001-r1.json")
                )
            ]
            if len(benched) == 1 and not acted:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node["pid"], signal.SIGKILL)
                acted[seen[0]] = "ray node killed"
            if len(benched) == 3 and len(acted) == 1:
                lose_host(ssh_fleet, worker.name)  # the network goes first, then the machine's processes
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node["pid"], signal.SIGKILL)
                acted[seen[2]] = "host lost"
            time.sleep(0.2)

    killer = threading.Thread(target=lose_the_worker, daemon=True)
    killer.start()
    try:
        outcome = run_sweep(spec, ray_inventory, hosts, tmp_path / "results")
    finally:
        killer.join(timeout=5)
        if "host lost" in acted.values():
            restore_host(ssh_fleet, worker.name)
        raynode.stop(worker.vars["spark_workdir"])  # the "machine" is this one: leave nothing for the next test
    assert list(acted.values()) == ["ray node killed", "host lost"], (seen, acted)
    result = outcome.hosts[head.name]
    killed, gone = list(acted)
    # cell 1: the engine died with its worker's actor; a failed cell of the config's own, with the Ray evidence
    assert result.failed == [killed] and len(result.measured) == 1, outcome.hosts  # cell 2 still ran
    cell = results.read_toml(results.cell_dir(tmp_path / "results", "mn-lost", head.name, killed) / "cell.toml")
    assert cell["failure_class"] == "engine_died"
    assert cell["died"]["cause"] == "worker_lost", cell["died"]
    assert any(
        e.startswith(("ray.exceptions.ActorDiedError", "ray.exceptions.ActorUnavailableError"))
        for e in cell["died"]["evidence"]
    )
    # cell 3: the worker host is the lost one, named in the summary; the cell is lost, not failed
    assert outcome.lost_hosts.keys() == {worker.name}, outcome.hosts
    assert worker.name in outcome.lost_hosts[worker.name]
    assert not result.host_lost and f"lost worker host {worker.name}" in result.error
    assert result.lost.keys() == {gone} and result.lost[gone].startswith("host_lost"), result.lost
    assert outcome.totals() | {"planned": 3, "measured": 1, "failed": 1, "lost": 1} == outcome.totals()
    folder = results.cell_dir(tmp_path / "results", "mn-lost", head.name, gone)
    note = results.read_toml(folder / results.LOST_FILE)
    assert note["reason"] == "host_lost" and f"worker host {worker.name}" in note["error"], note
    assert not (folder / results.CELL_FILE).exists()
    assert _ray_left(head.vars["spark_workdir"]) == [], f"{head.name}: Ray or the server still runs"
