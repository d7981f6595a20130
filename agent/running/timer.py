"""`watch --install-timer 6h` / `--remove-timer`: the system schedules watch, not a loop of ours.

A systemd user timer and its oneshot service (~/.config/systemd/user/spark-agent-watch-<spec>.{timer,service}) where
systemd runs, else a line in the user's crontab marked with the same name. Nothing is enabled behind the user's back:
the files are written and the one command that enables them is printed. Exit 75 (busy: another watch runs, or a host
serves a model we did not start) counts as success for systemd: the next tick tries again.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from agent.errors import UserError
from agent.hostside import atomic

BUSY_EXIT = 75  # EX_TEMPFAIL: not now, the next tick retries


def unit_name(spec_name: str) -> str:
    return f"spark-agent-watch-{spec_name}"


def systemd_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def has_systemd() -> bool:
    return shutil.which("systemctl") is not None and Path("/run/systemd/system").is_dir()


def service_text(name: str, argv: list[str], workdir: Path) -> str:
    return (
        f"[Unit]\nDescription=spark-agent watch: {name}\n\n"
        f"[Service]\nType=oneshot\nWorkingDirectory={_unit_value(str(workdir))}\nExecStart={exec_line(argv)}\n"
        f"SuccessExitStatus={BUSY_EXIT}\n"
    )


_UNIT_UNSAFE = re.compile(r"[^\w@%+=:,./-]")  # shlex's: anything else is quoted


def _unit_value(text: str) -> str:
    """A value systemd reads as written: % starts a specifier (%h) everywhere, quoted or not."""
    return text.replace("%", "%%")


def exec_line(argv: list[str]) -> str:
    """ExecStart= for argv: each argument one word, as systemd splits it (double quotes with C escapes, $ expands,
    % is a specifier): a store URL's %40 or a folder with a space stays what it was."""
    words = []
    for arg in argv:
        word = _unit_value(arg).replace("$", "$$")
        if not arg or _UNIT_UNSAFE.search(arg):
            word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
        words.append(word)
    return " ".join(words)


def timer_text(name: str, every_s: float) -> str:
    return (
        f"[Unit]\nDescription=spark-agent watch every {every_s:.0f}s: {name}\n\n"
        f"[Timer]\nOnBootSec=5min\nOnUnitActiveSec={every_s:.0f}s\nPersistent=true\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )


def cron_schedule(every_s: float) -> str:
    """Cron has minutes at best: every N minutes, hours or days (rounded, at least one minute)."""
    minutes = max(1, round(every_s / 60))
    if minutes < 60:
        return f"*/{minutes} * * * *"
    hours = round(minutes / 60)
    if hours < 24:
        return f"0 */{hours} * * *"
    return f"0 0 */{max(1, round(hours / 24))} * *"


def cron_command(argv: list[str], workdir: Path) -> str:
    """The command as the shell runs it (cron_line escapes it for cron)."""
    return f"cd {shlex.quote(str(workdir))} && {shlex.join(argv)}"


def cron_line(name: str, argv: list[str], workdir: Path, every_s: float) -> str:
    command = cron_command(argv, workdir).replace("%", "\\%")  # cron turns a bare % into a newline
    return f"{cron_schedule(every_s)} {command}  # {unit_name(name)}"


def install(name: str, argv: list[str], workdir: Path, every_s: float, kind: str) -> list[str]:
    """Write the timer (kind: systemd | cron); returns what to tell the user, one line each."""
    unit = unit_name(name)
    if kind == "systemd":
        folder = systemd_dir()
        folder.mkdir(parents=True, exist_ok=True)
        atomic.write_text(folder / f"{unit}.service", service_text(name, argv, workdir))
        atomic.write_text(folder / f"{unit}.timer", timer_text(name, every_s))
        return [
            str(folder / f"{unit}.service"),
            str(folder / f"{unit}.timer"),
            f"enable it: systemctl --user daemon-reload && systemctl --user enable --now {unit}.timer",
        ]
    lines = [x for x in _crontab().splitlines() if not x.endswith(f"# {unit}")]
    _set_crontab(lines + [cron_line(name, argv, workdir, every_s)])
    return [f"crontab ({cron_schedule(every_s)}): {cron_command(argv, workdir)}  # {unit}"]


def remove(name: str, kind: str) -> list[str]:
    unit = unit_name(name)
    if kind == "systemd":
        gone = []
        wants = systemd_dir() / "timers.target.wants" / f"{unit}.timer"  # what `enable` made: `disable`'s part
        for path in (wants, systemd_dir() / f"{unit}.timer", systemd_dir() / f"{unit}.service"):
            if path.is_symlink() or path.exists():
                path.unlink()
                gone.append(f"removed {path}")
        if gone:
            gone.append(f"if it was running: systemctl --user stop {unit}.timer && systemctl --user daemon-reload")
        return gone or [f"no timer {unit} in {systemd_dir()}"]
    lines = _crontab().splitlines()
    kept = [x for x in lines if not x.endswith(f"# {unit}")]
    if len(kept) == len(lines):
        return [f"no crontab line for {unit}"]
    _set_crontab(kept)
    return [f"removed the crontab line of {unit}"]


def _crontab() -> str:
    if shutil.which("crontab") is None:
        raise UserError("neither systemd nor crontab is here: schedule `spark-agent watch` another way (docs/watch.md)")
    proc = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""  # no crontab yet: exit 1


def _set_crontab(lines: list[str]) -> None:
    proc = subprocess.run(["crontab", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"crontab refused the new table: {proc.stderr.strip()[:200]}")
