"""`spark-agent export RESULTS_DIR`: every measurement as CSV or JSON Lines (vllm bench serve key names)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.errors import UserError
from agent.hostside import atomic
from agent.reporting.export import FORMATS, rows
from agent.results.tree import load_cells


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export measurements as CSV or JSON Lines", description=__doc__)
    p.add_argument("results_dir", type=Path, help="results folder (root, one sweep or one host)")
    p.add_argument(
        "-f", "--format", choices=sorted(FORMATS), default=None, help="default: from the --output suffix, else csv"
    )
    p.add_argument("-o", "--output", type=Path, default=None, help="file to write (default: stdout)")
    p.set_defaults(func=run)


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = args.output.suffix.lstrip(".").lower() if args.output else ""
    return {"jsonl": "jsonl", "json": "jsonl", "ndjson": "jsonl"}.get(suffix, "csv")


def run(args: argparse.Namespace) -> int:
    if not args.results_dir.is_dir():
        raise UserError(f"{args.results_dir}: no such results folder (pass a folder a sweep wrote)")
    text = FORMATS[_format(args)](rows(load_cells(args.results_dir)))
    if args.output:
        atomic.write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0
