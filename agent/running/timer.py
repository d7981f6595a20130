"""`watch --install-timer 6h` / `--remove-timer`: the system schedules watch, not a loop of ours.

A systemd user timer and its oneshot service (~/.config/systemd/user/spark-agent-watch-<spec>.{timer,service}) where
systemd runs, else a line in the user's crontab marked with the same name. Nothing is enabled behind the user's back:
the files are written and the one command that enables them is printed. Exit 75 (busy: another watch runs, or a host
serves a model we did not start) counts as success for systemd: the next tick tries again.

What reaches a timer is checked first (issue 48): an argument or folder with a control character (a newline would
add a crontab job or a unit directive) is refused, exit 2. A store URL (it may hold a password) is never written
into the unit or the crontab line, nor onto the scheduled command line: it goes into a 0600 credentials file
(`<config>/spark-agent/watch-<spec>.toml`, [store] url) that the unit and the line name through
$SPARK_AGENT_CONFIG. `--remove-timer` removes the unit files, the crontab line and that file, whichever exist.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import tomli_w

from agent.errors import UserError
from agent.escape import has_control
from agent.hostside import atomic
from agent.store import db

BUSY_EXIT = 75  # EX_TEMPFAIL: not now, the next tick retries


def unit_name(spec_name: str) -> str:
    return f"spark-agent-watch-{spec_name}"


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config"))


def systemd_dir() -> Path:
    return _config_home() / "systemd" / "user"


def credentials_file(spec_name: str) -> Path:
    """Where a scheduled watch's store URL is kept (0600): never in the unit, the crontab or a command line."""
    return _config_home() / "spark-agent" / f"watch-{spec_name}.toml"


def check_argv(argv: Sequence[str], workdir: Path) -> None:
    """Bad input before anything is written: no control character in any word the timer would run (exit 2)."""
    for i, word in enumerate([*argv, str(workdir)]):
        if not isinstance(word, str) or has_control(word):
            what = "the folder you run it from" if i == len(argv) else (
                argv[i - 1] if i and argv[i - 1].startswith("-") else "an argument"
            )  # fmt: skip
            raise UserError(
                f"{what} {word!r:.120}: a control character (newline, tab, escape) cannot go into a timer; "
                "rename it or pass it without one"
            )


def write_credentials(spec_name: str, store_url: str) -> dict[str, str]:
    """The store URL into its 0600 file; the environment that makes the scheduled watch read it."""
    path = credentials_file(spec_name)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic.write_text(path, tomli_w.dumps({"store": {"url": store_url}}))  # mkstemp: 0600 from the start
    os.chmod(path, 0o600)
    return {db.ENV_URL: "", db.ENV_CONFIG: str(path)}  # an empty $SPARK_AGENT_STORE falls through to the file


def has_systemd() -> bool:
    return shutil.which("systemctl") is not None and Path("/run/systemd/system").is_dir()


def service_text(name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> str:
    environment = "".join(f"Environment={_env_word(f'{k}={v}')}\n" for k, v in (env or {}).items())
    return (
        f"[Unit]\nDescription=spark-agent watch: {name}\n\n"
        f"[Service]\nType=oneshot\nWorkingDirectory={_unit_value(str(workdir))}\n{environment}"
        f"ExecStart={exec_line(argv)}\nSuccessExitStatus={BUSY_EXIT}\n"
    )


_UNIT_UNSAFE = re.compile(r"[^\w@%+=:,./-]")  # shlex's: anything else is quoted


def _unit_value(text: str) -> str:
    """A value systemd reads as written: % starts a specifier (%h) everywhere, quoted or not."""
    return text.replace("%", "%%")


def _quoted(word: str) -> str:
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _env_word(assignment: str) -> str:
    """One Environment= assignment: % is a specifier there too, $ is not expanded (systemd.exec(5))."""
    word = _unit_value(assignment)
    return _quoted(word) if _UNIT_UNSAFE.search(assignment) else word


def exec_line(argv: list[str]) -> str:
    """ExecStart= for argv: each argument one word, as systemd splits it (double quotes with C escapes, $ expands,
    % is a specifier): a store URL's %40 or a folder with a space stays what it was."""
    words = []
    for arg in argv:
        word = _unit_value(arg).replace("$", "$$")
        if not arg or _UNIT_UNSAFE.search(arg):
            word = _quoted(word)
        words.append(word)
    return " ".join(words)


def timer_text(name: str, every_s: float) -> str:
    """A calendar timer: Persistent= acts on OnCalendar= only (systemd.timer(5)), so a tick missed while the machine
    was off or asleep runs once at the next start."""
    return (
        f"[Unit]\nDescription=spark-agent watch every {every_s:.0f}s: {name}\n\n"
        f"[Timer]\nOnCalendar={calendar(every_s)}\nPersistent=true\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )


def _every(every_s: float) -> tuple[str, int]:
    """The interval as cron and systemd's calendar can say it: every N minutes, hours or days (rounded, at least
    one minute): one rounding for both kinds."""
    minutes = max(1, round(every_s / 60))
    if minutes < 60:
        return "minute", minutes
    hours = round(minutes / 60)
    if hours < 24:
        return "hour", hours
    return "day", max(1, round(hours / 24))


def cron_schedule(every_s: float) -> str:
    unit, n = _every(every_s)
    return {"minute": f"*/{n} * * * *", "hour": f"0 */{n} * * *", "day": f"0 0 */{n} * *"}[unit]


def calendar(every_s: float) -> str:
    """OnCalendar= for the same ticks as cron_schedule."""
    unit, n = _every(every_s)
    return {"minute": f"*-*-* *:00/{n}:00", "hour": f"*-*-* 00/{n}:00:00", "day": f"*-*-01/{n} 00:00:00"}[unit]


def cron_command(argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> str:
    """The command as the shell runs it (cron_line escapes it for cron)."""
    assign = "".join(f"{k}={shlex.quote(v)} " for k, v in (env or {}).items())
    return f"cd {shlex.quote(str(workdir))} && {assign}{shlex.join(argv)}"


def cron_line(name: str, argv: list[str], workdir: Path, every_s: float, env: dict[str, str] | None = None) -> str:
    command = cron_command(argv, workdir, env).replace("%", "\\%")  # cron turns a bare % into a newline
    return f"{cron_schedule(every_s)} {command}  # {unit_name(name)}"


def install(name: str, argv: list[str], workdir: Path, every_s: float, kind: str, store_url: str = "") -> list[str]:
    """Write the timer (kind: systemd | cron), and the store URL into its credentials file when one is given;
    returns what to tell the user, one line each."""
    check_argv([*argv, "--store", store_url] if store_url else argv, workdir)
    unit = unit_name(name)
    env = write_credentials(name, store_url) if store_url else {}
    told = [f"the store URL: {credentials_file(name)} (mode 600)"] if store_url else []
    if kind == "systemd":
        folder = systemd_dir()
        folder.mkdir(parents=True, exist_ok=True)
        atomic.write_text(folder / f"{unit}.service", service_text(name, argv, workdir, env))
        atomic.write_text(folder / f"{unit}.timer", timer_text(name, every_s))
        return [
            str(folder / f"{unit}.service"),
            str(folder / f"{unit}.timer"),
            *told,
            f"enable it: systemctl --user daemon-reload && systemctl --user enable --now {unit}.timer",
        ]
    lines = [x for x in _crontab().splitlines() if not _ours(x, unit)]
    _set_crontab(lines + [cron_line(name, argv, workdir, every_s, env)])
    return [f"crontab ({cron_schedule(every_s)}): {cron_command(argv, workdir, env)}  # {unit}", *told]


def _ours(line: str, unit: str) -> bool:
    return line.endswith(f"  # {unit}")


def remove(name: str) -> list[str]:
    """Take away what install wrote, of either kind: the unit files (and `enable`'s link), this watch's crontab
    line, the credentials file."""
    unit = unit_name(name)
    gone = []
    wants = systemd_dir() / "timers.target.wants" / f"{unit}.timer"  # what `enable` made: `disable`'s part
    for path in (wants, systemd_dir() / f"{unit}.timer", systemd_dir() / f"{unit}.service"):
        if path.is_symlink() or path.exists():
            path.unlink()
            gone.append(f"removed {path}")
    if gone:
        gone.append(f"if it was running: systemctl --user stop {unit}.timer && systemctl --user daemon-reload")
    secret = credentials_file(name)
    if secret.is_symlink() or secret.exists():
        secret.unlink()
        gone.append(f"removed {secret}")
    if shutil.which("crontab") is not None:
        lines = _crontab().splitlines()
        kept = [x for x in lines if not _ours(x, unit)]
        if len(kept) < len(lines):
            _set_crontab(kept)
            gone.append(f"removed the crontab line of {unit}")
    return gone or [f"no timer {unit} (neither in {systemd_dir()} nor in the crontab)"]


def _crontab() -> str:
    if shutil.which("crontab") is None:
        raise UserError("neither systemd nor crontab is here: schedule `spark-agent watch` another way (docs/watch.md)")
    proc = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""  # no crontab yet: exit 1


def _set_crontab(lines: list[str]) -> None:
    proc = subprocess.run(["crontab", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"crontab refused the new table: {proc.stderr.strip()[:200]}")
