"""spark-agent trust HOST... [-i INVENTORY] [--yes]: show each host's SSH key fingerprint and record it in the
known_hosts file the inventory names, once you have compared it with the host's console. Host key checking stays on."""

from __future__ import annotations

import argparse
import sys

from agent.errors import UserError
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory
from agent.running import connection, hostkeys


def register(sub) -> None:
    p = sub.add_parser("trust", help="show new hosts' SSH key fingerprints and record them in known_hosts")
    p.add_argument("hosts", nargs="+", metavar="HOST", help="inventory hosts or groups")
    p.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY))
    p.add_argument("--yes", action="store_true", help="record without asking (after checking the fingerprints)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    hosts = load_inventory(args.inventory, limit=",".join(args.hosts), flag="HOST")
    scanned = [hostkeys.scan(connection.target(h)) for h in hosts]  # all first: nothing recorded on a bad host
    for k in scanned:
        print(f"{k.target.host:<20} {k.target.known_hosts_name:<28} {k.key_type:<20} {k.fingerprint}  {k.state}")
    changed = [k for k in scanned if k.state == hostkeys.CHANGED]
    if changed:
        k = changed[0]
        if k.where != str(k.target.known_hosts):
            raise UserError(
                f"host {k.target.host}: the system's {k.where} holds a DIFFERENT key for {k.target.known_hosts_name}: "
                "refused, nothing recorded (a key pinned there is not overridden); ask whoever keeps that file"
            )
        raise UserError(
            f"host {k.target.host}: {k.target.known_hosts} already holds a DIFFERENT key for "
            f"{k.target.known_hosts_name}: refused, nothing recorded. Only if the host was reinstalled: compare the "
            f"fingerprint above with its console (ssh-keygen -lf /etc/ssh/ssh_host_{k.key_type.removeprefix('ssh-')}"
            f"_key.pub), then ssh-keygen -R '{k.target.known_hosts_name}' -f {k.target.known_hosts} and run trust again"
        )
    new = [k for k in scanned if k.state == hostkeys.NEW]
    if not new:
        print("every host is already trusted; nothing to record")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError("trust: stdin is not a terminal; compare the fingerprints above, then pass --yes")
        files = sorted({str(k.target.known_hosts) for k in new})
        answer = input(f"Record {len(new)} key(s) in {', '.join(files)}? Compare with each host's console first [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing recorded")
            return 1
    added = hostkeys.record(new)
    print(f"recorded {added} key(s)")
    return 0
