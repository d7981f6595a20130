"""Telemetry end to end: the CLI sweeps two real sshd hosts (real Ansible) running the simulated Spark. spark-a's
GPU throttles (thermal) after 1 s of load (--sim-throttle-after, through SPARK_SIM_THROTTLE_AFTER) and its sampler
reads the simulated nvidia-smi, the same host-side code path as a real Spark; spark-b has no nvidia-smi at all.
The report flags spark-a's point as throttled with its reasons, says spark-b had no GPU telemetry, draws the
timeline, and `export` carries the new fields."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys

import pytest
import yaml

from agent.judging import correctness

from .sshd_hosts import REPO, SIM_HOST_VARS, inventory_for

pytestmark = pytest.mark.integration  # simulators (and sshd test hosts) on 127.0.0.x

SPEC = """
[sweep]
name = "hot"
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
moe_backend = ["marlin"]
concurrency = [4]
duration_s = 2.0
warmup = 1
repeats = 2
[load]
prompt_len = 64
output_len = 128
[telemetry]
interval_s = 0.25
throttle_threshold = 20
cooldown_s = 0.5
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="300")
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_throttled_point_is_flagged_and_a_host_without_nvidia_smi_says_so(tmp_path, ssh_fleet):
    inventory = inventory_for(ssh_fleet, SIM_HOST_VARS)
    hosts = inventory["all"]["children"]["sparks"]["hosts"]
    hosts["spark-a"]["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], "SPARK_SIM_THROTTLE_AFTER": "1"}
    hosts["spark-b"]["spark_nvidia_smi"] = [str(tmp_path / "no-such-nvidia-smi")]
    inv = tmp_path / "fleet.yml"
    inv.write_text(yaml.safe_dump(inventory))
    spec = tmp_path / "hot.toml"
    spec.write_text(SPEC.format(digest="ef" * 32))
    out = tmp_path / "results"

    # --replicas 2: both hosts measure (one fingerprint group would measure each cell once)
    swept = _run("sweep", str(spec), "-i", str(inv), "--results", str(out), "--no-progress", "--replicas", "2")
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]

    cells = {c["host"]: c for c in correctness.judged_cells(out / "hot")}
    hot, blind = cells["spark-a"], cells["spark-b"]
    for run in hot["runs"]:
        tele, server = run["telemetry"], run["server"]
        assert tele["available"] and tele["samples"] >= 4
        assert tele["throttled"] and tele["throttle_share_pct"] > 20 and tele["throttle_threshold_pct"] == 20
        assert set(tele["throttle_reasons"]) == {"sw_thermal_slowdown", "hw_thermal_slowdown"}
        assert tele["sm_clock_min_mhz"] <= 1400 and tele["joules_per_output_token"] > 0  # below the 2418 MHz boost
        assert "memory.used" in tele["unsupported"]  # GB10 reads [N/A]: recorded as such, never 0
        assert server["scraped"] and not server["tokens_disagree"]
        assert server["deltas"]["vllm:generation_tokens_total"] > 0
        assert server["gauges"]["vllm:num_requests_running"]["max"] >= 1
    first = min(hot["runs"], key=lambda r: r["repeat"])
    assert first["warmup_telemetry"]["available"] and first["telemetry"]["cooldown_s"] >= 0.5
    for run in blind["runs"]:
        assert run["ok"] and not run["telemetry"]["available"]
        assert "no GPU telemetry" in run["telemetry"]["note"]

    reported = _run("report", str(out / "hot"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    report = (out / "hot" / "report.md").read_text()
    throttling = report.split("## Throttling", 1)[1].split("## ", 1)[0]
    flagged = [line for line in throttling.splitlines() if line.startswith("- **THROTTLED**")]
    assert len(flagged) == 1 and "spark-a" in flagged[0]
    assert "Cool-down before cells:" in throttling  # recorded for both hosts
    assert "sw\\_thermal\\_slowdown" in throttling or "sw_thermal_slowdown" in throttling
    assert "No GPU telemetry for:" in report and "spark-b" in report.split("No GPU telemetry for:", 1)[1]
    assert (out / "hot" / f"telemetry-{hot['cell_id']}.png").stat().st_size > 1000

    exported = _run("export", str(out / "hot"), "--format", "csv")
    assert exported.returncode == 0, exported.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    hot_rows = [r for r in rows if r["host"] == "spark-a"]
    assert hot_rows and all(r["telemetry.throttled"] == "True" for r in hot_rows)
    assert all(float(r["telemetry.energy_j"]) > 0 for r in hot_rows)
    assert all(float(r["server.vllm:generation_tokens_total"]) > 0 for r in hot_rows)
