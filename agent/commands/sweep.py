"""spark-agent sweep SPEC.toml [-i INVENTORY] [--limit HOSTS] [--results DIR] [--duration S] [--fresh]"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import structlog

from agent import logs
from agent.commands import flags
from agent.errors import UserError
from agent.escape import plain as line
from agent.judging import correctness
from agent.paths import DEFAULT_INVENTORY
from agent.planning import multinode
from agent.planning.inventory import load_inventory
from agent.planning.spec import Spec, load_spec
from agent.reporting import terminal
from agent.results import tree as results
from agent.running import detach, livemetrics
from agent.running.follow import STOPPED_MID_CELL, run_sweep
from agent.running.progress import Progress
from agent.running.sweep import BUCKETS, SweepOutcome

log = structlog.get_logger("spark_agent.sweep")


def register(sub) -> None:
    p = sub.add_parser("sweep", help="provision, serve, measure and collect every cell of a sweep spec")
    p.add_argument("spec", help="sweep spec (TOML), e.g. examples/quick.toml")
    p.add_argument(
        "-i",
        "--inventory",
        default=str(DEFAULT_INVENTORY),
        help="Ansible inventory (default: inventory/local.yml, the simulated Spark on this machine)",
    )
    p.add_argument("--limit", help="only these hosts or groups (comma-separated), as ansible --limit")
    p.add_argument(
        "--results", type=flags.writable_folder, default="results", help="results folder (default: ./results)"
    )
    p.add_argument(
        "--duration",
        type=flags.number(0, 86_400),
        help="override every measurement window, seconds (quick rehearsals)",
    )
    p.add_argument("--fresh", action="store_true", help="measure finished cells again (default: resume)")
    p.add_argument("--evict", action="store_true", help="stop a vLLM server we did not start (default: refuse)")
    p.add_argument(
        "--replicas",
        type=_replicas,
        default=1,
        help="measure each cell on K different hosts of its fingerprint group (default 1: once per group)",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="hand each host its share and return; the hosts run it alone (then: status, collect)",
    )
    p.add_argument(
        "--lost-after",
        type=flags.number(0, 86_400, low_open=False),
        default=detach.LOST_AFTER_S,
        help=f"declare a host lost after this many seconds without an answer; its cells go to the others of its "
        f"group (default {detach.LOST_AFTER_S:.0f})",
    )
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    livemetrics.add_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    """Exit 0: every planned cell measured and valid; 1: something failed, was invalid or lost (the summary says
    what); 2: bad input, nothing touched (UserError); 130: interrupted (Ctrl-C or SIGTERM)."""
    logs.configure(args.log_format)
    spec = load_spec(args.spec)
    if args.duration is not None:
        spec = spec.with_duration(args.duration)
    elif not args.fresh:
        spec = _same_window(spec, spec.path, Path(args.results))
    hosts = load_inventory(args.inventory, args.limit)
    multinode.require_ray(spec, hosts)
    if args.detach:
        if args.metrics:
            raise UserError("--metrics needs someone to follow the runners: drop --detach, or use collect --wait")
        return _detach(args, spec, hosts)
    show = not args.no_progress and args.log_format == "console" and sys.stderr.isatty()
    live = livemetrics.from_args(args, spec.name)
    with _sigterm_as_interrupt(), _stopped(live):
        outcome = run_sweep(
            spec,
            Path(args.inventory),
            hosts,
            Path(args.results),
            fresh=args.fresh,
            evict=args.evict,
            progress=Progress(enabled=show),
            replicas=args.replicas,
            spec_path=spec.path,  # the file used: a packaged example, not the path as typed
            lost_after=args.lost_after,
            metrics=live,
        )
    cells = correctness.judged_cells(outcome.sweep_dir) if outcome.sweep_dir.exists() else []
    outcome.judge_outputs(cells)  # a cell with wrong outputs ran, but is not a valid measurement
    _print_table(cells, args.log_format)
    _print_summary(outcome, args.log_format, cells)
    print(f"results: {outcome.sweep_dir}", file=sys.stderr)
    if outcome.interrupted:
        print("spark-agent: interrupted", file=sys.stderr)
        return 130
    if outcome.fatal:
        print(f"spark-agent: error: {outcome.fatal}", file=sys.stderr)
        return 1
    return 0 if all_valid(outcome) else 1


@contextmanager
def _stopped(live: livemetrics.LiveMetrics | None) -> Iterator[None]:
    """The live metrics endpoint lives as long as the following does."""
    try:
        yield
    finally:
        if live is not None:
            live.stop()


def _detach(args, spec, hosts) -> int:
    """Hand out and return: each host runs its share under its own runner, whatever happens to this process."""
    state = detach.hand_out(
        spec,
        spec.path,
        Path(args.inventory),
        hosts,
        Path(args.results),
        replicas=args.replicas,
        fresh=args.fresh,
        evict=args.evict,
    )
    for host in state.hosts():
        lost = f" (refused: {state.lost[host]})" if host in state.lost else ""
        print(f"{host}: {len(state.assignment[host])} cell(s){lost}", file=sys.stderr)
    where = ["--results", str(args.results), "-i", str(args.inventory)]
    if getattr(args, "vault_password_file", None):
        where += ["--vault-password-file", args.vault_password_file]
    print(f"detached sweep {state.sweep}: the hosts run it now; then", file=sys.stderr)
    print(f"  progress:  {shlex.join(['spark-agent', 'status', state.sweep, *where])}", file=sys.stderr)
    print(f"  results:   {shlex.join(['spark-agent', 'collect', state.sweep, *where, '--wait'])}", file=sys.stderr)
    return 1 if state.lost else 0


def _same_window(spec: Spec, spec_path: Path, root: Path) -> Spec:
    """A re-run of a sweep still out on the hosts (detached, or a controller that went away) without --duration
    takes the window it was handed out with: the same cells, so what the hosts measure is followed, not redone."""
    try:
        state = detach.load_state(root, spec.name)
    except UserError:
        return spec
    same_file = state.spec == str(spec_path.resolve())
    if state.finished or not same_file or not state.duration_s or state.duration_s == spec.duration_s:
        return spec
    print(
        f"sweep {spec.name}: using --duration {state.duration_s:g}, as it was handed out "
        f"(pass --duration to choose, or --fresh to start over)",
        file=sys.stderr,
    )
    return spec.with_duration(state.duration_s)


def _replicas(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--replicas {text!r}: give a whole number of hosts, 1 or more")
    return value


def all_valid(outcome: SweepOutcome) -> bool:
    """Every planned cell has a valid measurement: from this run, or from an earlier one (resume); WRONG OUTPUT is
    not one (SweepOutcome.judge_outputs). A cell handed back by a lost host (requeued) counts through the host that
    measured it instead."""
    t = outcome.totals()
    earlier_ok = all(v == "valid" for o in outcome.hosts.values() for v in o.skipped.values())
    return t["measured"] + t["skipped"] + t["requeued"] == t["planned"] and earlier_ok


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a sweep the way Ctrl-C does: servers stopped, nothing half-written, exit 130."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_summary(outcome: SweepOutcome, fmt: str, cells: Sequence[dict] = ()) -> None:
    """Per host and in total; planned = measured + wrong + invalid + failed + lost + skipped + requeued, always.
    `cells`: the sweep's, as load_cells read them (the probe's reasons for a WRONG OUTPUT cell)."""
    wrong = {(str(c.get("host")), str(c.get("cell_id"))): correctness.wrong_reasons(c) for c in cells}
    rows = {h: o.counts() for h, o in sorted(outcome.hosts.items())}
    total = outcome.totals()
    if fmt == "json":
        log.info("sweep_summary", hosts=rows, total=total, lost_hosts=outcome.lost_hosts or None)
        return
    out = sys.stderr
    print(
        "summary (planned = measured + wrong + invalid + failed + lost + skipped + requeued; wrong = WRONG OUTPUT; "
        "skipped = finished earlier; requeued = its host was lost, another host of the group took it)",
        file=out,
    )
    width = max([len("total"), *map(len, rows)])
    print(f"  {'host':<{width}}  " + "  ".join(f"{c:>8}" for c in BUCKETS), file=out)
    for name, counts in [*rows.items(), ("total", total)]:
        print(f"  {name:<{width}}  " + "  ".join(f"{counts[c]:>8}" for c in BUCKETS), file=out)
    detached = sum(len(o.while_detached) for o in outcome.hosts.values())
    if detached:
        print(
            f"  {detached} of these cell(s) were measured while detached (by the runners handed out earlier) and "
            "collected by this run",
            file=out,
        )
    for host, o in sorted(outcome.hosts.items()):
        if o.host_lost:
            print(f"lost host {host}: {o.error}", file=out)
        elif o.error:
            print(f"host {host} stopped: {o.error}", file=out)
        for cell_id in o.wrong:
            why = "; ".join(wrong.get((host, cell_id), [])) or "see the report's WRONG OUTPUT section"
            print(line(f"  wrong output {host}/{cell_id}: {why} (never ranked; --fresh measures it again)"), file=out)
        for cell_id in o.failed:
            print(line(f"  failed {host}/{cell_id}: {_failure_line(outcome.sweep_dir / host / cell_id)}"), file=out)
        for cell_id, why in o.lost.items():  # the cell a stop cut short is "stopped", one never begun "not run"
            if STOPPED_MID_CELL in why:
                said = f"stopped {host}/{cell_id}: {why.partition(STOPPED_MID_CELL + ': ')[2]} (a re-run measures it)"
            elif why.startswith("not run: "):
                said = f"not run {host}/{cell_id}: {why.removeprefix('not run: ')}"
            else:
                said = f"lost {host}/{cell_id}: {why}"
            print(line(f"  {said}"), file=out)
        for cell_id, verdict in o.skipped.items():
            if verdict != "valid":
                print(
                    f"  skipped {host}/{cell_id}: finished earlier as {verdict} (--fresh measures it again)", file=out
                )


def _failure_line(folder: Path) -> str:
    """What failed and the line that says why (the server's own words): from the cell's record."""
    try:
        record = results.read_toml(folder / results.CELL_FILE)
    except (OSError, ValueError):
        return "no readable record"
    return f"{record.get('failure_class') or 'failed'}: {record.get('failure_root_cause') or '(no root cause)'}"


def _print_table(cells: list[dict], fmt: str) -> None:
    if fmt == "json" or not cells:
        return
    from agent.reporting.terminal import terminal_table

    terminal.console().print(terminal_table(cells))
