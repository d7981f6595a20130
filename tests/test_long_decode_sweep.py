"""Right all the way down, end to end over real SSH and Ansible on the simulated Spark (its clock 200x faster, so an
8k-token decode takes seconds):

- a kernel that goes bad at token 6000 passes the short probe, and the long-decode check names it WRONG OUTPUT
  with the position;
- a draft-path fault (wrong only with speculative decoding on) is caught on the spec-on cell and blamed on the
  draft path, while the target model's spec-off cell stays valid;
- a hostile host that answers the shipped questions perfectly without running the model (its continuations are
  its own) is neither the reference nor the answer: the consensus of the two honest hosts is;
- the healthy cells stay valid, and answer the task set at their highest concurrency as well as alone.
One sweep, every cell on all three hosts (--replicas 3), so the suite pays for one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from agent.judging import correctness, summary

from .sshd_hosts import REPO, SIM_HOST_VARS, inventory_for, start_fleet, stop_sim_fleet

pytestmark = pytest.mark.integration

SCALE = 200  # the simulator's clock: an 8k-token decode at GB10 rates takes about a second
FAULTS = "marlin:late@6000,draft:late@3000"

SPEC = """
[sweep]
name = "deep"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.29.0"
[[checkpoints]]
name = "nv"
model = "nv"
quant = "nvfp4"
[server]
max_model_len = 8448
max_num_seqs = 8
[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
speculative = ["off", {{ method = "mtp", num_speculative_tokens = 1 }}]
concurrency = [2]
duration_s = 200.0  # simulated seconds: one real second
warmup = 1
repeats = 1
[load]
prompt_len = 64
output_len = 32
[correctness]
long_decode = true
long_prompts = 1
task_gate = true
"""


@pytest.fixture(scope="module")
def fleet3(tmp_path_factory):
    fleet = start_fleet(tmp_path_factory.mktemp("deep"), count=3)
    try:
        yield fleet
    finally:
        stop_sim_fleet(fleet)


def _inventory(fleet, tmp_path, env: dict[str, str], hostile: str = "") -> str:
    inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8370, "spark_sim_time_scale": SCALE})
    for name, host in inv["all"]["children"]["sparks"]["hosts"].items():
        host["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], **env}
        if name == hostile:
            host["spark_serve_cmd"] = ["/usr/bin/python3", "-m", "tests.forged_engine", "serve"]  # forged answers
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="300")
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.attack("correctness: a host answers the shipped questions perfectly to become everyone's reference")
def test_late_and_draft_faults_are_caught_and_a_hostile_host_is_not_the_reference(tmp_path, fleet3):
    inv = _inventory(fleet3, tmp_path, {"SPARK_SIM_WRONG_OUTPUT": FAULTS}, hostile="spark-c")
    spec = tmp_path / "deep.toml"
    spec.write_text(SPEC.format(digest="ab" * 32))
    out = tmp_path / "results"
    swept = _cli("sweep", str(spec), "-i", inv, "--replicas", "3", "--results", str(out), "--no-progress")
    # the faults make cells WRONG OUTPUT, and a sweep with a wrong cell exits 1 (README: exit codes)
    assert swept.returncode == 1, swept.stdout[-3000:] + swept.stderr[-3000:]
    said = swept.stdout + swept.stderr
    assert re.search(r"total\s+\d+\s+\d+\s+[1-9]", said), said[-3000:]  # counted as wrong

    cells = correctness.judged_cells(out / "deep")
    by: dict[tuple[str, bool], list[dict]] = {}
    for c in cells:
        if c["host"] != "spark-c":
            by.setdefault((c["config"]["moe_backend"], bool(c["config"]["speculative"])), []).append(c)
    assert set(by) == {("marlin", False), ("marlin", True), ("flashinfer_b12x", False), ("flashinfer_b12x", True)}
    assert all(len(found) == 2 for found in by.values())  # on spark-a and spark-b

    # the late fault: the short probe sees nothing, the long decode names the position
    for late in by[("marlin", False)]:
        c = late["correctness"]
        assert c["score"] == 1.0 and c["degenerate"] == 0, "the short probe passes: the fault is late"
        assert summary.cell_verdict(late) == summary.WRONG_OUTPUT
        [row] = [r for r in c["long"] if r["path"] == "c1"]
        assert row["units"] == "tokens" and row["tokens"] == 8448 - 256
        assert 6000 - 16 <= row["degenerate_at"] <= 6000, row
        assert row["degenerate"] in ("loop", "noise") and row["excerpt"]
        assert any(f"after token {row['degenerate_at']}" in r for r in c["wrong"]), c["wrong"]
        assert c["broke_first"] == "reference" and c["long_seconds"] > 0

    # the draft fault: wrong with spec on, and blamed on the draft path; the target model alone stays valid
    for spec_on in by[("flashinfer_b12x", True)]:
        c = spec_on["correctness"]
        assert summary.cell_verdict(spec_on) == summary.WRONG_OUTPUT
        assert any("draft path broke, not the target model" in r for r in c["wrong"]), c["wrong"]
        assert c["broke_first"] == "speculative"
        [spec_path] = [p for p in c["long_paths"] if p["path"] == "speculative"]
        assert 3000 - 16 <= spec_path["first_divergence"] <= 3000 and spec_path["follows"] in ("loop", "garbage")

    # the healthy path: valid, its long outputs clean, its batch path as its alone path; and it is the reference,
    # by the consensus of the two honest hosts, though the hostile host's self-score is as perfect
    forged = [c for c in cells if c["host"] == "spark-c"]
    assert all(c["correctness"]["score"] == 1.0 for c in forged)
    for healthy in by[("flashinfer_b12x", False)]:
        c = healthy["correctness"]
        assert summary.cell_verdict(healthy) == "valid", c.get("wrong")
        assert all(not r["degenerate"] for r in c["long"]) and {r["path"] for r in c["long"]} == {"c1", "batch"}
        assert [p["follows"] for p in c["long_paths"] if p["path"] == "batch"] == ["identical"]
        assert c["broke_first"] == ""
        assert c["batch_concurrency"] == 2 and c["batch_score"] == 1.0 and c["batch_answered"] == 48
        assert c["reference_cell"] in {h["cell_id"] for h in by[("flashinfer_b12x", False)]}
        assert "across 2 hosts" in c["consensus"], c["consensus"]
    for c in forged:
        assert summary.cell_verdict(c) == summary.WRONG_OUTPUT
    [forged_healthy] = [
        c for c in forged if c["config"]["moe_backend"] == "flashinfer_b12x" and not c["config"]["speculative"]
    ]
    assert forged_healthy["correctness"]["suspicious"], forged_healthy["correctness"]

    reported = _cli("report", str(out / "deep"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    report = (out / "deep" / "report.md").read_text()
    listed = report.split("## WRONG OUTPUT cells (never ranked)", 1)[1].split("\n## ", 1)[0]
    assert "after token" in listed and "draft path broke" in listed and "agrees with no other cell" in listed
    assert "### Long decode" in report
    what_to_run = report.split("## What to run", 1)[1].split("## Problems", 1)[0]
    # the answer is the honest one: the hostile cells are never recommended, the healthy backend is the one valid
    assert "Nothing to compare.** flashinfer_b12x is the only valid value measured" in what_to_run, what_to_run
    assert "with mtp the server gave WRONG OUTPUT" in what_to_run  # not "failed to start"
