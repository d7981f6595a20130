"""The fleet keeps the answer: examples/quick.toml over one, two and three equal sshd hosts (the simulated GB10 at its
calibrated rate, which sleeps) gives the same "what to run"; the split plan measures a reference cell, the report says
which comparisons crossed hosts and the host effect it divided out; a 5% slower host is a measured effect that does
not flip the answer; a 40% slower host is refused with the reason. Through the CLI, as a user runs it."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.hostside import supervise

from .sshd_hosts import SIM_HOST_VARS, inventory_for, start_fleet, stop_fleet

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agent.cli"]
QUICK = REPO / "examples" / "quick.toml"
SPEEDS = {"spark-a": 1.0, "spark-b": 0.95, "spark-c": 0.6}  # spark-b: 5% slower; spark-c: not one kind of machine


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Three sshd hosts of one fingerprint (port 8200: never another module's), each with its own sim speed."""
    fleet = start_fleet(tmp_path_factory.mktemp("three"), count=3)
    try:
        inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8200})
        for name, host_vars in inv["all"]["children"]["sparks"]["hosts"].items():
            host_vars["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], "SPARK_SIM_SPEED": str(SPEEDS[name])}
        assert fleet.inventory is not None
        fleet.inventory.write_text(yaml.safe_dump(inv))
        yield fleet
    finally:
        for h in fleet.hosts:
            with contextlib.suppress(Exception):
                supervise.stop(str(h.workdir))
        stop_fleet(fleet)


def sweep_and_report(fleet, out: Path, limit: str) -> tuple[str, str]:
    """sweep quick.toml on the hosts in `limit`, then report: (the sweep's output, report.md)."""
    args = ["sweep", str(QUICK), "-i", str(fleet.inventory), "--limit", limit, "--results", str(out)]
    run = subprocess.run([*CLI, *args, "--duration", "1"], cwd=REPO, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr
    rep = subprocess.run([*CLI, "report", str(out / "quick")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    return run.stdout + run.stderr, (out / "quick" / "report.md").read_text()


def answer(report: str) -> str:
    found = re.search(r"\*\*(Run .+?|Cannot rank)\.?\*\*", report)
    assert found, report[:2000]
    return found.group(1)


def test_equal_hosts_give_the_one_host_answer_and_say_what_crossed(tmp_path, three):
    _, one = sweep_and_report(three, tmp_path / "one", "spark-a")
    said, two = sweep_and_report(three, tmp_path / "two", "spark-a,spark-b")
    assert answer(one) == answer(two) == "Run marlin"
    # the plan was stated, and split the two backends with a reference cell on the second host
    assert "reference" in said and "spread over 2 hosts" in said
    refs = list((tmp_path / "two" / "quick").glob("*/*/cell.toml"))
    assert len(refs) == 3  # two cells and one reference
    # the report names the comparisons that crossed hosts and the effect divided out: spark-b is 5% slower
    assert "Across hosts:" in two and "crossed hosts" in two
    effect = re.search(r"host effect: spark-(\w) ran ([\d.]+)% ± ([\d.]+)% (slower|faster) than spark-(\w)", two)
    assert effect, two
    signed = float(effect.group(2)) * (-1 if effect.group(4) == "slower" else 1)
    if effect.group(1) == "a":  # the base is whichever host is best connected: the sign turns with it
        signed = -signed
    assert -9.0 < signed < -1.0, effect.group(0)  # the sim's 0.95, within the repeats' noise


def test_a_host_40pct_slower_is_refused_with_the_reason(tmp_path, three):
    _, report = sweep_and_report(three, tmp_path / "slow", "spark-a,spark-c")
    assert "not one kind of machine" in report, report
    # what one host could compare on its own (the reference level, on spark-c) is still ranked there
    assert answer(report) in ("Run marlin", "Cannot rank")
