"""One module per `spark-agent` subcommand. Each defines `register(subparsers)` and `run(args) -> int`.

Commands are thin: parse, call one function of the library, print.
"""

NAMES = ["sweep", "check", "env", "pin", "attest", "inspect", "report", "compare", "export", "sim"]
