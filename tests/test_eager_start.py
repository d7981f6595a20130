"""The eager start, checks only ([correctness] eager_start, issue 37): over real SSH and Ansible on the simulated
Spark (its clock 200x faster), a kernel that goes bad under CUDA graphs late in a long decode is caught on the
cell, and blamed on the graphs path because the probe-only --enforce-eager start of the same configuration is
clean; that start runs no windows, is never ranked, and the report says what it was."""

from __future__ import annotations

import pytest
import yaml

from agent.judging import correctness, summary

from .sshd_hosts import SIM_HOST_VARS, inventory_for, start_fleet, stop_sim_fleet
from .test_long_decode_sweep import _cli  # the CLI as a user runs it, wide enough that no name is cut

pytestmark = pytest.mark.integration

SPEC = """
[sweep]
name = "graphs"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.29.0"
[[checkpoints]]
name = "nv"
model = "nv"
quant = "nvfp4"
[server]
max_model_len = 4352
max_num_seqs = 8
[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
concurrency = [2]
duration_s = 200.0  # simulated seconds: one real second
warmup = 1
repeats = 2
[load]
prompt_len = 64
output_len = 32
[correctness]
long_decode = true
long_prompts = 1
long_batch = false
eager_start = true
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    fleet = start_fleet(tmp_path_factory.mktemp("graphs"), count=1)
    try:
        yield fleet
    finally:
        stop_sim_fleet(fleet)


def test_a_graphs_only_fault_is_blamed_on_graphs_by_the_eager_start(tmp_path, host):
    inv = inventory_for(host, {**SIM_HOST_VARS, "spark_port": 8380, "spark_sim_time_scale": 200})
    for h in inv["all"]["children"]["sparks"]["hosts"].values():  # every backend breaks under graphs at 2000
        h["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], "SPARK_SIM_WRONG_OUTPUT": "graph:late@2000"}
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "graphs.toml").write_text(SPEC.format(digest="cd" * 32))
    out = tmp_path / "results"
    swept = _cli("sweep", str(tmp_path / "graphs.toml"), "-i", str(tmp_path / "fleet.yml"), "--results", str(out))
    said = swept.stdout + swept.stderr
    assert swept.returncode == 1, said[-3000:]  # WRONG OUTPUT cells: exit 1
    assert "(eager, checks only)" in said

    cells = correctness.judged_cells(out / "graphs")
    eager = [c for c in cells if c["config"].get("probe_only")]
    graphs = [c for c in cells if not c["config"].get("probe_only")]
    assert len(eager) == len(graphs) == 2
    for c in eager:  # started with --enforce-eager, no windows, its checks clean
        assert "--enforce-eager" in c["config"]["extra_args"] and c["runs"] == []
        assert c["correctness"]["probed"] and all(not r["degenerate"] for r in c["correctness"]["long"])
        assert summary.cell_verdict(c) == "valid"
    for c in graphs:
        assert summary.cell_verdict(c) == summary.WRONG_OUTPUT
        assert any("kernel broke under CUDA graphs, not the model" in r for r in c["correctness"]["wrong"])
        [path] = [p for p in c["correctness"]["long_paths"] if p["path"] == "graphs"]
        assert 2000 - 16 <= path["first_divergence"] <= 2000 and path["follows"] in ("loop", "garbage")

    reported = _cli("report", str(out / "graphs"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    report = (out / "graphs" / "report.md").read_text()
    assert "eager, checks only" in report
    what_to_run = report.split("## What to run", 1)[1].split("## Problems", 1)[0]
    assert "--enforce-eager" not in what_to_run  # a checks-only start is never what to run
