"""Issue 30, item 5: a detached runner whose work dir vanishes mid-cell (removed by hand, a wiped disk) stops the
server it started (found by the markers in its environment, since its state file went with the folder) and says so
in its last progress. A real runner (`python -m agent.hostside.runner`) serving the simulated Spark on loopback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from agent.hostside import runner, serving, supervise
from agent.planning.matrix import plan_cells
from agent.planning.spec import load_spec
from agent.running import detach

from .sshd_hosts import REPO, SIM_HOST_VARS, free_port, host_address
from .test_queue import FACTS
from .test_sweep import write_spec

pytestmark = pytest.mark.integration  # the simulator serves on loopback


@pytest.mark.attack("runner: its work dir vanishes mid-cell and the server it started runs on, unstopped")
def test_a_vanished_work_dir_stops_the_server_and_says_so(tmp_path):
    address = host_address(45)
    host_vars = {**SIM_HOST_VARS, "spark_bind_host": address, "spark_port": free_port(address)}
    spec = load_spec(write_spec(tmp_path, "orphan", backends=("marlin",), duration=8.0, concurrency=(1,), warmup=0))
    (cell,) = plan_cells(spec, "spark-a", FACTS, host_vars)[:1]
    workdir = tmp_path / "work"
    plan = detach.host_plan(spec, [cell], "orphan", "h1")
    plan["host"] = {"url": f"http://{address}:{host_vars['spark_port']}", "runtime": "process", "scope": "workdir",
                    "health_timeout": 60.0, "evict": False, "nvidia_smi": [], "model_cache": ""}  # fmt: skip
    runner.write_plan(str(workdir), "orphan", plan, {"PYTHONPATH": str(REPO)})
    env_file = workdir / "env" / f"{cell.id}.env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text(serving.ENV_HEADER.format(id=cell.id) + "".join(f"{k}={v}\n" for k, v in cell.env.items()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.hostside.runner", str(workdir), "orphan"], cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        servers: list[dict] = []
        while time.monotonic() < deadline and not (servers and (workdir / "runs" / cell.id / "serve.json").exists()):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.3)  # until the server is up and the bench runs
            servers = [e for e in supervise.find_engines(str(workdir), scope="workdir") if e["ours"]]
        assert servers, "the simulated server runs"
        shutil.rmtree(workdir)
        assert proc.wait(timeout=120) == 1, proc.stdout.read() if proc.stdout else ""
        said = proc.stdout.read() if proc.stdout else ""
        left = [e for e in supervise.find_engines(str(workdir), scope="workdir") if supervise._alive(e["pid"])]
        assert left == [], (left, said)
        progress = json.loads((runner.sweep_dir(str(workdir), "orphan") / runner.PROGRESS).read_text())
        assert progress["state"] == "stopped" and "vanished" in progress["note"], progress
        assert f"pid {servers[0]['pid']}" in progress["note"] or str(servers[0]["pid"]) in progress["note"]
        assert detach.checked_progress(progress, "spark-a").note == progress["note"]
    finally:
        if proc.poll() is None:
            proc.kill()
        runner.stop_orphans(str(workdir))
