"""spark-agent status [SWEEP] [--results DIR]: per-host progress of a detached sweep (the hosts are only read)."""

from __future__ import annotations

import sys
from pathlib import Path

from agent import logs
from agent.errors import UserError
from agent.reporting.escape import plain as line
from agent.results import tree as results
from agent.running import detach


def register(sub) -> None:
    p = sub.add_parser("status", help="per-host progress of a detached sweep: done, running now, failed, lost")
    p.add_argument("sweep", nargs="?", help="the sweep's name (default: the only detached sweep in --results)")
    p.add_argument("--results", default="results", help="results folder the sweep was started with (default ./results)")
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    p.set_defaults(func=run)


def pick_sweep(name: str | None, root: Path) -> str:
    """The sweep named, or the only one there is; several without a name is one line listing them."""
    if name:
        return name
    known = detach.known_sweeps(root)
    if len(known) == 1:
        return known[0]
    if not known:
        raise UserError(f"no detached sweep under {root}: start one with `spark-agent sweep SPEC --detach`")
    raise UserError(f"several detached sweeps under {root} ({', '.join(known)}): name one")


def run(args) -> int:
    logs.configure(args.log_format)
    root = Path(args.results)
    state = detach.load_state(root, pick_sweep(args.sweep, root))
    progress, _ = detach.poll(state, Path(state.inventory))
    detach.save_state(root, state)
    out = sys.stdout
    print(f"sweep {state.sweep}: started {state.started}, replicas {state.replicas}", file=out)
    for host in state.hosts():
        print(line(host_line(state, root, progress[host])), file=out)
    return 0


def host_line(state: detach.FleetState, root: Path, p: detach.HostProgress) -> str:
    """One line per host: answered or not, runner state, done of assigned, sealed, collected, now, failed, lost."""
    assigned = state.assignment[p.host]
    collected = sum(results.is_finished(root, state.sweep, p.host, c) for c in assigned)
    lost = f" LOST ({state.lost[p.host]})" if p.host in state.lost else ""
    if not p.answered:
        return f"  {p.host}: no answer ({p.error}){lost}; {collected}/{len(assigned)} collected"
    failed = [f"{cid}: {rec['error']}" for cid, rec in p.done.items() if rec["outcome"] == "host_error"]
    gone = p.state == "running" and not p.alive  # killed (Ctrl-C on its host, a reboot): its cell is not sealed
    runner = (p.state or "not started") + (" (runner gone)" if gone else "")
    now = f"; now {p.current} since {p.current_since}" if p.current else ""
    text = (
        f"  {p.host}: {runner}, {len(p.done)}/{len(assigned)} done, {len(p.sealed)} sealed, {collected} collected"
        f"{now}{lost}"
    )
    text += f"; {p.note}" if p.note else ""
    return text + (f"; failed: {'; '.join(failed)}" if failed else "")
