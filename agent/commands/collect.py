"""spark-agent collect [SWEEP] [--results DIR] [-i INVENTORY] [--wait] [--lost-after S]: bring back a detached
sweep's sealed cells.

Incremental and idempotent: a cell already in the results tree is not fetched again; safe while the hosts run.
"""

from __future__ import annotations

import sys
import time

from agent import logs
from agent.commands import flags, status
from agent.errors import UserError
from agent.escape import plain as line
from agent.judging import correctness, summary
from agent.planning.inventory import load_inventory
from agent.running import detach, livemetrics


def register(sub) -> None:
    p = sub.add_parser("collect", help="bring back every sealed cell of a detached sweep (safe while it runs)")
    status.add_sweep_options(p)
    p.add_argument("--wait", action="store_true", help="follow the sweep: collect until every host is done")
    p.add_argument(
        "--lost-after",
        type=flags.number(0, 86_400, low_open=False),
        default=detach.LOST_AFTER_S,
        help=f"declare a host lost after this many seconds without an answer (default {detach.LOST_AFTER_S:.0f})",
    )
    p.add_argument("--interval", type=flags.number(0, 3600), default=5.0, help="--wait: seconds between looks")
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    livemetrics.add_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    logs.configure(args.log_format)
    root, state = status.load(args)
    spec = detach.spec_of(state)  # with the window it was handed out with (--duration): the same cell ids
    hosts = load_inventory(state.inventory, ",".join(state.hosts()))
    if args.metrics and not args.wait:
        raise UserError("--metrics needs --wait: the live view lasts as long as collect follows the sweep")
    live = livemetrics.from_args(args, state.sweep)
    by_id = {c.id: c for cs in detach.replan(state, spec, hosts).values() for c in cs} if live else {}
    total = 0
    try:
        while True:
            got = detach.collect_sweep(state, spec, hosts, root, lost_after=args.lost_after)
            total += sum(len(ids) for ids in got.new.values())
            if live is not None:
                live.look(state, got, by_id, root)
            if got.finished or not args.wait:
                break
            time.sleep(args.interval)
    finally:
        if live is not None:
            live.stop()
    out = sys.stderr
    print(f"collected {total} new cell(s) ({got.already} already here) into {root / state.sweep}", file=out)
    for host, cid in sorted(got.still_running.items()):
        print(line(f"still running: {host}" + (f" (cell {cid})" if cid else " (between cells)")), file=out)
    for host, why in sorted(got.unanswered.items()):
        print(line(f"no answer from {host} (not lost yet): {why}"), file=out)
    for host, why in sorted(state.lost.items()):
        print(line(f"lost host {host}: {why}"), file=out)
    for key, why in sorted(got.failed.items()):
        print(line(f"failed {key}: the host could not take it: {why}"), file=out)
    for key, taker in sorted(state.requeued.items()):
        print(line(f"requeued {key} -> {taker}"), file=out)
    if not got.finished:
        return 1 if got.failed else 0
    short = detach.unmeasured(state, root) + summary.not_valid(
        correctness.judged_cells(root / state.sweep) if (root / state.sweep).is_dir() else []
    )
    for what in short:
        print(line(f"not valid {what}"), file=out)
    if short:  # the sweep's own rule: exit 0 only when every planned cell has a valid measurement
        print(f"{len(short)} cell(s) without a valid measurement: exit 1 (the report says why)", file=out)
    return 1 if got.failed or short else 0
