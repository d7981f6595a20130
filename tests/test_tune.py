"""spark-agent tune end to end over real SSH and Ansible against the simulated Spark: it screens the first
checkpoint's pair, stops the backend that loses beyond the margin, skips the cells that cannot change the answer,
ends with the report's recommendation, and a re-run (resume) measures nothing again. Bad settings exit 2 first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.judging import correctness
from agent.results import tree as results

from .test_sweep import engines_running

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agent.cli"]

SPEC = """
[sweep]
name = "{name}"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "nv"
model = "nv"
quant = "nvfp4"
[[checkpoints]]
name = "uns"
model = "uns"
quant = "nvfp4"
[server]
max_model_len = 8192
max_num_seqs = 8
[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
concurrency = [1, 2, 4, 8]
duration_s = {duration}
warmup = 1
repeats = 3
[load]
prompt_len = 64
output_len = 32
[env]
SPARK_SIM_SEED = "313"   # the simulator's noise draws: b12x's 1.8x spread at two windows settles ~86% of seeds
"""


def write_spec(tmp_path: Path, name: str, duration: float = 1.5) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, digest="cd" * 32, duration=duration))
    return path


def tune(spec: Path, inventory: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "tune", str(spec), "-i", str(inventory), "--limit", "spark-a", "--results", str(out), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_tune_screens_stops_the_loser_and_skips_what_cannot_matter(tmp_path, sim_inventory, ssh_fleet):
    spec, out = write_spec(tmp_path, "tuned"), tmp_path / "results"
    proc = tune(spec, sim_inventory, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {
        (c["config"]["checkpoint"], c["config"]["moe_backend"]): c for c in correctness.judged_cells(out / "tuned")
    }
    assert sorted(cells) == [("nv", "flashinfer_b12x"), ("nv", "marlin"), ("uns", "marlin")], proc.stderr[-4000:]
    screened = cells[("nv", "flashinfer_b12x")]  # the screen: lowest and highest level, two windows each
    assert screened["config"]["concurrency"] == [1, 8] and screened["config"]["repeats"] == 2, proc.stderr[-4000:]
    assert sorted((r["concurrency"], r["repeat"]) for r in screened["runs"]) == [(1, 1), (1, 2), (8, 1), (8, 2)]
    # the winner gets the levels the screen left out (its command is measured at every level)
    assert sorted({r["concurrency"] for r in cells[("nv", "marlin")]["runs"]}) == [1, 2, 4, 8]
    # uns marlin has no rival left, but it is uns's answer on the checkpoint question: every level, in the same
    # step as nv marlin's full one (the screen taught what it teaches), --min-repeats windows
    lone = cells[("uns", "marlin")]
    assert sorted((r["concurrency"], r["repeat"]) for r in lone["runs"]) == [
        (lv, k) for lv in (1, 2, 4, 8) for k in (1, 2)
    ]
    ats = {s["label"]: s["at"] for s in results.read_toml(out / "tuned" / "tune.toml")["steps"]}
    assert len(set(ats.values())) == 2, ats  # two rounds: the screen, then the full step and the lone cell
    record = results.read_toml(out / "tuned" / "tune.toml")
    assert [s["label"] for s in record["stopped"]] == ["nv flashinfer_b12x"]
    skipped = {s["label"]: s["reason"] for s in record["skipped"]}
    assert set(skipped) == {"uns flashinfer_b12x"}
    assert "lost to nv marlin at every measured level" in skipped["uns flashinfer_b12x"]
    assert record["open_points"] == [] and record["settings"]["looks"] == 4
    report = (out / "tuned" / "report.md").read_text()
    assert "**Run marlin" in report, report
    assert "stopped nv flashinfer_b12x" in proc.stderr and "skipped uns flashinfer_b12x" in proc.stderr
    assert proc.stderr.count("plan_note") <= 1 and "[warning" not in proc.stderr  # said once, as plain lines
    assert engines_running(ssh_fleet) == []

    # warm starts: a model's cells share the image's cache folder; its first start compiled, the later ones loaded
    # the graphs (nv marlin's first start is replaced by its full step's; uns marlin is uns's first and only start)
    cache = {k: c["startup"]["compile_cache"] for k, c in cells.items()}
    assert cache == {("nv", "flashinfer_b12x"): "warm", ("nv", "marlin"): "warm", ("uns", "marlin"): "cold"}, cache
    for c in cells.values():
        assert c["startup"]["weights_s"] > 0 and c["startup"]["graph_capture_s"] > 0 and c["startup"]["kv_cache_s"] >= 0
        assert "VLLM_CACHE_ROOT=" in (Path(c["dir"]) / "launch.txt").read_text()

    # clean-cache: the cache of an image no kept spec pins is pruned
    other = write_spec(tmp_path, "other").read_text().replace("cd" * 32, "ef" * 32)
    (tmp_path / "other.toml").write_text(other)
    listed = clean_cache(sim_inventory, "--prune", "--keep", str(tmp_path / "other.toml"), "--dry-run")
    assert listed.returncode == 0 and "cdcdcdcdcdcdcdcd" in listed.stdout and "remove" in listed.stdout
    pruned = clean_cache(sim_inventory, "--prune", "--keep", str(tmp_path / "other.toml"))
    assert pruned.returncode == 0, pruned.stderr
    assert "cdcdcdcdcdcdcdcd" not in clean_cache(sim_inventory).stdout

    # resume: the same data gives the same decisions, nothing is measured again
    before = {p: p.stat().st_mtime_ns for p in (out / "tuned").rglob("cell.toml")}
    again = tune(spec, sim_inventory, out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in (out / "tuned").rglob("cell.toml")} == before
    assert "tune: 0 cell runs" in again.stderr


def clean_cache(inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "clean-cache", "-i", str(inventory), "--limit", "spark-a", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--budget", "5s"], "cannot fit even one cell"),
        (["--confidence", "1.5"], "outside (0, 1)"),
        (["--min-repeats", "4", "--max-repeats", "3"], "above --max-repeats"),
    ],
)
def test_bad_settings_exit_2_before_touching_a_host(tmp_path, extra, fragment):
    # an inventory whose only host cannot be reached: touching it would fail differently
    inventory = tmp_path / "nowhere.yml"
    inventory.write_text("all:\n  hosts:\n    spark-a: {ansible_host: 127.0.7.250, ansible_port: 9}\n")
    out = tmp_path / "results"
    proc = tune(write_spec(tmp_path, "bad"), inventory, out, *extra)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spark-agent: error:") and fragment in lines[0]
    assert not out.exists()
