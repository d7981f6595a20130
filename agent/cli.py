"""The `spark-agent` command line: a thin shell over the library (see agent/commands/)."""

from __future__ import annotations

import argparse
import importlib
import sys

from agent import logs
from agent.commands import NAMES
from agent.errors import UserError
from agent.reporting.escape import plain


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-agent", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in NAMES:
        try:
            module = importlib.import_module(f"agent.commands.{name}")
        except ModuleNotFoundError as exc:  # a command still being built
            if exc.name != f"agent.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure("console")  # commands with --log-format reconfigure
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"spark-agent: error: {plain(exc.message)}", file=sys.stderr)  # may quote a host: one clean line
        return exc.exit_code
    except KeyboardInterrupt:
        print("spark-agent: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: short line, traceback under --debug
        if args.debug:
            raise
        print(f"spark-agent: internal error: {exc!r} (re-run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
