"""The README's demo path: `spark-agent sweep examples/quick.toml` on the embedded default inventory (localhost,
the simulated Spark, a ~ work dir), then `spark-agent report`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.judging import correctness

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


def beside_other_workers(tmp_path: Path) -> list[str]:
    """Under parallel workers (scripts/pytest.sh) other modules' simulators run on this machine, and the embedded
    default's `spark_host_scope: machine` rightly refuses to serve beside a model server it did not start: the same
    inventory with the scope of one work dir (as the sshd test hosts have), else nothing (the embedded default)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return []
    inv = yaml.safe_load((REPO / "inventory" / "local.yml").read_text())
    inv["all"]["hosts"]["localhost"].update(spark_host_scope="workdir", spark_workdir=str(tmp_path / "work"))
    path = tmp_path / "local.yml"
    path.write_text(yaml.safe_dump(inv))
    return ["-i", str(path)]


def test_quick_example_on_the_embedded_default(tmp_path):
    out = tmp_path / "results"
    sweep = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "sweep",
            "examples/quick.toml",
            *beside_other_workers(tmp_path),
            "--duration",
            "1",
            "--results",
            str(out),
            "--no-progress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert "marlin" in sweep.stdout and "c=4" in sweep.stdout  # the results table
    cells = correctness.judged_cells(out / "quick" / "localhost")
    assert sorted(c["config"]["moe_backend"] for c in cells) == ["flashinfer_b12x", "marlin"]
    for cell in cells:
        assert cell["verdict"] == "valid" and cell["facts"]["simulated"] is True
        assert [(r["concurrency"], r["repeat"]) for r in cell["runs"]] == [
            (1, 1),
            (1, 2),
            (1, 3),
            (4, 1),
            (4, 2),
            (4, 3),
        ]
    report = subprocess.run(
        [sys.executable, "-m", "agent.cli", "report", str(out / "quick")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    assert (out / "quick" / "report.html").exists() and "## What to run" in (out / "quick" / "report.md").read_text()
