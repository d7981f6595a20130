"""Every answer right, or silent with a reason (issue 36), walked as a user: the wheel installed in a fresh venv, run
from a folder of the user's own, against three sshd "Sparks" (spark-a logs in as root, spark-b and spark-c as a
non-root user whose sudo needs a password), the simulator as the engine.

- Windows shorter than a request: TPOT and goodput are empty, and the report says why and which --duration would
  measure them; `report --rank-by goodput` ranks nothing and offers nothing to run.
- The same sweep name measured into two results folders stays two runs in the store: the live hook and a later
  `store ingest` agree (nothing new, counted true), `history` and the site show each run as itself.
- `compare` of a rerun that placed its cells on other hosts: every configuration compared (across hosts, with the
  host effect) or said as not compared, and the exit code under --fail-on-regression follows.
- A sweep with a WRONG OUTPUT cell exits 1 and counts it as wrong, not measured; so does `tune`, on two hosts of
  which one carries the docs' slow-host recipe (`spark_sim_speed`, docs/fleet-ranking.md), which keeps the host's
  environment whole.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .sshd_hosts import sim_fleet
from .test_sweep import write_spec
from .test_tune_fleet import docs_slow_host_vars
from .wheel_venv import shared_install, user_env

pytestmark = pytest.mark.integration


def spec(home: Path, name: str, digest: str) -> str:
    """test_sweep's spec, two backends at c=1 and 4 with 1 s windows, and 1024 output tokens: longer than a window."""
    path = write_spec(home, name, duration=1.0, repeats=2, concurrency=(1, 4))
    path.write_text(path.read_text().replace("output_len = 32", "output_len = 1024").replace("ab" * 32, digest))
    return path.name


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    return shared_install(tmp_path_factory)  # test_wheel's build and venv, when it ran first


@pytest.fixture(scope="module")
def three_sparks(tmp_path_factory):
    """spark-a logs in as root, spark-b and spark-c as a non-root user whose sudo needs a password."""
    with sim_fleet(tmp_path_factory.mktemp("answers"), port=8236) as fleet:
        yield fleet


@pytest.fixture
def user(tmp_path, installed):
    home = tmp_path / "user"
    home.mkdir()
    env = {**user_env(installed), "XDG_STATE_HOME": str(home / "state"), "COLUMNS": "300"}
    env["SPARK_AGENT_STORE"] = f"sqlite:///{home / 'team.sqlite'}"  # one store for every folder, as a team's

    def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(installed / "spark-agent"), *args], cwd=home, env=env, capture_output=True, text=True, timeout=timeout
        )

    cli.home = home  # type: ignore[attr-defined]
    return cli


def test_short_windows_two_folders_and_a_rerun_elsewhere(three_sparks, user):
    home = user.home
    rehearsal = spec(home, "rehearsal", "ab" * 32)
    inv = str(three_sparks.inventory)
    first = user("sweep", rehearsal, "-i", inv, "--results", "one", "--no-progress")
    assert first.returncode == 0, first.stderr[-3000:]
    again = user(
        "sweep", "rehearsal.toml", "-i", inv, "--results", "two", "--no-progress", "--limit", "spark-b,spark-c"
    )
    assert again.returncode == 0, again.stderr[-3000:]

    # 1 s windows, 1024 output tokens: no request finishes; goodput is never ranked, and the report says why
    goodput = user("report", "one/rehearsal", "--rank-by", "goodput")
    assert goodput.returncode == 0, goodput.stderr
    assert "undecided (goodput is not measured: no request finished inside any 1 s window" in goodput.stdout
    text = (home / "one" / "rehearsal" / "report.md").read_text()
    assert "**Run " not in text and "Command (" not in text
    window = re.search(r"--duration (\d+)\) would measure", text)
    assert window and int(window[1]) > 1, text
    assert "Not measured: TPOT, end-to-end latency and goodput (no request finished inside any 1 s window)" in text
    throughput = user("report", "one/rehearsal")
    assert throughput.returncode == 0 and "Not measured: TPOT" in throughput.stdout, throughput.stdout

    # two folders, one sweep name: two runs; the hook indexed both as they landed, ingest agrees and says so
    cells = len(list((home / "one").glob("rehearsal/*/*/cell.toml"))) + len(
        list((home / "two").glob("rehearsal/*/*/cell.toml"))
    )
    ingest = user("store", "ingest", "one", "two")
    assert ingest.returncode == 0, ingest.stderr
    assert f"0 new cell(s), 0 updated, {cells} already in the store as they are" in ingest.stdout, ingest.stdout
    history = user("history", "backend=marlin", "concurrency=1")
    assert history.returncode == 0, history.stderr
    assert len(set(re.findall(r"rehearsal \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", history.stdout))) == 2, history.stdout
    site = user("site", "--out", "site")
    assert site.returncode == 0, site.stderr
    assert len(list((home / "site" / "sweeps").glob("rehearsal-*/report.html"))) == 2

    # the rerun placed its cells on other hosts (each run kept its comparison set on one host): nothing links the
    # two hosts, so each configuration is said as not compared, on the console, and the gate fails
    cmp = user("compare", "one/rehearsal", "two/rehearsal", "--fail-on-regression")
    said = [line for line in cmp.stdout.splitlines() if line.startswith("not compared:")]
    compared = re.search(r"(\d+) of (\d+) configuration\(s\) regressed", cmp.stdout)
    assert compared, cmp.stdout + cmp.stderr
    assert int(compared[2]) + len(said) == 2  # marlin and flashinfer_b12x: each compared, or said with why
    assert cmp.returncode == (1 if said or int(compared[1]) else 0), cmp.stdout
    # a calibration measures every host's speed: then the same rerun is compared across hosts, the effect divided out
    calibrate = user("calibrate", rehearsal, "-i", inv, "--results", "one")
    assert calibrate.returncode == 0, calibrate.stderr[-3000:]
    cmp = user("compare", "one/rehearsal", "two/rehearsal", "--fail-on-regression")
    assert re.search(r"\d+ of 2 configuration\(s\) regressed", cmp.stdout), cmp.stdout + cmp.stderr
    assert "not compared:" not in cmp.stdout and " → spark-" in cmp.stdout, cmp.stdout


def test_a_sweep_with_wrong_outputs_exits_1(three_sparks, user, tmp_path):
    inventory = yaml.safe_load(three_sparks.inventory.read_text())
    for host in inventory["all"]["children"]["sparks"]["hosts"].values():
        host["spark_serve_env"] = {**host["spark_serve_env"], "SPARK_SIM_WRONG_OUTPUT": "marlin:1"}
    inv = tmp_path / "wrong.yml"
    inv.write_text(yaml.safe_dump(inventory))
    swept = user("sweep", spec(user.home, "wrong", "cd" * 32), "-i", str(inv), "--limit", "spark-b", "--no-progress")
    assert swept.returncode == 1, swept.stderr[-3000:]
    total = next(line.split() for line in swept.stderr.splitlines() if line.strip().startswith("total "))
    assert (int(total[1]), int(total[2]), int(total[3])) == (2, 1, 1), swept.stderr[-3000:]  # planned, measured, wrong
    assert "wrong output spark-b/" in swept.stderr

    # tune, as the docs give it, on two hosts, one of them the docs' slow host (docs/fleet-ranking.md: a host var
    # of its own, added to the group's spark_serve_env): every cell runs (the recipe keeps PYTHONPATH), and the wrong
    # output is exit 1 under tune's rule as under the sweep's
    inventory["all"]["children"]["sparks"]["hosts"]["spark-c"].update(docs_slow_host_vars())
    inv.write_text(yaml.safe_dump(inventory))
    tuned = user(
        "tune", "wrong.toml", "-i", str(inv), "--limit", "spark-b,spark-c", "--results", "tuned", "--no-progress"
    )
    assert tuned.returncode == 1, tuned.stderr[-3000:]
    assert "No module named" not in tuned.stderr and "failed spark-" not in tuned.stderr, tuned.stderr[-3000:]
    assert re.search(r"not valid spark-[bc]/[0-9a-f]{12}: wrong output", tuned.stderr), tuned.stderr[-3000:]
    assert "undecided" not in tuned.stderr, tuned.stderr[-3000:]  # settled: the exit is the wrong output's
    hosts = {p.parent.parent.name for p in (user.home / "tuned" / "wrong").glob("*/*/cell.toml")}
    assert hosts and hosts <= {"spark-b", "spark-c"}, hosts
