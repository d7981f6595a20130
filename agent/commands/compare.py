"""`spark-agent compare A B`: B/A at every point, regressions beyond the noise flagged.

A and B are results folders or store selections (key=value[,key=value]), e.g.
`spark-agent compare image=vllm:25.11* image=vllm:26.01*` compares every configuration both images measured."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.commands import flags
from agent.escape import rich
from agent.hostside import atomic
from agent.judging import regression, stats, summary
from agent.reporting import terminal
from agent.reporting.compare import compare, comparison_table, render_markdown, summary_line
from agent.reporting.markdown import calibration_cells
from agent.store import options


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="compare two results trees point by point", description=__doc__)
    p.add_argument(
        "results_a", type=options.folder_or_selection, help="baseline: results folder or store selection (A)"
    )
    p.add_argument("results_b", type=options.folder_or_selection, help="folder or selection to judge against it (B)")
    p.add_argument(
        "--markdown", type=flags.writable_file, default=None, help="also write the comparison as markdown here"
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a configuration of B regresses beyond the noise (at most 5%% false alarms per compare), "
        "or when a configuration could not be compared (one side only, INVALID or failed, no host effect)",
    )
    p.add_argument(
        "--threshold",
        type=flags.number(0, 10),
        default=summary.DEFAULT_THRESHOLD,
        help="spread above which a point is unstable (default %(default)s)",
    )
    flags.add_rank_by(p)
    p.add_argument("--seed", type=int, default=stats.DEFAULT_SEED, help="bootstrap RNG seed (default %(default)s)")
    options.add_store_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cells_a, cells_b = options.cells_of(args.results_a, args), options.cells_of(args.results_b, args)
    calibration = [  # host effects a recent `calibrate` measured next to either folder, as the report uses them
        c
        for side, cells in ((args.results_a, cells_a), (args.results_b, cells_b))
        if isinstance(side, Path)
        for c in calibration_cells(side, cells)
    ]
    cmp = compare(
        cells_a, cells_b, threshold=args.threshold, seed=args.seed, rank_by=args.rank_by, calibration=calibration
    )
    console = terminal.console()
    for warning in cmp.warnings:
        console.print(f"[bold yellow]warning:[/] {warning}")
    console.print(comparison_table(cmp))
    console.print(summary_line(cmp))
    for c in cmp.regressions:
        if c.change is not None:
            console.print(f"[bold red]regression:[/] {rich(c.label)}: {rich(regression.describe(c.change))}")
    for why in cmp.uncompared:
        console.print(f"[bold yellow]not compared:[/] {rich(why)}")
    for why in cmp.same_failure:
        console.print(f"not compared (alike on both sides): {rich(why)}")
    if args.markdown:
        atomic.write_text(args.markdown, render_markdown(cmp, str(args.results_a), str(args.results_b)))
    if args.fail_on_regression and cmp.uncompared and not cmp.regressions:
        console.print("--fail-on-regression: fails, as what was not compared cannot be vouched for")
    return 1 if args.fail_on_regression and (cmp.regressions or cmp.uncompared) else 0
