"""`spark-agent site --out DIR`: a static site from the results store: an index of sweeps, each sweep's report,
every configuration's history across images with regression markers and change points, and the "what changed"
pages of `spark-agent watch` (under --results-root/watch). No server needed: publish DIR on any
web server, or open DIR/index.html."""

from __future__ import annotations

import argparse

from agent.commands import flags
from agent.judging import summary
from agent.reporting import site
from agent.running.watch import PAGES
from agent.store import options


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("site", help="render a static site of the results store", description=__doc__)
    p.add_argument("--out", type=flags.writable_folder, required=True, help="the site's folder (replaced whole)")
    p.add_argument(
        "--threshold",
        type=flags.number(0, 10),
        default=summary.DEFAULT_THRESHOLD,
        help="spread above which a point is unstable (default %(default)s)",
    )
    options.add_store_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine, _ = options.engine_for(args)
    pages = site.build(engine, args.out, threshold=args.threshold, watch_pages=args.results_root / PAGES)
    print(f"{len(pages)} page(s) in {args.out}; open {args.out / 'index.html'}")
    return 0
