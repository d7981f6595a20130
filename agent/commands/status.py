"""spark-agent status [SWEEP] [--results DIR] [-i INVENTORY]: per-host progress of a detached sweep (the hosts are
only read)."""

from __future__ import annotations

import sys
from pathlib import Path

from agent import logs
from agent.errors import UserError
from agent.escape import plain as line
from agent.planning.inventory import load_inventory
from agent.running import detach, fleetindex

DEFAULT_RESULTS = Path("results")


def add_sweep_options(p) -> None:
    """What status and collect both take: which sweep, where its record is, and the inventory to check."""
    p.add_argument("sweep", nargs="?", help="the sweep's name (default: the only detached sweep there is)")
    p.add_argument(
        "--results",
        help="results folder the sweep was started with (default: the one that holds the sweep's record, "
        "./results or where `sweep --detach` wrote it)",
    )
    p.add_argument(
        "-i",
        "--inventory",
        help="the inventory the sweep was started with (checked against the sweep's record, which is used)",
    )


def register(sub) -> None:
    p = sub.add_parser("status", help="per-host progress of a detached sweep: done, running now, failed, lost")
    add_sweep_options(p)
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    p.set_defaults(func=run)


def _has_record(folder: Path, sweep: str) -> bool:
    try:
        return detach.state_path(folder, sweep).is_file()
    except ValueError:
        return False


def locate(name: str | None, results_flag: str | None) -> tuple[Path, str]:
    """(results folder, sweep name): the folder given, else the one folder that holds the sweep's record
    (./results or one `sweep --detach` noted); two folders with the same sweep is an error naming both."""
    if results_flag:
        root = Path(results_flag)
        return root, pick_sweep(name, root)
    if name:
        found = fleetindex.folders(name, lambda f: _has_record(f, name))
        if _has_record(DEFAULT_RESULTS, name):
            found.append(DEFAULT_RESULTS)
        unique = list({str(f.resolve()): f for f in found}.values())
        if len(unique) > 1:
            raise UserError(
                f"sweep {name} is in {len(unique)} results folders ({', '.join(str(f) for f in unique)}): "
                "pass --results with the one you mean"
            )
        return (unique[0] if unique else DEFAULT_RESULTS), name
    if detach.known_sweeps(DEFAULT_RESULTS):
        return DEFAULT_RESULTS, pick_sweep(None, DEFAULT_RESULTS)
    known = fleetindex.names(_has_record)
    if len(known) == 1 and len(next(iter(known.values()))) == 1:
        ((sweep, (root,)),) = known.items()
        return root, sweep
    if not known:
        raise UserError(f"no detached sweep under {DEFAULT_RESULTS}: start one with `spark-agent sweep SPEC --detach`")
    listed = "; ".join(f"{n} in {', '.join(map(str, fs))}" for n, fs in sorted(known.items()))
    raise UserError(f"several detached sweeps ({listed}): name one (and pass --results if it is in two folders)")


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


def load(args) -> tuple[Path, detach.FleetState]:
    """The sweep's folder and record, as status and collect find them; -i must be the sweep's own inventory."""
    root, name = locate(args.sweep, args.results)
    state = detach.load_state(root, name)
    if args.inventory and Path(args.inventory).resolve() != Path(state.inventory):
        raise UserError(
            f"-i {args.inventory}: sweep {state.sweep} was handed out with the inventory {state.inventory}; "
            "pass that one, or leave -i out"
        )
    return root, state


def planned_labels(state: detach.FleetState) -> dict[str, str]:
    """cell id -> label, as handed out: the record's own (a tune step has no spec file to re-plan from), else the
    cells re-planned from the spec; empty when neither can be read now (then ids are shown)."""
    try:
        spec = detach.spec_of(state)
        cells = detach.replan(state, spec, load_inventory(state.inventory, ",".join(state.hosts())))
    except UserError:
        cells = {}
    return {c.id: c.label for cs in cells.values() for c in cs} | state.labels


def run(args) -> int:
    logs.configure(args.log_format)
    root, state = load(args)
    progress, _ = detach.poll(state, Path(state.inventory))
    detach.save_state(root, state)
    by_id = planned_labels(state)
    out = sys.stdout
    replicas = state.replicas or "every host (calibrate)"
    print(f"sweep {state.sweep} ({root}): started {state.started}, replicas {replicas}", file=out)
    for host in state.hosts():
        print(line(host_line(state, root, progress[host], by_id)), file=out)
    return 0


def cell_name(cid: str, labels: dict[str, str]) -> str:
    """A cell as the progress bar shows it: its label, then its id."""
    return f"{labels[cid]} {cid}" if cid in labels else cid


def host_line(state: detach.FleetState, root: Path, p: detach.HostProgress, by_id: dict[str, str]) -> str:
    """One line per host: answered or not, runner state, done of assigned, sealed, collected, now, failed, lost."""
    assigned = state.assignment[p.host]
    collected = sum(detach.stored(state, root, p.host, c) for c in assigned)
    lost = f" LOST ({state.lost[p.host]})" if p.host in state.lost else ""
    if not p.answered:
        return f"  {p.host}: no answer ({p.error}){lost}; {collected}/{len(assigned)} collected"
    failed = [
        f"{cell_name(cid, by_id)}: {rec['error']}" for cid, rec in p.done.items() if rec["outcome"] == "host_error"
    ]
    gone = p.state == "running" and not p.alive  # killed (Ctrl-C on its host, a reboot): its cell is not sealed
    runner = (p.state or "not started") + (" (runner gone)" if gone else "")
    now = f"; now {cell_name(p.current, by_id)} since {p.current_since}" if p.current else ""
    text = (
        f"  {p.host}: {runner}, {len(p.done)}/{len(assigned)} done, {len(p.sealed)} sealed, {collected} collected"
        f"{now}{lost}"
    )
    text += f"; {p.note}" if p.note else ""
    return text + (f"; failed: {'; '.join(failed)}" if failed else "")
