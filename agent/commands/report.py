"""`spark-agent report RESULTS_DIR|SELECTION`: report.md, report.html and PNG plots, with a "what to run" section,
from a results folder or a store selection (key=value[,key=value]; then --out is required)."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.commands import flags
from agent.errors import UserError
from agent.escape import plain
from agent.judging import stats, summary, verdicts
from agent.reporting.markdown import write_report, write_report_cells
from agent.store import options


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="write report.md/.html + plots from a results tree", description=__doc__)
    p.add_argument(
        "results_dir", type=options.folder_or_selection, help="results folder (root, sweep or host) or store selection"
    )
    p.add_argument(
        "-o", "--out", type=flags.writable_folder, default=None, help="where to write (default: RESULTS_DIR)"
    )
    p.add_argument(
        "--threshold",
        type=flags.number(0, 10),
        default=summary.DEFAULT_THRESHOLD,
        help="spread above which a point is unstable (default %(default)s)",
    )
    flags.add_rank_by(p)
    p.add_argument("--seed", type=int, default=stats.DEFAULT_SEED, help="bootstrap RNG seed (default %(default)s)")
    p.add_argument(
        "--equivalence",
        type=flags.number(0, 0.49),
        default=None,
        help="margin Δ inside which two values are equivalent, a share (default: the spec's [judge] equivalence, "
        f"else {verdicts.DEFAULT_MARGIN})",
    )
    options.add_store_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ranking = {"threshold": args.threshold, "seed": args.seed, "rank_by": args.rank_by}
    said: list[str] = []
    if isinstance(args.results_dir, Path):
        written = write_report(args.results_dir, args.out, **ranking, said=said, equivalence=args.equivalence)
    else:
        if args.out is None:
            raise UserError("report from a store selection: pass --out FOLDER (where to write the report)")
        cells = options.cells_of(args.results_dir, args)
        margin = verdicts.DEFAULT_MARGIN if args.equivalence is None else args.equivalence
        written = write_report_cells(cells, args.out, **ranking, said=said, equivalence=margin)
    for text in said:  # what to run first: the files hold the why
        print(plain(text))
    for path in written:
        print(path)
    return 0
