"""The `spark-agent` command line: a thin shell over the library (see agent/commands/)."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from agent.commands import COMMANDS
from agent.errors import UserError

DESCRIPTION = "Provision DGX Sparks with Ansible, serve vLLM, attest what loaded, sweep backends, report what to run."

# Imports here are only what every call needs: a command's module (and the libraries behind it: Ansible,
# SQLAlchemy, matplotlib) is imported only when that command runs, so `--help` and `--version` stay fast.


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line too (argparse would print the usage first), exit 2. Subcommands inherit it."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see {self.prog} --help)")


class _Version(argparse.Action):
    """--version: the package's version and the vLLM releases its rules know (read only when asked)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object):
        super().__init__(option_strings, dest=dest, nargs=0, help="print the version and the vLLM versions known")

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        print(version_text())
        sys.exit(0)


def version_text() -> str:
    from importlib import metadata

    from agent import __version__
    from agent.planning import envrules

    try:
        version = metadata.version("spark-agent")
    except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        version = __version__
    releases = [str(entry["vllm"]) for entry in envrules.vllm_env_rules()]
    known = f"{releases[0]} … {releases[-1]} ({len(releases)} releases)" if releases else "none"
    return f"spark-agent {version}\nvLLM versions its rules know: {known}"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (only=COMMAND) one command in full and the others as names with their help line."""
    parser = _Parser(prog="spark-agent", description=DESCRIPTION, epilog="New here? `spark-agent demo` (no hardware)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for name, (module_name, line) in COMMANDS.items():
        if only is None or name == only:
            _register(sub, module_name)
        else:
            sub.add_parser(name, help=line, add_help=False)
    for command in sub.choices.values():
        if "--inventory" in command._option_string_actions:  # it can decrypt its inventory's !vault values
            from agent.planning import vault

            vault.add_option(command)
        if "-v" not in command._option_string_actions:
            command.add_argument("-v", "--verbose", action="store_true", help="show the info log lines too")
    return parser


def _register(sub: argparse._SubParsersAction, module_name: str) -> None:
    try:
        module = importlib.import_module(f"agent.commands.{module_name}")
    except ModuleNotFoundError as exc:  # a command still being built
        if exc.name != f"agent.commands.{module_name}":
            raise
        return
    module.register(sub)


def _command_of(argv: list[str]) -> str | None:
    """The subcommand argv names (the top-level options take no value), or None (--help, --version, a typo)."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(only=_command_of(argv) or "").parse_args(argv)
    except UserError as exc:
        return _user_error(exc)
    from agent import logs
    from agent.hostside import redact

    logs.VERBOSE["on"] = bool(getattr(args, "verbose", False))
    logs.configure("console")  # commands with --log-format reconfigure
    try:
        if hasattr(args, "vault_password_file"):
            from agent.planning import vault

            vault.use_password_file(args.vault_password_file)
        return int(args.func(args) or 0)
    except UserError as exc:
        return _user_error(exc)  # may quote a host: one clean line
    except KeyboardInterrupt:
        print("spark-agent: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: short line, traceback under --debug
        if args.debug:
            raise
        shown = redact.redact_text(repr(exc))
        print(f"spark-agent: internal error: {shown} (re-run with --debug for the traceback)", file=sys.stderr)
        return 1


def _user_error(exc: UserError) -> int:
    from agent.escape import plain

    print(f"spark-agent: error: {plain(exc.message)}", file=sys.stderr)
    return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
