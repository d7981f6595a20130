"""A server that dies mid-window, end to end: the CLI sweeps over real SSH (real sshd, real Ansible) against the
simulated Spark, whose marlin kernels fault (CUDA error) 0.5 s into the third request, i.e. in the second measured
window of concurrency 1. That cell is failed/engine_died with the root cause and the time; the window before the
crash is kept and marked; the rest of the cell is skipped at once; the next cell is measured normally."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from agent.judging import correctness

from .sshd_hosts import REPO, inventory_for
from .test_sweep import engines_running

pytestmark = pytest.mark.integration  # simulators (and sshd test hosts) on 127.0.0.x

SPEC = """
[sweep]
name = "dies"
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
[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
concurrency = [1, 2]
duration_s = 2.0
warmup = 1
repeats = 2
[load]
prompt_len = 16
output_len = 4000
"""


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_server_that_dies_mid_window_fails_its_cell_and_the_sweep_goes_on(tmp_path, ssh_fleet):
    # Outputs far longer than a window: at concurrency 1 every window (warmup included) is one request.
    inventory = inventory_for(
        ssh_fleet,
        {
            "spark_runtime": "process",
            "spark_simulate_gpu": "gb10",
            "spark_host_scope": "workdir",
            "spark_port": 8000,
            "spark_health_timeout": 60,
            "spark_serve_cmd": ["/usr/bin/python3", "-m", "agent.sim", "serve"],
            "spark_serve_env": {
                "PYTHONPATH": str(REPO),
                "SPARK_SIM_CRASH_AT_REQUEST": "3",
                "SPARK_SIM_CRASH_BACKEND": "marlin",
            },
        },
    )
    inv = tmp_path / "crashing-fleet.yml"
    inv.write_text(yaml.safe_dump(inventory))
    spec = tmp_path / "dies.toml"
    spec.write_text(SPEC.format(digest="cd" * 32))
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "agent.cli", "sweep", str(spec), "-i", str(inv), "--limit", "spark-a"]
    env = dict(os.environ, COLUMNS="300")
    proc = subprocess.run(
        cmd + ["--results", str(out), "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]

    cells = {c["config"]["moe_backend"]: c for c in correctness.judged_cells(out / "dies" / "spark-a")}
    died, healthy = cells["marlin"], cells["flashinfer_b12x"]
    assert (died["status"], died["verdict"], died["failure_class"]) == ("failed", "failed", "engine_died")
    assert died["failure_root_cause"] == "torch.AcceleratorError: CUDA error: unspecified launch failure"
    d = died["died"]
    assert d["window"] == "c001-r2" and d["cause"] == "cuda_error"
    assert d["windows_kept"] == ["c001-r1"] and d["windows_skipped"] == ["c002-r1", "c002-r2"]
    assert _epoch(died["started_at"]) <= _epoch(d["at"]) <= _epoch(died["finished_at"])
    assert 0 <= d["detection_s"] < 5
    # kept and marked: the window before the crash; the one it died in is a failed run; nothing after it
    runs = {(r["concurrency"], r["repeat"]): r for r in died["runs"]}
    assert sorted(runs) == [(1, 1), (1, 2)]
    assert runs[1, 1]["ok"] and runs[1, 1]["before_crash"] and runs[1, 1]["output_throughput"] > 0
    assert not runs[1, 2]["ok"] and runs[1, 2]["engine_died"] and not runs[1, 2]["before_crash"]
    # skipped within 5 s: the load driver stopped at once, and c=2 (2 more windows and a warmup) never ran
    assert died["measure_s"] < 3 * 2.0 + 0.5 + 5, died["measure_s"]
    assert "spark-agent supervisor: the server exited with code 1" in (Path(died["dir"]) / "server.log").read_text()

    assert (healthy["status"], healthy["verdict"]) == ("done", "valid"), healthy["verdict_reasons"]
    assert _epoch(healthy["started_at"]) >= _epoch(died["finished_at"]) - 1  # the sweep went on to it
    assert len(healthy["runs"]) == 4 and all(r["ok"] and not r["before_crash"] for r in healthy["runs"])
    assert "died" not in healthy

    # the end-of-sweep table says what happened, never "valid", for the dead cell
    row = next(line for line in proc.stdout.splitlines() if "marlin" in line)
    assert "engine died at" in row and "during c001-r2" in row and "CUDA error" in row and "valid" not in row
    assert engines_running(ssh_fleet) == []
    assert time.time() - _epoch(d["at"]) < 600
