"""The `spark-agent` command line: a thin shell over the library (see agent/commands/)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from agent import logs
from agent.commands import NAMES
from agent.errors import UserError
from agent.hostside import redact
from agent.planning import vault
from agent.reporting.escape import plain


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line too (argparse would print the usage first), exit 2. Subcommands inherit it."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="spark-agent", description=__doc__)
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
    for command in sub.choices.values():  # every command that reads an inventory can decrypt its !vault values
        if "--inventory" in command._option_string_actions:
            vault.add_option(command)
        if "-v" not in command._option_string_actions:
            command.add_argument("-v", "--verbose", action="store_true", help="show the info log lines too")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UserError as exc:
        print(f"spark-agent: error: {plain(exc.message)}", file=sys.stderr)
        return exc.exit_code
    logs.VERBOSE["on"] = bool(getattr(args, "verbose", False))
    logs.configure("console")  # commands with --log-format reconfigure
    try:
        if hasattr(args, "vault_password_file"):
            vault.use_password_file(args.vault_password_file)
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
        shown = redact.redact_text(repr(exc))
        print(f"spark-agent: internal error: {shown} (re-run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
