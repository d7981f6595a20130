"""Read a host's server log over one SSH connection (Fabric), for `spark-agent logs`.

Paths are built here from validated parts (the inventory's work dir and a cell id checked against the id form),
never taken from the host. What the host sends back is shown without control characters or terminal escapes.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from typing import IO, TYPE_CHECKING

from agent.errors import UserError
from agent.escape import INVISIBLE
from agent.planning.inventory import Host
from agent.planning.roledefaults import default_str
from agent.running.hostdata import CELL_ID

if TYPE_CHECKING:
    import fabric

DEFAULT_WORKDIR = default_str("spark_workdir")
SERVER_JSON_MAX = 64 * 1024
# Everything but tab and newline below 0x20, DEL, and the C1 controls (0x80–0x9f): ESC starts terminal escapes; and
# the bidi and zero-width characters that reorder or hide what a reader sees (escape.INVISIBLE).
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{INVISIBLE}]")


def host_path(workdir: str, *parts: str) -> str:
    """A path on the host as a shell word: a leading ~/ stays unquoted so the remote shell expands it."""
    rest = "/".join(parts)
    if workdir == "~" or workdir.startswith("~/"):
        tail = workdir[2:].rstrip("/")
        return "~/" + shlex.quote(f"{tail}/{rest}" if tail else rest)
    return shlex.quote(f"{workdir.rstrip('/')}/{rest}")


def running_cell(conn: fabric.Connection, host: Host, workdir: str) -> str:
    """The cell whose server runs on the host now, from its state/server.json (host data: bounded, validated)."""
    path = host_path(workdir, "state", "server.json")
    res = conn.run(f"head -c {SERVER_JSON_MAX} {path} 2>/dev/null || true", hide=True, warn=True, in_stream=False)
    try:
        info = json.loads(res.stdout) if res.stdout.strip() else {}
    except ValueError:
        info = {}
    cell = info.get("cell_id") if isinstance(info, dict) else None
    if not isinstance(cell, str) or not CELL_ID.fullmatch(cell):
        raise UserError(f"host {host.name}: no server record there; name the CELL whose log you want")
    return cell


class _Clean:
    """A text stream that drops control characters (per character, so a split escape sequence can't slip through)."""

    def __init__(self, out: IO[str]):
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(_CONTROL.sub("", text.replace("\r\n", "\n")))
        return len(text)

    def flush(self) -> None:
        self.out.flush()


# The cell named in server.json, as the host's shell reads it: only 12 hex digits can come out (never a path part).
_SERVER_CELL = r"""sed -n 's/.*"cell_id": *"\([0-9a-f]\{12\}\)".*/\1/p' %s 2>/dev/null | head -n 1"""
# What the host's runner is doing (stdlib only; the host's Python, as Ansible's): its sweep's progress and whether it
# still runs. Its answer is host data: checked by _runner_now.
_RUNNER_NOW = r"""
import json, os, sys
def read(path):
    try:
        with open(path) as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except Exception:
        return {}
w = os.path.expanduser(sys.argv[1])
holder = read(os.path.join(w, "state", "runner.json"))
sweep = holder.get("sweep") if isinstance(holder.get("sweep"), str) else ""
ok = sweep and "/" not in sweep and sweep not in (".", "..")
progress = read(os.path.join(w, "sweeps", sweep, "progress.json")) if ok else {}
alive = False
try:
    pid = int(holder.get("runner_pid") or 0)
    os.kill(pid, 0)
    alive = pid > 0 and progress.get("state") == "running"
except Exception:
    pass
done = progress.get("done") if isinstance(progress.get("done"), dict) else {}
def finished(cell):
    record = done[cell]
    return record.get("finished", 0) if isinstance(record, dict) and isinstance(record.get("finished"), (int, float)) else 0
order = sorted(done, key=finished)[-1000:]
print(json.dumps({"current": progress.get("current", ""), "done": order, "alive": alive}))
"""
POLL_S = 1.0


def _runner_now(conn: fabric.Connection, host: Host, workdir: str) -> tuple[str, list[str], bool]:
    """(the cell the host's runner is on or "", the cells it finished, in the order they ended, whether it still
    runs)."""
    python = str(host.vars.get("ansible_python_interpreter") or "python3")
    res = conn.run(
        f"{shlex.quote(python)} -c {shlex.quote(_RUNNER_NOW)} {shlex.quote(workdir)}",
        hide=True,
        warn=True,
        in_stream=False,
    )
    try:
        now = json.loads(res.stdout[:SERVER_JSON_MAX]) if res.ok else {}
    except ValueError:
        now = {}
    if not isinstance(now, dict):
        now = {}
    current = now.get("current")
    done = now.get("done")
    return (
        current if isinstance(current, str) and CELL_ID.fullmatch(current) else "",
        [c for c in done if isinstance(c, str) and CELL_ID.fullmatch(c)] if isinstance(done, list) else [],
        now.get("alive") is True,
    )


def follow_host(conn: fabric.Connection, host: Host, lines: int, out: IO[str]) -> int:
    """`logs HOST --follow`: the host, not one file. The cell running now (its last `lines`, then live), then
    each next cell from its start, moving on as the host starts it (a cell too short to catch live is shown
    whole), until the host's sweep ends or Ctrl-C."""
    workdir = str(host.vars.get("spark_workdir") or DEFAULT_WORKDIR)
    clean = _Clean(out)
    current, done, alive = _runner_now(conn, host, workdir)
    if not current and not alive:
        return show(conn, host, running_cell(conn, host, workdir), lines, True, out)  # a server without a runner
    shown = set(done)  # finished before we came: not ours to replay
    first = f"-n {lines:d}"
    while True:
        for cell in [c for c in done if c not in shown]:  # ended between two looks
            shown.add(cell)
            out.write(f"==> {host.name}: cell {cell} (ended) <==\n")
            out.flush()
            log = host_path(workdir, "runs", cell, "server.log")
            conn.run(f"cat -- {log} 2>/dev/null || true", out_stream=clean, warn=True, in_stream=False)
        if current and current not in shown:
            shown.add(current)
            out.write(f"==> {host.name}: cell {current} <==\n")
            out.flush()
            if not _follow_cell(conn, workdir, current, first, clean):
                return 0  # Ctrl-C (or the connection dropped)
            first = "-n +1"
        elif not alive:
            out.write(f"==> {host.name}: its sweep has ended <==\n")
            return 0
        else:
            time.sleep(POLL_S)  # between cells: the runner starts the next one
        current, done, alive = _runner_now(conn, host, workdir)


def _follow_cell(conn: fabric.Connection, workdir: str, cell: str, first: str, clean: _Clean) -> bool:
    """Stream one cell's server log while its server runs; False when Ctrl-C ended it."""
    log = host_path(workdir, "runs", cell, "server.log")
    server = _SERVER_CELL % host_path(workdir, "state", "server.json")
    # tail dies with this shell (--pid); the shell ends once server.json names another cell (or none), a moment
    # later so the last lines are out. A pty: Ctrl-C reaches both, and the exit status says so.
    script = (
        f"tail {first} -F --pid=$$ -- {log} 2>/dev/null & t=$!; sleep {POLL_S:g}; "
        f'while [ "$({server})" = {cell} ]; do sleep {POLL_S:g}; done; '
        "sleep 1; kill $t 2>/dev/null; wait $t 2>/dev/null; exit 0"
    )
    return conn.run(script, out_stream=clean, warn=True, pty=True).exited == 0


def show(conn: fabric.Connection, host: Host, cell: str | None, lines: int, follow: bool, out: IO[str]) -> int:
    workdir = str(host.vars.get("spark_workdir") or DEFAULT_WORKDIR)
    if cell is not None and not CELL_ID.fullmatch(cell):
        raise UserError(f"CELL {cell!r}: a cell id is 12 hex digits (see the results tree or `spark-agent status`)")
    if follow and cell is None:
        return follow_host(conn, host, lines, out)
    cell = cell or running_cell(conn, host, workdir)
    log = host_path(workdir, "runs", cell, "server.log")
    missing = conn.run(f"test -f {log}", hide=True, warn=True, in_stream=False)
    if missing.failed:
        raise UserError(f"host {host.name}: cell {cell} has no server log there (not started, or already collected)")
    clean = _Clean(out)
    if not follow:
        conn.run(f"tail -n {lines:d} -- {log}", out_stream=clean, err_stream=clean, warn=True, in_stream=False)
        return 0
    # A pty, so Ctrl-C reaches tail as SIGINT and a dropped connection hangs it up; --pid ends it with the session
    # too: no tail is left behind on the host either way.
    conn.run(f"exec tail -n {lines:d} -F --pid=$PPID -- {log}", out_stream=clean, warn=True, pty=True)
    return 0
