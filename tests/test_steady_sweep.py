"""Dummy weights and steady state, end to end: the CLI sweeps two real sshd hosts (real Ansible) running the
simulated Spark started with `--load-format dummy` (the spec's extra_args) and in its JIT mode (SPARK_SIM_JIT_S:
vLLM's JIT lines, and slower, for the first seconds of serving). Every cell is recognised as dummy weights from
its log, its noisy probe answers are "quality not judged", never WRONG OUTPUT nor the reference, and it is still
ranked on speed, the report saying so. Warmup lasts until the JIT stops; the measured windows are clean."""

from __future__ import annotations

import csv
import io

import pytest
import yaml

from agent.judging import correctness, summary

from .sshd_hosts import SIM_HOST_VARS, inventory_for
from .test_correctness_sweep import _run  # the CLI as a user runs it, one implementation

pytestmark = pytest.mark.integration  # simulators (and sshd test hosts) on 127.0.0.x

SPEC = """
[sweep]
name = "dummy"
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
extra_args = ["--load-format", "dummy"]
[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
concurrency = [2]
duration_s = 1.0
warmup = 1
warmup_max = 6
warmup_tolerance = 0.5
repeats = 2
[load]
prompt_len = 64
output_len = 32
"""
JIT_S = 1.5


def test_dummy_weights_rank_on_speed_only_after_a_warmup_that_outlasts_the_jit(tmp_path, ssh_fleet):
    inventory = inventory_for(ssh_fleet, SIM_HOST_VARS)
    for host in inventory["all"]["children"]["sparks"]["hosts"].values():
        host["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], "SPARK_SIM_JIT_S": str(JIT_S)}
    inv = tmp_path / "fleet.yml"
    inv.write_text(yaml.safe_dump(inventory))
    spec = tmp_path / "dummy.toml"
    spec.write_text(SPEC.format(digest="ef" * 32))
    out = tmp_path / "results"

    swept = _run("sweep", str(spec), "-i", str(inv), "--results", str(out), "--no-progress")
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    assert "speed only: dummy weights" in swept.stdout  # the terminal table

    cells = correctness.judged_cells(out / "dummy")
    assert {c["config"]["moe_backend"] for c in cells} == {"marlin", "flashinfer_b12x"}
    for cell in cells:
        assert cell["attestation"]["load_format"] == "dummy"  # from the log's non-default args
        c = cell["correctness"]
        assert c["probed"] and c["score"] < 0.5  # noise, as random weights answer
        assert c["not_judged"] == correctness.DUMMY and c["wrong"] == [] and c["reference_cell"] == ""
        assert summary.cell_verdict(cell) == "valid"
        assert cell["config"]["warmup_max"] == 6 and cell["config"]["warmup_tolerance"] == 0.5
        first, *rest = sorted(cell["runs"], key=lambda r: r["repeat"])
        warm = first["warmup"]
        assert warm["steady"] and warm["jit_lines"] >= 1 and warm["windows"] >= 2, warm
        assert warm["seconds"] >= JIT_S
        assert all(r["jit_lines"] == 0 for r in cell["runs"])  # measured once the JIT had stopped
        assert all("warmup" not in r for r in rest)

    reported = _run("report", str(out / "dummy"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    report = (out / "dummy" / "report.md").read_text()
    what_to_run = report.split("## What to run", 1)[1].split("## Problems", 1)[0]
    assert "The ranking is speed-only" in what_to_run and "quality not judged: dummy weights" in what_to_run
    side_by_side = report.split("## Correctness: speed and quality side by side", 1)[1].split("## ", 1)[0]
    assert side_by_side.count("quality not judged: dummy weights") == len(cells)
    assert "WRONG OUTPUT" not in side_by_side
    warmups = report.split("## Warmup until steady", 1)[1].split("## ", 1)[0]
    assert warmups.count("steady: no JIT line") == len(cells)
    html = (out / "dummy" / "report.html").read_text()
    assert "The ranking is speed-only" in html

    exported = _run("export", str(out / "dummy"), "--format", "csv")
    assert exported.returncode == 0, exported.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert {r["correctness.not_judged"] for r in rows} == {correctness.DUMMY}
    assert {r["jit_lines"] for r in rows} == {"0"}
    assert sum(bool(r["warmup.windows"]) for r in rows) == len(cells)  # once per point
