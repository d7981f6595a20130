"""Read a host's server log over one SSH connection (Fabric), for `spark-agent logs`.

Paths are built here from validated parts (the inventory's work dir and a cell id checked against the id form),
never taken from the host. What the host sends back is shown without control characters or terminal escapes.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import IO, TYPE_CHECKING

from agent.errors import UserError
from agent.planning.inventory import Host
from agent.reporting.escape import INVISIBLE
from agent.running.hostdata import CELL_ID

if TYPE_CHECKING:
    import fabric

DEFAULT_WORKDIR = "~/.spark-agent"  # playbooks/roles/spark/defaults/main.yml: spark_workdir
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


def show(conn: fabric.Connection, host: Host, cell: str | None, lines: int, follow: bool, out: IO[str]) -> int:
    workdir = str(host.vars.get("spark_workdir") or DEFAULT_WORKDIR)
    if cell is not None and not CELL_ID.fullmatch(cell):
        raise UserError(f"CELL {cell!r}: a cell id is 12 hex digits (see the results tree or `spark-agent status`)")
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
