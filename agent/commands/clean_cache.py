"""spark-agent clean-cache [-i INV] [--limit H] [--keep SPEC ...] [--prune | --all] [--dry-run]

The warm-start caches (one folder per image digest on each host, agent/hostside/warmcache.py): list them, prune the
ones whose image no spec given with --keep pins, or remove them all.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent.errors import UserError
from agent.hostside import warmcache
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import check_reachable, load_inventory
from agent.planning.spec import load_spec
from agent.running import hostdata, tasks
from agent.running import playbooks as fleet


def register(sub) -> None:
    p = sub.add_parser("clean-cache", help="list or prune the per-image warm-start caches on the hosts")
    p.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="Ansible inventory")
    p.add_argument("--limit", help="only these hosts or groups (comma-separated), as ansible --limit")
    p.add_argument(
        "--keep", action="append", default=[], metavar="SPEC", help="a spec whose pinned image's cache is kept"
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--prune", action="store_true", help="remove every cache whose image no --keep spec pins")
    what.add_argument("--all", action="store_true", help="remove every cache")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.prune and not args.keep:
        raise UserError("--prune needs the specs whose images stay pinned: --keep SPEC (repeatable), or use --all")
    keep = {warmcache.key(load_spec(path).image) for path in args.keep}  # bad specs: one line, exit 2, nothing touched
    hosts = load_inventory(args.inventory, args.limit)
    check_reachable(hosts)
    inventory, limit = Path(args.inventory), ",".join(h.name for h in hosts)
    listed = _run(inventory, limit, {})
    to_remove: dict[str, list[str]] = {}
    for host, caches in sorted(listed.items()):
        for c in caches:
            gone = args.all or (args.prune and c["key"] not in keep)
            mark = "remove" if gone else "keep"
            print(f"{host}\t{c['key']}\t{c['bytes'] / 1024**2:.1f} MiB\t{c['files']} files\t{mark}")
            if gone:
                to_remove.setdefault(host, []).append(c["key"])
    if not to_remove or args.dry_run:
        if to_remove:
            print("dry run: nothing removed", file=sys.stderr)
        return 0
    for host, keys in to_remove.items():  # per host: each gets only its own keys
        _run(inventory, host, {"remove_keys": keys})
    print(f"removed {sum(map(len, to_remove.values()))} cache folder(s)", file=sys.stderr)
    return 0


def _run(inventory: Path, limit: str, extravars: dict) -> dict[str, list[dict]]:
    result = fleet.run_playbook(tasks.CACHE.playbook, inventory, extravars, limit=limit)
    problems = {**result.unreachable, **result.failures}
    if problems:
        raise UserError("; ".join(f"host {h}: {hostdata.one_line(m)}" for h, m in problems.items()))
    out = {}
    for host, by_task in result.results.items():
        try:
            out[host] = hostdata.cache_entries((by_task.get(tasks.CACHE.name) or {}).get("caches"), f"host {host}")
        except hostdata.BadHostData as exc:
            raise UserError(f"host {host} sent a bad cache list: {exc.reason}") from None
    return out
