"""A day with a fleet (issue 26): the paths between the commands, walked through the CLI as a user walks them, on
real sshd hosts with the simulated Spark. Each test is one numbered path of the issue."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agent.hostside import runner, supervise
from agent.results import tree as results

from .fault_drills import parse_summary
from .sshd_hosts import sim_fleet
from .terminal import ctrl_c_as_on_a_terminal
from .test_sweep import write_spec

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agent.cli"]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Three sshd hosts as simulated GB10s, on port 8200 (never another fleet test's). spark-b and spark-c log in as
    a non-root user whose sudo needs a password (nothing the paths do may need root)."""
    with sim_fleet(tmp_path_factory.mktemp("day"), port=8200) as fleet:
        yield fleet


@pytest.fixture
def user(tmp_path):
    """Where the user stands: a folder of their own (./results is theirs) and their own state folder."""
    home = tmp_path / "user"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(home / "state")}

    def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *args], cwd=home, env=env, capture_output=True, text=True, timeout=timeout)

    cli.home = home  # type: ignore[attr-defined]
    return cli


def printed_commands(stderr: str) -> dict[str, list[str]]:
    """The commands the detach hint printed (`  progress:  spark-agent status ...`), as argv to paste."""
    found = {}
    for line in stderr.splitlines():
        what, _, command = line.strip().partition(":")
        if command.strip().startswith("spark-agent "):
            found[what] = shlex.split(command)[1:]
    return found


def stored(out: Path, sweep: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in sorted((out / sweep).glob(f"*/*/{results.CELL_FILE}")):
        found.setdefault(f.parent.name, []).append(f.parent.parent.name)
    return found


def finished_cells(status: str) -> int:
    """The cells of the hosts whose runner finished all it was handed, as `status` prints them."""
    return sum(int(done) for done, of in re.findall(r"finished, (\d+)/(\d+) done", status) if done == of)


def test_collect_after_a_duration_sweep_with_the_printed_commands(tmp_path, three, user):
    """Paths 1-3. A --duration sweep handed out with --detach: the commands it prints are pasted as they are;
    status shows the cells by label; collect re-plans the cells with the window handed out (the spec's own is 30 s)
    and brings every cell back; a re-run without --duration follows the same cells. status finds the sweep without
    --results (and says where it read it), refuses to guess between two folders, and takes -i only if it matches."""
    out = tmp_path / "elsewhere" / "results"
    spec = write_spec(tmp_path, "day-duration", duration=30.0, concurrency=(1,), warmup=0)
    inv = str(three.inventory)
    detached = user(
        "sweep",
        str(spec),
        "-i",
        inv,
        "--limit",
        "spark-a,spark-b",
        "--results",
        str(out),
        "--detach",
        "--duration",
        "0.3",
    )
    assert detached.returncode == 0, detached.stderr[-3000:]
    commands = printed_commands(detached.stderr)
    assert set(commands) == {"progress", "results"}, detached.stderr
    assert commands["progress"][:2] == ["status", "day-duration"] and "--results" in commands["progress"]

    labels = ("uns-fast marlin", "uns-fast flashinfer_b12x")
    deadline = time.monotonic() + 120
    seen_label = False
    while time.monotonic() < deadline:
        status = user(*commands["progress"])
        assert status.returncode == 0, status.stderr[-3000:]
        assert f"({out})" in status.stdout.splitlines()[0], status.stdout  # the folder it read
        seen_label = seen_label or any(f"now {label} " in status.stdout for label in labels)
        if seen_label or finished_cells(status.stdout) == 2:
            break
        time.sleep(0.3)
    # both cells may run on one host (the backend pair is compared on one host): a look may not catch either running
    assert seen_label or finished_cells(status.stdout) == 2, status.stdout

    collected = user(*commands["results"])
    assert collected.returncode == 0, collected.stderr[-3000:]
    assert "collected 2 new cell(s)" in collected.stderr, collected.stderr[-3000:]
    assert sorted(stored(out, "day-duration")) and len(stored(out, "day-duration")) == 2
    configs = [results.read_toml(p)["config"] for p in (out / "day-duration").glob(f"*/*/{results.CELL_FILE}")]
    assert [c["duration_s"] for c in configs] == [0.3, 0.3], configs

    # no --results: found through where --detach wrote it; -i must be the sweep's own
    found = user("status", "day-duration")
    assert found.returncode == 0 and f"({out})" in found.stdout, found.stderr + found.stdout
    other_inv = tmp_path / "other.yml"
    shutil.copy(inv, other_inv)
    wrong = user("collect", "day-duration", "-i", str(other_inv))
    assert wrong.returncode == 2 and inv in wrong.stderr and "-i" in wrong.stderr, wrong.stderr
    assert user("collect", "day-duration", "-i", inv).returncode == 0
    # the same sweep's record under ./results too: two folders, no guessing
    here = user.home / "results" / ".fleet"  # type: ignore[attr-defined]
    here.mkdir(parents=True)
    shutil.copy(out / ".fleet" / "day-duration.json", here / "day-duration.json")
    two = user("status", "day-duration")
    assert two.returncode == 2 and str(out) in two.stderr and "--results" in two.stderr, two.stderr
    shutil.rmtree(here.parent)

    # a re-run without --duration: the cells handed out, followed and found measured (not 30 s windows again)
    t0 = time.monotonic()
    again = user("sweep", str(spec), "-i", inv, "--limit", "spark-a,spark-b", "--results", str(out), "--no-progress")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "using --duration 0.3" in again.stderr, again.stderr[-3000:]
    assert parse_summary(again.stderr)["total"]["skipped"] == 2, again.stderr[-3000:]
    assert time.monotonic() - t0 < 60


def test_a_follow_up_sweep_counts_what_it_collected_as_measured(tmp_path, three, user):
    """Path 5. Handed out with --detach, then the same sweep run attached at once: it follows the runners, brings
    their cells back and counts them as measured while detached, not as skipped."""
    out = tmp_path / "results"
    spec = write_spec(tmp_path, "day-followup", duration=0.3, concurrency=(1,), warmup=0)
    args = [str(spec), "-i", str(three.inventory), "--limit", "spark-c", "--results", str(out)]
    detached = user("sweep", *args, "--detach")
    assert detached.returncode == 0, detached.stderr[-3000:]
    follow = user("sweep", *args, "--no-progress")
    assert follow.returncode == 0, follow.stderr[-3000:]
    row = parse_summary(follow.stderr)["spark-c"]
    assert row["planned"] == 2 and row["measured"] == 2 and row["skipped"] == 0, follow.stderr[-3000:]
    assert "2 of these cell(s) were measured while detached" in follow.stderr, follow.stderr[-3000:]
    assert len(stored(out, "day-followup")) == 2


def test_a_server_that_cannot_start_names_the_line_that_says_why(tmp_path, three, user):
    """Path 8. The simulated server's python cannot import the agent (no PYTHONPATH on the host): the cell fails
    with the interpreter's own line as its root cause, in cell.toml and in what the CLI prints."""
    inv = yaml.safe_load(Path(three.inventory).read_text())
    inv["all"]["children"]["sparks"]["hosts"]["spark-c"]["spark_serve_env"] = {}
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump(inv))
    out = tmp_path / "results"
    spec = write_spec(tmp_path, "day-nostart", backends=("marlin",), duration=0.3, concurrency=(1,), warmup=0)
    proc = user("sweep", str(spec), "-i", str(broken), "--limit", "spark-c", "--results", str(out), "--no-progress")
    try:
        assert proc.returncode == 1, proc.stderr[-3000:]
        (cell,) = (out / "day-nostart" / "spark-c").glob(f"*/{results.CELL_FILE}")
        record = results.read_toml(cell)
        assert "No module named 'agent'" in record["failure_root_cause"], record
        assert "No module named 'agent'" in proc.stdout + proc.stderr, proc.stdout + proc.stderr[-3000:]
    finally:
        runner.stop(str(three.host("spark-c").workdir), "day-nostart")


def test_output_a_person_reads(tmp_path, three, user):
    """Path 10. Piped, the table keeps whole names; the console has no info log lines unless -v; report prints
    what to run before the file paths; check exits 1 when it lists a blocker; Ctrl-C stops the sweep with no
    Ansible internals and names the cell it cut short as stopped."""
    out = tmp_path / "results"
    inv = str(three.inventory)
    spec = write_spec(tmp_path, "day-output", duration=0.3, concurrency=(1,), warmup=0)
    spec.write_text(spec.read_text().replace("[matrix]\n", '[matrix]\nattention_backend = ["flash_attn"]\n'))
    done = user("sweep", str(spec), "-i", inv, "--limit", "spark-a", "--results", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "flashinfer_b12x attention=flash_attn" in done.stdout and "…" not in done.stdout, done.stdout
    assert "[info" not in done.stderr and "playbook_done" not in done.stderr, done.stderr[-3000:]
    verbose = user("sweep", str(spec), "-i", inv, "--limit", "spark-a", "--results", str(out), "-v")
    assert "playbook_done" in verbose.stderr, verbose.stderr[-3000:]

    report = user("report", str(out / "day-output"))
    assert report.returncode == 0, report.stderr[-3000:]
    first = report.stdout.splitlines()[0]
    assert "nvfp4: " in first and ("run uns-fast" in first or "undecided" in first), report.stdout
    assert report.stdout.rstrip().endswith("report.html")

    docker = yaml.safe_load(Path(inv).read_text())
    docker["all"]["children"]["sparks"]["hosts"]["spark-a"].update(
        spark_runtime="docker", spark_docker_host="unix:///nonexistent/docker.sock"
    )
    blocked = tmp_path / "docker.yml"
    blocked.write_text(yaml.safe_dump(docker))
    check = user("check", "-i", str(blocked), "--limit", "spark-a")
    assert check.returncode == 1 and "docker is not usable" in " ".join(check.stdout.split()), check.stdout
    assert user("check", "-i", inv, "--limit", "spark-a").returncode == 0

    # 30 s windows: the Ctrl-C below comes a second into the first one, however loaded the machine (it never waits
    # them out); with 3 s windows a busy machine once saw the whole sweep end before the Ctrl-C landed
    slow = write_spec(tmp_path, "day-stop", duration=30.0, concurrency=(1,), warmup=0)
    proc = subprocess.Popen(
        [*CLI, "sweep", str(slow), "-i", inv, "--limit", "spark-b", "--results", str(out)],
        cwd=user.home,  # type: ignore[attr-defined]
        env={**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path / "state")},
        preexec_fn=ctrl_c_as_on_a_terminal,  # CI starts the suite in the background: SIGINT ignored, inherited
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    b = three.host("spark-b")
    try:
        deadline = time.monotonic() + 120
        while not supervise.find_engines(str(b.workdir), scope="workdir") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        time.sleep(1.0)  # measuring: the runner is mid-cell
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        runner.stop(str(b.workdir), "day-stop")
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "ansible" not in err.lower(), err[-3000:]
    assert re.search(r"^  stopped spark-b/[0-9a-f]{12}: the sweep was interrupted", err, re.M), err[-3000:]
    (lost,) = list((out / "day-stop" / "spark-b").glob(f"*/{results.LOST_FILE}"))
    assert results.read_toml(lost)["reason"] == "interrupted"


def test_the_shipped_examples_raise_no_warning_and_a_rule_warns_once(tmp_path, three, user):
    """Path 9. The nvfp4 example (3 checkpoints, MTP on) on three hosts: no warning before or while it runs (the
    rule that gives the draft head its MoE backend is applied and recorded, not warned about). A spec that sets the
    draft's backend wrong on three checkpoints gets one warning for that rule, naming all three."""
    out = tmp_path / "results"
    example = REPO / "examples" / "gb10-nvfp4.toml"
    run = user("sweep", str(example), "-i", str(three.inventory), "--results", str(out), "--duration", "0.2")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[warning" not in run.stderr, run.stderr[-3000:]
    cells = [results.read_toml(p) for p in (out / "gb10-nvfp4").glob(f"*/*/{results.CELL_FILE}")]
    # nine cells, and on three equal hosts a reference cell (nv marlin at c=16) on two of them (planning/blocks.py)
    full = [c for c in cells if len(c["config"]["concurrency"]) > 1]
    assert len(full) == 9 and len(cells) - len(full) == 2, [c["config"]["concurrency"] for c in cells]
    assert sum("nvfp4-mtp-draft-triton" in " ".join(c.get("notes", [])) for c in full) == 3
    for name in ("gb10-fp8.toml", "quick.toml"):
        env = user("env", str(REPO / "examples" / name), "--host", "spark-a", "--simulate-gpu", "gb10")
        assert env.returncode == 0 and "warning" not in (env.stdout + env.stderr).lower(), env.stdout + env.stderr

    wrong = tmp_path / "wrong.toml"
    wrong.write_text(
        example.read_text().replace(
            '{ method = "mtp", num_speculative_tokens = 2 }',
            '{ method = "mtp", num_speculative_tokens = 2, moe_backend = "marlin" }',
        )
    )
    env = user("env", str(wrong), "--host", "spark-a", "--simulate-gpu", "gb10", "-v")
    said = [line for line in (env.stdout + env.stderr).splitlines() if "loads only quantized weights" in line]
    assert len(said) == 1 and "nv, uns, uns-fast" in said[0], env.stdout + env.stderr


def test_history_and_site_tell_mtp_on_from_off(tmp_path, three, user):
    """Path 7. One backend with MTP off and on, measured on a host: history shows two configurations, each labelled
    with the axis that differs, and filters on it (speculative=off); the site's configurations read the same."""
    out = tmp_path / "results"
    spec = write_spec(tmp_path, "day-mtp", backends=("marlin",), duration=0.3, concurrency=(1,), warmup=0)
    spec.write_text(
        spec.read_text().replace(
            "[matrix]\n", '[matrix]\nspeculative = ["off", { method = "mtp", num_speculative_tokens = 2 }]\n'
        )
    )
    run = user("sweep", str(spec), "-i", str(three.inventory), "--limit", "spark-c", "--results", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    store = ["--results-root", str(out)]
    both = user("history", "sweep=day-mtp", *store)
    assert both.returncode == 0, both.stderr[-3000:]
    assert "uns-fast / marlin speculative=off" in both.stdout and "uns-fast / marlin speculative=mtp" in both.stdout
    off = user("history", "sweep=day-mtp", "speculative=off", *store)
    assert off.returncode == 0 and "speculative=mtp" not in off.stdout and "2 row(s)" not in off.stdout, off.stdout
    assert "1 row(s)" in off.stdout, off.stdout
    none = user("history", "sweep=day-mtp", "speculative=eagle", *store)
    assert none.returncode == 2 and "speculative=eagle" in none.stderr, none.stderr
    site = tmp_path / "site"
    assert user("site", "--out", str(site), *store).returncode == 0
    index = (site / "index.html").read_text()
    assert "speculative=off" in index and "speculative=mtp" in index


def test_logs_follow_follows_the_host_to_the_end_of_its_sweep(tmp_path, three, user):
    """Path 4. `logs HOST --follow` on a host running a detached sweep of three cells: past each cell's "Shutting
    down" it goes on to the host's next cell, and it ends by itself when the sweep there ends."""
    out = tmp_path / "results"
    backends = ("marlin", "flashinfer_b12x", "flashinfer_cutlass")  # the last fails to start: over in a second
    spec = write_spec(tmp_path, "day-logs", backends=backends, duration=1.0, concurrency=(1, 2))
    args = ["-i", str(three.inventory)]
    detached = user("sweep", str(spec), *args, "--limit", "spark-b", "--results", str(out), "--detach")
    assert detached.returncode == 0, detached.stderr[-3000:]
    followed = user("logs", "spark-b", *args, "--follow", "-n", "5", timeout=240)
    assert followed.returncode == 0, followed.stderr[-3000:]
    text = followed.stdout
    heads = re.findall(r"^==> spark-b: cell ([0-9a-f]{12})", text, re.M)
    assert len(heads) >= 2 and len(set(heads)) == len(heads), text[-3000:]
    assert text.rstrip().endswith("==> spark-b: its sweep has ended <=="), text[-3000:]
    # every cell the sweep ran after the follow began is in it, the last one included (not only the first)
    progress = runner.read_progress(str(three.host("spark-b").workdir), "day-logs")
    last = max(progress["done"], key=lambda c: progress["done"][c]["finished"])
    assert progress["state"] == "finished" and heads[-1] == last, (heads, progress)
    assert text.count("Shutting down") >= len(heads) - 1
