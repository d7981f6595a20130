"""`watch`'s scheduling, checked as files and exit codes: the systemd user timer written and removed (never enabled),
the cron line's schedule, a second watch refused by the lock (exit 75), bad input exit 2 before any host."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.errors import UserError
from agent.running import timer
from agent.running import watch as watching

from .test_sweep import write_spec

pytestmark = pytest.mark.unit

INVENTORY = "all:\n  hosts:\n    spark-a:\n      ansible_connection: local\n"


@pytest.fixture()
def setup(tmp_path, monkeypatch) -> tuple[list[str], Path]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY)
    spec = write_spec(tmp_path, "watched")
    argv = ["watch", str(spec), "-i", str(inventory), "--track", "registry.example/vllm:nightly"]
    return argv + ["--results", str(tmp_path / "results")], tmp_path


def test_install_timer_writes_a_systemd_user_timer_and_remove_takes_it_away(setup, crontab, capsys):
    argv, tmp_path = setup
    assert main([*argv, "--install-timer", "6h", "--timer-kind", "systemd", "--budget", "2h"]) == 0
    units = tmp_path / "config" / "systemd" / "user"
    service = (units / "spark-agent-watch-watched.service").read_text()
    timer_ = (units / "spark-agent-watch-watched.timer").read_text()
    assert "OnCalendar=*-*-* 00/6:00:00\nPersistent=true" in timer_ and "WantedBy=timers.target" in timer_
    assert "OnUnitActiveSec" not in timer_  # Persistent= does nothing with it (systemd.timer(5))
    assert "Type=oneshot" in service and f"SuccessExitStatus={timer.BUSY_EXIT}" in service
    exec_line = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    assert " watch " in exec_line and "--track registry.example/vllm:nightly" in exec_line
    assert "--budget 7200s" in exec_line and str(tmp_path / "results") in exec_line
    assert "--install-timer" not in exec_line
    assert "systemctl --user enable --now spark-agent-watch-watched.timer" in capsys.readouterr().out

    (units / "timers.target.wants").mkdir()  # as `systemctl --user enable` leaves it
    (units / "timers.target.wants" / "spark-agent-watch-watched.timer").symlink_to(units / "x.timer")
    assert main([*argv, "--remove-timer"]) == 0  # no --timer-kind again: whichever kind is there
    assert [p.name for p in units.rglob("*")] == ["timers.target.wants"]
    assert main([*argv, "--remove-timer"]) == 0  # nothing left: says so
    assert "no timer" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("every", "schedule"), [(6 * 3600, "0 */6 * * *"), (900, "*/15 * * * *"), (2 * 86400, "0 0 */2 * *")]
)
def test_cron_schedules(every, schedule):
    assert timer.cron_schedule(every) == schedule
    if shutil.which("systemd-analyze"):  # the timer's calendar: the same ticks, as systemd reads them
        said = subprocess.run(["systemd-analyze", "calendar", timer.calendar(every)], capture_output=True, text=True)
        assert said.returncode == 0, said.stderr
    line = timer.cron_line("watched", ["spark-agent", "watch", "a b.toml"], Path("/srv/x"), every)
    assert line == f"{schedule} cd /srv/x && spark-agent watch 'a b.toml'  # spark-agent-watch-watched"


# What a user may well have in a scheduled watch: a store password URL-encoded (%40 is '@'), folders with a space
# or a '$'. systemd reads % as a specifier and $ as a variable, quoted or not; cron reads % as a newline.
STORE = "postgresql+psycopg://watch:s3cret%40pass@db.lab/spark"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_the_service_keeps_percent_dollar_and_spaces_as_systemd_reads_it(tmp_path):
    workdir = tmp_path / "lab $HOME 100%"
    workdir.mkdir()
    argv = [sys.executable, "-m", "agent.cli", "watch", str(workdir / "a spec.toml"), "--store", STORE, "--track",
            'reg.example/v:"q"\\x']  # fmt: skip
    unit = tmp_path / "spark-agent-watch-w.service"
    unit.write_text(timer.service_text("w", argv, workdir, {"SPARK_AGENT_CONFIG": str(workdir / "w.toml")}))
    (tmp_path / "spark-agent-watch-w.timer").write_text(timer.timer_text("w", 6 * 3600))
    verify = ["systemd-analyze", "verify", "--man=no", str(unit), str(unit.with_suffix(".timer"))]
    verified = subprocess.run(verify, capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr  # before: "Failed to resolve unit specifiers in ...%40..."
    assert "%" not in unit.read_text().replace("%%", "")  # every % doubled


def test_the_cron_line_escapes_percent(tmp_path):
    line = timer.cron_line("w", ["spark-agent", "watch", "--store", STORE], tmp_path / "100%", 3600)
    command = line.split(" ", 5)[5]
    assert "%" in command and re.search(r"(?<!\\)%", command) is None, line  # cron turns a bare % into a newline


CRONTAB = """#!/bin/sh
# crontab's two calls that timer.py makes, on a file instead of the user's real table
case "$1" in
  -l) [ -f "$CRONTAB_FILE" ] || { echo "no crontab for $USER" >&2; exit 1; }; cat "$CRONTAB_FILE" ;;
  -) cat > "$CRONTAB_FILE" ;;
  *) exit 2 ;;
esac
"""


@pytest.fixture()
def crontab(tmp_path, monkeypatch) -> Path:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "crontab").write_text(CRONTAB)
    (bin_ / "crontab").chmod(0o755)
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setenv("CRONTAB_FILE", str(table))
    table.write_text("0 3 * * * backup.sh\n")
    return table


def test_without_systemd_a_crontab_line_is_added_and_removed_its_password_in_a_0600_file(setup, crontab, capsys):
    argv, _ = setup
    cron = [*argv, "--install-timer", "6h", "--timer-kind", "cron", "--store", STORE]
    assert main(cron) == 0
    assert main(cron) == 0  # again: replaced, not doubled
    lines = crontab.read_text().splitlines()
    assert lines[0] == "0 3 * * * backup.sh" and len(lines) == 2, lines
    assert lines[1].startswith("0 */6 * * * ") and lines[1].endswith("# spark-agent-watch-watched")
    secret = timer.credentials_file("watched")
    assert "s3cret" not in lines[1] and "--store" not in lines[1] and f"SPARK_AGENT_CONFIG={secret}" in lines[1]
    assert secret.stat().st_mode & 0o777 == 0o600 and secret.parent.stat().st_mode & 0o077 == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out and "--track registry.example/vllm:nightly" in out

    assert main([*argv, "--remove-timer"]) == 0  # whichever kind: no --timer-kind again
    assert crontab.read_text().splitlines() == ["0 3 * * * backup.sh"] and not secret.exists()
    assert main([*argv, "--remove-timer"]) == 0
    assert "no timer" in capsys.readouterr().out


def test_the_scheduled_watch_reads_the_store_from_the_credentials_file(tmp_path, monkeypatch):
    from agent.store import db

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv(db.ENV_URL, "sqlite:///elsewhere.sqlite")  # the install's shell; the timer's has none
    env = timer.write_credentials("w", STORE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert db.resolve_url(None) == STORE
    unit = timer.service_text("w", ["spark-agent", "watch", "w.toml"], tmp_path, env)
    assert "s3cret" not in unit and f"Environment=SPARK_AGENT_CONFIG={timer.credentials_file('w')}" in unit


@pytest.mark.attack("timer: a newline in --limit, --track, --store, --results or the folder adds a job or directive")
@pytest.mark.parametrize(
    "where",
    ["--limit", "--track", "--store", "--results", "folder"],
)
def test_a_control_character_never_reaches_a_timer(setup, crontab, monkeypatch, capsys, where):
    argv, tmp_path = setup
    injected = "x\n* * * * * touch /tmp/owned  # spark-agent-watch-watched\n[Service]\nExecStartPre=/bin/id"
    extra = {"--limit": ["--limit", injected], "--track": ["--track", "reg.example/v:1\x1b[2J"],
             "--store": ["--store", "sqlite:///a\n.sqlite"], "--results": ["--results", str(tmp_path / injected)],
             "folder": []}[where]  # fmt: skip
    if where == "folder":
        odd = tmp_path / "lab\tone"
        odd.mkdir()
        monkeypatch.chdir(odd)
    before = crontab.read_text()
    for kind in ("cron", "systemd"):
        assert main([*argv, *extra, "--install-timer", "1h", "--timer-kind", kind]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("control character" in err[0] or "not an image tag" in err[0]), err
    assert crontab.read_text() == before
    assert not (tmp_path / "config" / "systemd").exists() and not timer.credentials_file("watched").exists()


@pytest.mark.attack("watch: the lock file is a link to a file of the user's; the lock truncates its target")
def test_the_lock_never_follows_a_link(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (results / watching.LOCK).symlink_to(precious)
    with pytest.raises(UserError, match="cannot be the watch's lock"), watching.lock(results):
        pass
    assert precious.read_text() == "keep me\n"
    (results / watching.LOCK).unlink()
    os.mkfifo(results / watching.LOCK)  # not a plain file: refused, never blocks
    with pytest.raises(UserError, match="not a plain file"), watching.lock(results):
        pass


def test_a_second_watch_is_refused_by_the_lock(setup, capsys):
    argv, tmp_path = setup
    with watching.lock(tmp_path / "results"):
        assert main(argv) == timer.BUSY_EXIT
    err = capsys.readouterr().err
    assert "another watch is running" in err and "next tick" in err


@pytest.mark.parametrize(
    ("track", "said"),
    [("registry.example/vllm@sha256:" + "a" * 64, "pinned by digest"), ("Not A Tag!", "not an image tag")],
)
def test_a_digest_or_junk_where_a_tag_is_expected_is_exit_2(setup, capsys, track, said):
    argv, _ = setup
    assert main([*argv[:-2], "--track", track]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_the_webhook_url_may_be_vaulted_and_is_never_shown(tmp_path):
    from ansible.parsing.vault import VaultLib, VaultSecret

    from agent.hostside import redact
    from agent.planning import vault
    from agent.planning.inventory import load_inventory

    url = "https://hooks.example/services/T0/B1/wh-token-8675309"
    ciphertext = VaultLib([("default", VaultSecret(b"pw"))]).encrypt(url).decode()
    body = "".join(f"        {line}\n" for line in ciphertext.splitlines())
    inventory = tmp_path / "vaulted.yml"
    inventory.write_text(INVENTORY + "  vars:\n    spark_watch_webhook: !vault |\n" + body)
    password = tmp_path / "pw"
    password.write_text("pw\n")
    password.chmod(0o600)
    vault.use_password_file(str(password))
    try:
        (host,) = load_inventory(inventory)
        assert watching.webhook_url(host.vars) == url
        assert url not in redact.redact_text(f"posting to {url}")
    finally:
        vault.use_password_file(None)
