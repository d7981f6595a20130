"""`spark-agent compare RESULTS_A RESULTS_B`: B/A at every point, regressions beyond the noise flagged."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from agent.errors import UserError
from agent.hostside import atomic
from agent.judging import stats
from agent.reporting.compare import compare, comparison_table, render_markdown
from agent.results.tree import load_cells


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="compare two results trees point by point", description=__doc__)
    p.add_argument("results_a", type=Path, help="baseline results folder (A)")
    p.add_argument("results_b", type=Path, help="results folder to judge against it (B)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the comparison as markdown here")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when B regresses beyond the noise")
    p.add_argument(
        "--threshold",
        type=float,
        default=stats.DEFAULT_THRESHOLD,
        help="spread above which a point is unstable (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=stats.DEFAULT_SEED, help="bootstrap RNG seed (default %(default)s)")
    p.set_defaults(func=run)


def _cells(path: Path) -> list[dict]:
    if not path.is_dir():
        raise UserError(f"{path}: no such results folder (pass a folder a sweep wrote)")
    cells = load_cells(path)
    if not cells:
        raise UserError(f"{path}: no finished cell (no cell.toml below it); run a sweep first")
    return cells


def run(args: argparse.Namespace) -> int:
    cmp = compare(_cells(args.results_a), _cells(args.results_b), threshold=args.threshold, seed=args.seed)
    console = Console()
    for warning in cmp.warnings:
        console.print(f"[bold yellow]warning:[/] {warning}")
    console.print(comparison_table(cmp))
    console.print(f"{len(cmp.regressions)} regression(s) beyond the noise out of {len(cmp.diffs)} points")
    if args.markdown:
        atomic.write_text(args.markdown, render_markdown(cmp, str(args.results_a), str(args.results_b)))
    return 1 if args.fail_on_regression and cmp.regressions else 0
