"""spark-agent sweep SPEC.toml [-i INVENTORY] [--limit HOSTS] [--results DIR] [--duration S] [--fresh]"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from agent import logs
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.results import tree as results
from agent.running.progress import Progress
from agent.running.sweep import run_sweep


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
    p.add_argument("--results", default="results", help="results folder (default: ./results)")
    p.add_argument("--duration", type=float, help="override every measurement window, seconds (quick rehearsals)")
    p.add_argument("--fresh", action="store_true", help="measure finished cells again (default: resume)")
    p.add_argument("--evict", action="store_true", help="stop a vLLM server we did not start (default: refuse)")
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    logs.configure(args.log_format)
    spec = load_spec(args.spec)
    if args.duration is not None:
        if args.duration <= 0:
            from agent.errors import UserError

            raise UserError(f"--duration must be > 0 seconds, got {args.duration}")
        spec = spec.with_duration(args.duration)
    hosts = load_inventory(args.inventory, args.limit)
    show = not args.no_progress and args.log_format == "console" and sys.stderr.isatty()
    outcome = run_sweep(
        spec,
        Path(args.inventory),
        hosts,
        Path(args.results),
        fresh=args.fresh,
        evict=args.evict,
        progress=Progress(enabled=show),
    )
    cells = results.load_cells(outcome.sweep_dir) if outcome.sweep_dir.exists() else []
    _print_table(cells, args.log_format)
    lost = {h: o for h, o in outcome.hosts.items() if o.error or o.lost}
    for host, o in lost.items():
        print(f"host {host}: {len(o.lost)} cell(s) not measured" + (f": {o.error}" if o.error else ""), file=sys.stderr)
    print(f"results: {outcome.sweep_dir}", file=sys.stderr)
    return 1 if lost else 0


def _print_table(cells: list[dict], fmt: str) -> None:
    if fmt == "json" or not cells:
        return
    from agent.reporting.markdown import terminal_table

    Console().print(terminal_table(cells))
