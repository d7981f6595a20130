"""spark-agent logs HOST [CELL] [-i INVENTORY] [-n LINES] [--follow]: a host's server log; with --follow, live.

Without CELL it is the log of the server running there now; with --follow, the host: each cell's log in turn, moving
on as the host starts its next cell, until its sweep ends (or Ctrl-C). The log is host text: control characters and terminal
escapes are removed before it reaches your terminal.
"""

from __future__ import annotations

import argparse
import sys

from agent.errors import UserError
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory
from agent.running import connection, serverlog


def register(sub) -> None:
    p = sub.add_parser("logs", help="print (or --follow) the server log of a host's running or named cell")
    p.add_argument("host", metavar="HOST", help="one inventory host")
    p.add_argument("cell", metavar="CELL", nargs="?", help="a cell id (default: the cell running there now)")
    p.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY))
    p.add_argument("-n", "--lines", type=int, default=100, help="lines of the end to show first (default 100)")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep streaming: the cell's new lines, or (without CELL) every cell the host runs until its sweep ends",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.lines <= 1_000_000:
        raise UserError(f"--lines {args.lines}: give 0 to 1000000")
    hosts = load_inventory(args.inventory, limit=args.host, flag="HOST")
    if len(hosts) != 1 or hosts[0].name != args.host:
        raise UserError(f"HOST {args.host}: name one host, not a group ({len(hosts)} hosts matched)")
    host = hosts[0]
    conn = connection.connect(connection.target(host))
    try:
        return serverlog.show(conn, host, args.cell, args.lines, args.follow, sys.stdout)
    finally:
        conn.close()
