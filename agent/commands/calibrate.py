"""spark-agent calibrate SPEC [-i INVENTORY] [--limit HOSTS] [--results DIR] [--duration S]"""

from __future__ import annotations

import sys
from pathlib import Path

from agent import logs
from agent.commands import flags
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec


def register(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="measure every host's speed on the spec's reference cell, once per fleet and image (later sweeps "
        "use it for a week instead of a reference cell of their own)",
    )
    p.add_argument("spec", help="sweep spec (TOML): its image and reference configuration are measured")
    p.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="Ansible inventory")
    p.add_argument("--limit", help="only these hosts or groups (comma-separated), as ansible --limit")
    p.add_argument(
        "--results", type=flags.writable_folder, default="results", help="results folder (default: ./results)"
    )
    p.add_argument("--duration", type=flags.number(0, 86_400), help="override the measurement window, seconds")
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    p.set_defaults(func=run)


def run(args) -> int:
    """Exit 0: every host measured the reference and its effect is known; 1: some host did not; 2: bad input."""
    import dataclasses

    from agent.judging import correctness, hosteffect, summary
    from agent.running import calibration
    from agent.running.follow import run_sweep

    logs.configure(args.log_format)
    spec = load_spec(args.spec)
    if args.duration is not None:
        spec = spec.with_duration(args.duration)
    spec = dataclasses.replace(spec, name=calibration.SWEEP)
    hosts = load_inventory(args.inventory, args.limit)
    root = Path(args.results)
    outcome = run_sweep(
        spec,
        Path(args.inventory),
        hosts,
        root,
        fresh=True,  # a calibration replaces the last one: its age is the age of what it measured
        replicas=calibration.EVERY_HOST,
        select=calibration.select_reference,
    )
    cells = correctness.judged_cells(outcome.sweep_dir) if outcome.sweep_dir.exists() else []
    summaries = [s for s in summary.summarize_cells(cells) if s.rankable]
    measured = {str(s.cell.get("host")) for s in summaries}
    by_machine: dict[str, list[summary.CellSummary]] = {}
    for s in summaries:
        by_machine.setdefault(summary.comparable(s.cell), []).append(s)
    for group in by_machine.values():
        effects = hosteffect.estimate(group)
        print(f"{group[0].hardware}: base {effects.base or group[0].cell.get('host')}", file=sys.stderr)
        for e in effects.shown():
            print(f"  {e.words()}" + (f"; {e.outlier}" if e.outlier else ""), file=sys.stderr)
    missing = sorted(h.name for h in hosts if h.name not in measured)
    for host in missing:
        print(f"{host}: no valid reference measurement (see {outcome.sweep_dir})", file=sys.stderr)
    print(
        f"calibration: {outcome.sweep_dir} (used by later sweeps of this image for "
        f"{calibration.MAX_AGE_DAYS:.0f} days)",
        file=sys.stderr,
    )
    if outcome.interrupted:
        return 130
    return 1 if missing or outcome.fatal else 0
