"""`spark-agent export RESULTS_DIR|SELECTION`: every measurement as CSV or JSON Lines (vllm bench serve key names),
from a results folder or a store selection (key=value[,key=value])."""

from __future__ import annotations

import argparse
import sys

from agent.commands import flags
from agent.hostside import atomic
from agent.reporting.export import FORMATS, rows
from agent.store import options


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export measurements as CSV or JSON Lines", description=__doc__)
    p.add_argument(
        "results_dir", type=options.folder_or_selection, help="results folder (root, sweep or host) or store selection"
    )
    p.add_argument(
        "-f", "--format", choices=sorted(FORMATS), default=None, help="default: from the --output suffix, else csv"
    )
    p.add_argument("-o", "--output", type=flags.writable_file, default=None, help="file to write (default: stdout)")
    options.add_store_option(p)
    p.set_defaults(func=run)


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = args.output.suffix.lstrip(".").lower() if args.output else ""
    return {"jsonl": "jsonl", "json": "jsonl", "ndjson": "jsonl"}.get(suffix, "csv")


def run(args: argparse.Namespace) -> int:
    text = FORMATS[_format(args)](rows(options.cells_of(args.results_dir, args, empty_ok=True)))
    if args.output:
        atomic.write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0
