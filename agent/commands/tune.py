"""spark-agent tune SPEC [-i INV] [--budget 30m] [--confidence 0.95] [--min-repeats 2] [--max-repeats N]

The same spec as `sweep`, measured adaptively (agent/judging/sequential.py): screen, then measure in full only what
can still change the recommendation, with more windows only where a point is still open. Ends with the report.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from agent import logs
from agent.commands import flags
from agent.commands.sweep import _print_summary, _sigterm_as_interrupt
from agent.errors import UserError
from agent.escape import plain as line
from agent.judging import correctness, summary
from agent.judging import sequential as seq
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.reporting.markdown import write_report
from agent.running.progress import Progress
from agent.running.tune import TuneOutcome, all_steps, check_budget, run_tune

_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration(text: str) -> float:
    """'30m', '2h', '900s' or '900' (seconds) → seconds; anything else is argparse's one-line error."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0 or float(m.group(1)) * _UNITS[m.group(2) or "s"] > 30 * 86_400:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a duration such as 30m, 2h or 900s (at most 30 days)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def register(sub) -> None:
    p = sub.add_parser("tune", help="measure a sweep spec adaptively: stop what is decided, skip what cannot matter")
    p.add_argument("spec", help="sweep spec (TOML), as for sweep")
    p.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY), help="Ansible inventory (as for sweep)")
    p.add_argument("--limit", help="only these hosts or groups (comma-separated), as ansible --limit")
    p.add_argument(
        "--results", type=flags.writable_folder, default="results", help="results folder (default: ./results)"
    )
    p.add_argument("--budget", type=duration, help="wall-time budget, e.g. 30m; what it cannot fit stays undecided")
    p.add_argument("--confidence", type=float, default=0.95, help="1 - error rate over all looks (default 0.95)")
    p.add_argument("--min-repeats", type=int, default=2, help="windows per point at first (default 2)")
    p.add_argument("--max-repeats", type=int, help="windows per point at most (default: the spec's repeats)")
    p.add_argument(
        "--max-starts",
        type=int,
        help="independent server starts of one config at most (default: the spec's server_starts, at least 2)",
    )
    p.add_argument(
        "--carry-margin",
        type=float,
        default=1.25,
        help="a backend beaten by at least this ratio at every screened level is out (default 1.25)",
    )
    p.add_argument("--duration", type=flags.number(0, 86_400), help="override every measurement window, seconds")
    p.add_argument("--evict", action="store_true", help="stop a vLLM server we did not start (default: refuse)")
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    """Exit 0: settled (a recommendation, equivalence, or a tie at the spec's schedule, with nothing left open) and every cell it ran
    valid; 1: something stayed undecided (budget, a lost cell), failed, was invalid or had wrong outputs (the
    sweep's rule); 2: bad input, nothing touched; 130: interrupted."""
    logs.configure(args.log_format)
    spec = load_spec(args.spec)
    if spec.load.request_rates or spec.load.context_depths:  # tune screens concurrency levels, one load per cell
        key = "request_rate" if spec.load.request_rates else "context_depth"
        text = spec.path.read_text(errors="replace").splitlines()
        line = next((i for i, t in enumerate(text, 1) if t.strip().startswith(key)), 1)
        raise UserError(
            f"{spec.path}:{line}: tune measures one request rate and context depth per cell; give [load] {key} "
            "one value (or measure the list with `spark-agent sweep`)"
        )
    if args.duration is not None:
        spec = spec.with_duration(args.duration)
    settings = seq.TuneSettings(
        confidence=args.confidence,
        min_repeats=args.min_repeats,
        max_repeats=args.max_repeats if args.max_repeats is not None else max(spec.repeats, args.min_repeats),
        carry_margin=args.carry_margin,
        max_starts=args.max_starts if args.max_starts is not None else max(spec.server_starts, 2),
        sweep_repeats=spec.repeats,
        sweep_starts=spec.server_starts,
        margin=spec.equivalence,
    )
    bad = seq.problems(settings)
    if bad:
        raise UserError(bad[0])
    check_budget(spec, settings, args.budget)
    hosts = load_inventory(args.inventory, args.limit)
    show = not args.no_progress and args.log_format == "console" and sys.stderr.isatty()
    with _sigterm_as_interrupt():
        outcome = run_tune(
            spec, Path(args.inventory), hosts, Path(args.results), settings, args.budget, args.evict,
            Progress(enabled=show),
        )  # fmt: skip
    cells = correctness.judged_cells(outcome.sweep_dir) if outcome.sweep_dir.is_dir() else []
    whole = all_steps(outcome.rounds)  # every step's cells, each once: the tune's summary, not its last step's
    if whole is not None:
        whole.judge_outputs(cells)
        _print_summary(whole, args.log_format, cells)
    short = summary.not_valid(cells)  # the sweep's rule: a failed, invalid or WRONG OUTPUT cell is exit 1
    _print_decisions(outcome, short)
    if outcome.sweep_dir.exists() and not outcome.interrupted:
        for path in write_report(outcome.sweep_dir, None):
            print(path)
    print(f"results: {outcome.sweep_dir}", file=sys.stderr)
    if outcome.interrupted:
        print("spark-agent: interrupted (re-run tune to resume)", file=sys.stderr)
        return 130
    if outcome.fatal:
        print(f"spark-agent: error: {outcome.fatal}", file=sys.stderr)
        return 1
    return 0 if outcome.settled and not short else 1


def _print_decisions(o: TuneOutcome, short: list[str]) -> None:
    out = sys.stderr
    print(f"tune: {len(o.steps)} cell runs in {o.elapsed_s / 60:.1f} min", file=out)
    for s in o.stopped:
        print(f"  stopped {s.label}: {s.reason}", file=out)
    for s in o.skipped:
        print(f"  skipped {s.label}: {s.reason}", file=out)
    for p in o.open_points:
        print(f"  undecided {p}", file=out)
    for p in o.tied:
        print(f"  tied {p} (measured as far as the spec's schedule: undecided, the report says its price)", file=out)
    for b in o.budget_left:
        print(f"  not run (budget): {b}", file=out)
    for what in short:
        print(line(f"  not valid {what}"), file=out)
    if short:
        print(f"tune: {len(short)} cell(s) without a valid measurement: exit 1 (the report says why)", file=out)
