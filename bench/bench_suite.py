"""The test suite's wall time, and each module's, from pytest's own durations (its JUnit XML: every test's setup +
call + teardown, so a module's fixtures count in its time).

    python bench/bench_suite.py [--json FILE] [PYTEST ARGS ...]      # runs pytest with them, e.g. -n 4 -m "not engine"
    python bench/bench_suite.py --from-xml run.xml [--wall SECONDS]   # a run already made with --junitxml
    ... --save-seconds      # also write tests/module_seconds.json: tests/conftest.py hands out the longest first

It runs scripts/pytest.sh, what `scripts/test.sh` runs after its setup and lint (the whole suite, its parallel
workers included: SPARK_TEST_WORKERS), with the arguments given. Under workers a module runs whole on one worker (tests/conftest.py), so its
time is its wall time there; the modules' sum is what a serial run would take, the total is the run's wall time.
State the machine's load average with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECONDS_FILE = REPO / "tests" / "module_seconds.json"  # read by tests/conftest.py to order the work


def module_times(junit_xml: Path) -> dict[str, dict[str, float]]:
    """{module file: {"seconds": sum of its tests' durations, "tests": count, "failed": count}} from JUnit XML
    written with junit_family=xunit1 (each testcase names its file)."""
    modules: dict[str, dict[str, float]] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        name = case.get("file") or case.get("classname", "?").replace(".", "/") + ".py"
        entry = modules.setdefault(name, {"seconds": 0.0, "tests": 0, "failed": 0})
        entry["seconds"] += float(case.get("time") or 0.0)
        entry["tests"] += 1
        entry["failed"] += any(child.tag in ("failure", "error") for child in case)
    return modules


def table(modules: dict[str, dict[str, float]], wall_s: float | None) -> str:
    rows = sorted(modules.items(), key=lambda kv: -kv[1]["seconds"])
    serial = sum(m["seconds"] for m in modules.values())
    lines = ["| module | tests | seconds |", "|---|---:|---:|"]
    lines += [f"| `{name}` | {m['tests']:.0f} | {m['seconds']:.1f} |" for name, m in rows]
    lines.append(
        f"| **sum of the modules** (a serial run) | {sum(m['tests'] for m in modules.values()):.0f} | {serial:.1f} |"
    )
    if wall_s is not None:
        lines.append(f"| **wall time of the run** | | {wall_s:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-xml", type=Path, help="read a JUnit XML instead of running pytest")
    parser.add_argument("--wall", type=float, help="with --from-xml: the run's wall time, if known")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--save-seconds", action="store_true", help=f"write each module's seconds to {SECONDS_FILE.relative_to(REPO)}"
    )
    args, rest = parser.parse_known_args(argv)
    if args.from_xml:
        xml, wall, rc = args.from_xml, args.wall, 0
    else:
        xml = Path(tempfile.mkdtemp(prefix="bench-suite-")) / "junit.xml"
        command = ["bash", str(REPO / "scripts" / "pytest.sh"), *rest, "-o", "junit_family=xunit1", f"--junitxml={xml}"]
        print("running:", " ".join(command), f"(load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
        started = time.monotonic()
        rc = subprocess.run(command, cwd=REPO).returncode
        wall = time.monotonic() - started
    modules = module_times(xml)
    print(table(modules, wall))
    print(f"load average after: {os.getloadavg()[0]:.1f}; pytest exit {rc}")
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "modules": modules}, indent=1) + "\n")
    if args.save_seconds:
        seconds = {name: round(m["seconds"], 1) for name, m in sorted(modules.items())}
        SECONDS_FILE.write_text(json.dumps(seconds, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
