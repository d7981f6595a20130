"""`spark-agent report RESULTS_DIR`: report.md, report.html and PNG plots, with a "what to run" section."""

from __future__ import annotations

import argparse

from agent.commands import flags
from agent.judging import stats
from agent.reporting.markdown import write_report


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="write report.md/.html + plots from a results tree", description=__doc__)
    p.add_argument("results_dir", type=flags.folder, help="results folder (root, one sweep or one host)")
    p.add_argument(
        "-o", "--out", type=flags.writable_folder, default=None, help="where to write (default: RESULTS_DIR)"
    )
    p.add_argument(
        "--threshold",
        type=flags.number(0, 10),
        default=stats.DEFAULT_THRESHOLD,
        help="spread above which a point is unstable (default %(default)s)",
    )
    p.add_argument(
        "--rank-by",
        choices=sorted(stats.RANK_BY),
        default="throughput",
        help="what 'what to run' ranks: output throughput, or goodput under the sweep's SLOs "
        "(vLLM bench serve's request_goodput; default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=stats.DEFAULT_SEED, help="bootstrap RNG seed (default %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for path in write_report(
        args.results_dir, args.out, threshold=args.threshold, seed=args.seed, rank_by=args.rank_by
    ):
        print(path)
    return 0
