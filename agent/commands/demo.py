"""`spark-agent demo [--results DIR]`: the quick sweep (examples/quick.toml) on the embedded default, the simulated
Spark on this machine, then its report. No root, no apt, no docker, no sshd: Ansible's local connection runs the
simulator from this package. Prints the report's "What to run" and where the report is."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.commands import flags
from agent.commands.init import DEFAULT_OUT as INIT_OUT
from agent.paths import DEFAULT_INVENTORY, EXAMPLES

SPEC = EXAMPLES / "quick.toml"
SECTION = "## What to run"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the quick sweep on the simulated Spark on this machine, then print what to run",
        description=__doc__,
    )
    p.add_argument(
        "--results", type=flags.writable_folder, default="results", help="results folder (default: ./results)"
    )
    p.add_argument(
        "--duration",
        type=flags.number(0, 86_400),
        default=None,
        help="override every measurement window, seconds (default: the example's)",
    )
    p.add_argument("--fresh", action="store_true", help="measure again what an earlier demo measured")
    p.add_argument(
        "--port",
        type=_port,
        default=None,
        help="the simulated server's port (default: the embedded inventory's, 18000), to run beside another "
        "server on this machine (then only servers of this demo's work dir count as its own)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.cli import main  # the same sweep and report a user would run, argument checks and all

    inventory = DEFAULT_INVENTORY if args.port is None else _inventory_on_port(Path(args.results), args.port)
    sweep = ["sweep", str(SPEC), "-i", str(inventory), "--results", str(args.results)]
    sweep += ["--duration", str(args.duration)] if args.duration is not None else []
    sweep += ["--fresh"] if args.fresh else []
    print(f"demo: spark-agent {' '.join(sweep[:2])} (the simulated Spark on this machine)", file=sys.stderr)
    rc = main(sweep)
    sweep_dir = Path(args.results) / "quick"
    if not sweep_dir.is_dir():
        return rc or 1
    report_rc = main(["report", str(sweep_dir)])
    report = sweep_dir / "report.md"
    if report_rc != 0 or not report.is_file():
        return report_rc or 1
    print()
    print("\n".join(what_to_run(report.read_text(encoding="utf-8"))))
    print(f"\nreport: {report} (and {report.with_suffix('.html')})")
    print(
        f"next, a real fleet: spark-agent init HOST...; spark-agent sweep {EXAMPLES / 'gb10-nvfp4.toml'} -i {INIT_OUT}"
    )
    return rc


def _port(text: str) -> int:
    if not text.isdigit() or not 1024 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"--port {text[:20]!r}: give a whole number from 1024 to 65535")
    return int(text)


def _inventory_on_port(results: Path, port: int) -> Path:
    """The embedded default with another port, kept next to the results (the sweep records which inventory ran)."""
    import yaml

    inventory = yaml.safe_load(DEFAULT_INVENTORY.read_text(encoding="utf-8"))
    host = inventory["all"]["hosts"]["localhost"]
    host["spark_port"] = port
    # beside another server (another demo, a test): only what this work dir started is ours to stop or to mind
    host["spark_host_scope"] = "workdir"
    host["spark_workdir"] = f"{host['spark_workdir']}-{port}"
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"demo-inventory-{port}.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False), encoding="utf-8")
    return path


def what_to_run(markdown: str) -> list[str]:
    """The report's "What to run" section: its heading and lines up to the next section."""
    lines = markdown.splitlines()
    if SECTION not in lines:
        return ["(the report has no What to run section)"]
    start = lines.index(SECTION)
    section = [SECTION]
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.strip():
            section.append(line)
    return section
