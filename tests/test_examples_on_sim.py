"""The article's two sweeps (examples/gb10-*.toml) on the simulated Spark with --duration 1, through the
real CLI over real SSH, and what the report must then say: marlin for NVFP4, and its MTP round ranked with the
other axes held; triton with VLLM_USE_DEEP_GEMM=0 for FP8; the four FP8 backends that failed to start, with their
classes; the FP8 default dying without the DeepGEMM rule and running with it; b12x unstable. Both sweeps run at
once, one per test host, on the simulator's clock at TIME_SCALE: a window is --duration simulated seconds, a quarter
of that on the wall (the differences asserted are 2-3x; the noise of a half-second window is a few percent)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .sshd_hosts import SIM_HOST_VARS, inventory_for
from .terminal import ctrl_c_as_on_a_terminal

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agent.cli"]
TIME_SCALE = 4


@pytest.fixture(scope="module")
def example_results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("examples")


@pytest.fixture(scope="module")
def example_reports(ssh_fleet, example_results, tmp_path_factory) -> dict[str, str]:
    out = example_results
    scaled = tmp_path_factory.mktemp("inventory") / "scaled.yml"  # sim_inventory's hosts, on the faster clock
    scaled.write_text(yaml.safe_dump(inventory_for(ssh_fleet, {**SIM_HOST_VARS, "spark_sim_time_scale": TIME_SCALE})))
    procs = {}
    for name, host in (("gb10-nvfp4", "spark-a"), ("gb10-fp8", "spark-b")):
        procs[name] = subprocess.Popen(
            CLI
            + [
                "sweep",
                f"examples/{name}.toml",
                "-i",
                str(scaled),
                "--limit",
                host,
                "--duration",
                "2",
                "--results",
                str(out),
                "--no-progress",
                "--log-format",
                "json",
            ],
            cwd=REPO,
            preexec_fn=ctrl_c_as_on_a_terminal,  # stop_all stops it with SIGINT
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:  # both sweeps end before anything is asserted, and a test that gives up leaves no sweep running
        outputs = {name: proc.communicate(timeout=1800)[0] for name, proc in procs.items()}
    finally:
        stop_all(procs.values())
    reports = {}
    for name, proc in procs.items():
        assert proc.returncode in (0, 1), outputs[name][-3000:]  # 1: some cells failed to start, as they should
        report = subprocess.run(CLI + ["report", str(out / name)], cwd=REPO, capture_output=True, text=True)
        assert report.returncode == 0, report.stderr
        reports[name] = (out / name / "report.md").read_text()
    return reports


def stop_all(procs) -> None:
    """SIGINT to a sweep still running (timeout, interrupt): it stops its servers and exits 130, as on Ctrl-C."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_nvfp4_report_names_marlin_and_shows_b12x_unstable(example_reports):
    text = example_reports["gb10-nvfp4"]
    what_to_run = text.split("## What to run", 1)[1].split("## Plots", 1)[0]
    assert re.search(r"\*\*Run [^*\n]*\bmarlin\b", what_to_run), what_to_run[:2000]
    assert "#### backend: **marlin**" in what_to_run and "Held equal: checkpoint, speculative" in what_to_run
    assert "measured slower: **flashinfer_b12x**" in what_to_run
    # the MTP round: on/off ranked on marlin, each checkpoint held equal; its cells measured and valid
    assert "#### speculative:" in what_to_run and "Held equal: backend, checkpoint" in what_to_run
    medians = text.split("## Medians", 1)[1].split("##", 1)[0]
    assert len(re.findall(r"\| marlin speculative=mtp \| valid \|", medians)) == 3 * 5, medians[:3000]
    unstable = text.split("## Unstable points", 1)[1].split("##", 1)[0]
    assert re.search(r"/flashinfer_b12x[^\n]* c=\d+: spread", unstable), unstable[:2000]
    assert "CUTE_DSL_ARCH=sm_121a" in text and "FLASHINFER_DISABLE_VERSION_CHECK=1" in text


def test_fp8_report_names_triton_without_deep_gemm_and_lists_the_failures(example_reports):
    text = example_reports["gb10-fp8"]
    assert "**Run triton.**" in text
    what_to_run = text.split("## What to run", 1)[1].split("## Plots", 1)[0]
    assert "VLLM_USE_DEEP_GEMM=0" in what_to_run and "--moe-backend triton" in what_to_run
    failed = dict(re.findall(r"- failed to start: (\S+) env_variant=rules on fp8 \(class `(\w+)`\)", what_to_run))
    assert set(failed) == {"deep_gemm", "cutlass", "flashinfer_cutlass", "flashinfer_trtllm"}, failed
    assert failed["deep_gemm"] == "deep_gemm_assert"
    assert "measured slower: **marlin**" in what_to_run
    # the DeepGEMM round: the default (auto) runs with the rule (it loads triton) and dies without it
    assert "auto loaded triton: the same choice" in what_to_run
    assert "- failed to start: auto env_variant=no-deep-gemm-rule on fp8 (class `deep_gemm_assert`)" in what_to_run
    assert (
        "env_variant: with no-deep-gemm-rule the server failed to start (deep_gemm_assert), where rules ran"
        in what_to_run
    )


def test_both_sweeps_backfill_into_a_store_and_compare_across_it(example_reports, example_results, tmp_path):
    """The two trees back-filled into a fresh store; the store gives compare the very numbers the trees do."""
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    ingest = subprocess.run(
        [*CLI, "store", "ingest", str(example_results), "--store", store], cwd=REPO, capture_output=True, text=True
    )
    assert ingest.returncode == 0, ingest.stderr
    counts = re.search(r"(\d+) new cell\(s\), (\d+) updated, (\d+) already", ingest.stdout)
    assert counts, ingest.stdout
    cells = sum(int(n) for n in counts.groups())  # a fresh store: all new, but the count is what was indexed
    assert cells == len(list(example_results.glob("gb10-*/*/*/cell.toml")))
    # the live hook indexed every cell as it landed, into the default store of the results folder
    assert (example_results / "store.sqlite").is_file()
    for name in ("gb10-nvfp4", "gb10-fp8"):
        cmp = subprocess.run(
            [*CLI, "compare", str(example_results / name), f"sweep={name}", "--store", store, "--fail-on-regression"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert cmp.returncode == 0, cmp.stdout + cmp.stderr
        assert re.search(r"0 of [1-9]\d* configuration\(s\) regressed beyond the noise", cmp.stdout), cmp.stdout
    across = subprocess.run(
        [*CLI, "compare", "sweep=gb10-nvfp4", "sweep=gb10-fp8", "--store", store],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert across.returncode == 0, across.stderr  # different checkpoints: nothing shared, every cell one-sided
    assert "0 of 0 configuration(s) regressed beyond the noise" in across.stdout
