"""One module per `spark-agent` subcommand. Each defines `register(subparsers)` and `run(args) -> int`.

Commands are thin: parse, call one function of the library, print.
"""

NAMES = [
    "sweep",
    "tune",
    "calibrate",
    "status",
    "collect",
    "check",
    "env",
    "lint",
    "pin",
    "attest",
    "inspect",
    "logs",
    "trust",
    "clean_cache",
    "report",
    "compare",
    "export",
    "history",
    "store",
    "site",
    "sim",
]
