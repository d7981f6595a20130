"""Fast and right, end to end: the CLI sweeps two real sshd hosts (real Ansible) running the simulated Spark, where
marlin (the fastest NVFP4 backend on GB10) loops or emits noise on every prompt (--sim-wrong-output, through
SPARK_SIM_WRONG_OUTPUT). Each cell's server answers the correctness probe after its windows; marlin is WRONG OUTPUT
and never recommended although it measured fastest, while the two honest b12x backends, whose continuations part
late (the simulator's stand-in for kernels' numeric differences), agree well enough and stay valid."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys

import pytest
import yaml

from agent.hostside import probe
from agent.judging import correctness, summary
from agent.results.records import CellRecord

from .sshd_hosts import REPO, SIM_HOST_VARS, inventory_for

pytestmark = pytest.mark.integration  # simulators (and sshd test hosts) on 127.0.0.x

SPEC = """
[sweep]
name = "right"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.29.0"
[[checkpoints]]
name = "uns-fast"
model = "uns-fast"
quant = "nvfp4"
[server]
max_model_len = 8192
max_num_seqs = 8
[matrix]
moe_backend = ["marlin", "flashinfer_b12x", "b12x"]
concurrency = [2]
duration_s = 1.0
warmup = 1
repeats = 2
[load]
prompt_len = 64
output_len = 32
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="300")
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def _marlin_wrong(tmp_path, ssh_fleet):
    """The test hosts as simulated Sparks whose marlin loops or emits noise on every prompt."""
    inventory = inventory_for(ssh_fleet, SIM_HOST_VARS)
    for host in inventory["all"]["children"]["sparks"]["hosts"].values():
        host["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], "SPARK_SIM_WRONG_OUTPUT": "marlin:1"}
    inv = tmp_path / "fleet.yml"
    inv.write_text(yaml.safe_dump(inventory))
    return inv


def test_a_fast_backend_with_wrong_outputs_is_flagged_and_never_recommended(tmp_path, ssh_fleet):
    inv = _marlin_wrong(tmp_path, ssh_fleet)
    spec = tmp_path / "right.toml"
    spec.write_text(SPEC.format(digest="cd" * 32))
    out = tmp_path / "results"

    swept = _run("sweep", str(spec), "-i", str(inv), "--results", str(out), "--no-progress")
    # a cell with wrong outputs is not a valid measurement: exit 1 (README), counted `wrong`, named with why
    assert swept.returncode == 1, swept.stdout[-3000:] + swept.stderr[-3000:]
    total = next(line.split() for line in swept.stderr.splitlines() if line.strip().startswith("total "))
    planned, measured, wrong = int(total[1]), int(total[2]), int(total[3])
    assert wrong >= 1 and measured == 2 and planned == measured + wrong, swept.stderr[-3000:]
    assert "  wrong output spark-" in swept.stderr and "never ranked" in swept.stderr

    loaded = correctness.judged_cells(out / "right")
    cells = {c["config"]["moe_backend"]: c for c in loaded}
    # marlin, the portable backend, is also the fleet's reference: measured on both hosts (planning/blocks.py)
    n_marlin = sum(c["config"]["moe_backend"] == "marlin" for c in loaded)
    assert set(cells) == {"marlin", "flashinfer_b12x", "b12x"}
    for cell in cells.values():
        CellRecord.from_toml({k: v for k, v in cell.items() if k not in ("runs", "dir")})  # the record validates
        c = cell["correctness"]
        assert c["probed"] and c["prompts"] == len(probe.prompts()) and c["errors"] == 0
        assert c["thresholds"]["min_agreement"] > 0 and c["seconds"] > 0

    wrong, honest = cells["marlin"], [cells["flashinfer_b12x"], cells["b12x"]]
    assert summary.cell_verdict(wrong) == summary.WRONG_OUTPUT
    assert wrong["correctness"]["degenerate"] == wrong["correctness"]["prompts"]
    assert wrong["correctness"]["score"] == 0.0 and wrong["correctness"]["agreement"] < 0.1
    for cell in honest:
        c = cell["correctness"]
        assert summary.cell_verdict(cell) == "valid", c.get("wrong")
        assert c["score"] == 1.0 and c["degenerate"] == 0  # the simulated model computes the answers
    # one of them is the reference; the other parts from it late in the continuations, and only there
    ref_id = honest[0]["correctness"]["reference_cell"]
    assert ref_id in {c["cell_id"] for c in honest}
    other = next(c["correctness"] for c in honest if c["cell_id"] != ref_id)
    assert 0.6 <= other["agreement"] < 1.0 and other["first_divergence"] > 0
    parted = {r["kind"] for r in other["outputs"] if r.get("first_divergence", -1) >= 0}
    assert parted == {"text"}

    def best(cell):
        return max(r["output_throughput"] for r in cell["runs"])

    assert best(wrong) > max(best(c) for c in honest)  # fast, and still not the answer

    reported = _run("report", str(out / "right"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    report = (out / "right" / "report.md").read_text()
    what_to_run = report.split("## What to run", 1)[1].split("## Problems", 1)[0]
    assert "Never recommended" in what_to_run and "marlin" in what_to_run.split("Never recommended", 1)[1]
    assert "**marlin**" not in what_to_run  # never the winner
    side_by_side = report.split("## Correctness: speed and quality side by side", 1)[1].split("## ", 1)[0]
    assert side_by_side.count("WRONG OUTPUT") == n_marlin and "reference" in side_by_side
    listed = report.split("## WRONG OUTPUT cells (never ranked)", 1)[1].split("## ", 1)[0]
    assert "marlin" in listed and "degenerate outputs" in listed

    exported = _run("export", str(out / "right"), "--format", "csv")
    assert exported.returncode == 0, exported.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert {(r["moe_backend"], r["verdict"], r["correctness.score"]) for r in rows} == {
        ("marlin", "wrong output", "0.0"),
        ("flashinfer_b12x", "valid", "1.0"),
        ("b12x", "valid", "1.0"),
    }


def test_a_detached_sweeps_collect_exits_1_on_wrong_outputs(tmp_path, ssh_fleet):
    """The sweep's exit rule (README: exit codes) holds for `collect --wait`: a WRONG OUTPUT cell is not a valid
    measurement, so it does not say 0 (issue 36 item 7: `sweep && deploy` must be able to catch it; tune's side is
    test_answers_wheel's, from the installed wheel)."""
    inv = _marlin_wrong(tmp_path, ssh_fleet)
    spec = tmp_path / "pair.toml"
    text = SPEC.format(digest="cd" * 32).replace('name = "right"', 'name = "pair"')
    spec.write_text(text.replace('["marlin", "flashinfer_b12x", "b12x"]', '["marlin", "flashinfer_b12x"]'))
    one = ["-i", str(inv), "--limit", "spark-a"]

    handed = _run("sweep", str(spec), *one, "--results", str(tmp_path / "d"), "--detach")
    assert handed.returncode == 0, handed.stderr[-3000:]
    got = _run("collect", "pair", "--results", str(tmp_path / "d"), "--wait", "--interval", "0.5")
    assert got.returncode == 1, got.stderr[-3000:]
    assert "collected 2 new cell(s)" in got.stderr, got.stderr[-3000:]
    assert "not valid spark-a/" in got.stderr and ": wrong output" in got.stderr, got.stderr[-3000:]
    again = _run("collect", "pair", "--results", str(tmp_path / "d"))  # nothing new: the same verdict, the same exit
    assert again.returncode == 1 and "collected 0 new cell(s) (2 already here)" in again.stderr, again.stderr[-3000:]
