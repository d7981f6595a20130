"""`spark-agent history [FILTER...]`: the same configuration over time and across images, from the store.

Filters are key=value (checkpoint, backend, concurrency, image, vllm_version, host, host_group, sweep, since,
until, ...; `*` matches anything). Each row is one measured cell at one concurrency; "regression" marks a row
slower than the previous image's beyond the noise (the rule compare and report use), "cannot rank" one within it;
"change point" a row from which its series (config, host, load point) stays at a new level (judging/changepoint.py,
the `watch` extra).
"""

from __future__ import annotations

import argparse

from rich.table import Table

from agent.commands import flags
from agent.errors import UserError
from agent.escape import rich
from agent.hostside import atomic
from agent.judging import changepoint
from agent.reporting import terminal
from agent.reporting.words import num, pct
from agent.store import db, history, options, select


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("history", help="one configuration over time and across images", description=__doc__)
    p.add_argument(
        "filters",
        nargs="*",
        metavar="KEY=VALUE",
        help=f"filters: {', '.join(select.KEYS)}, or a setting such as speculative=off ({', '.join(history.AXES)})",
    )
    p.add_argument("--plot", type=flags.writable_file, default=None, help="also draw it (PNG) here")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a row is a regression")
    options.add_store_option(p)
    p.set_defaults(func=run)


def table(rows: list[history.HistoryRow], tiers: dict[tuple[str, str, str], tuple[str, str]] | None = None) -> Table:
    """`tiers`: a shared bundle's (tier, signer) per sweep run (store/bundles.py); a run from a tree reads "own"."""
    tiers = tiers or {}
    t = Table(title="Median output tok/s per measured cell, oldest first")
    for col in (
        "config",
        "host",
        "c",
        "started",
        "sweep run",
        "image",
        "vLLM",
        "tok/s",
        "spread",
        "n",
        "vs previous image",
        "evidence",
    ):
        t.add_column(col, justify="right" if col in ("c", "tok/s", "spread", "n") else "left")
    colour = {"regression": "bold red", "improvement": "green"}
    for r in rows:
        change = r.change + (f" ({r.ratio:.3f}×)" if r.change else "")
        change += f"{'; ' if change else ''}change point: {r.change_point}" if r.change_point else ""
        t.add_row(
            rich(r.config),
            rich(r.host),
            str(r.concurrency),
            rich(r.started_at[:16]),
            rich(r.run),
            rich(history._image_tag(r.image)),
            rich(r.vllm_version or "?"),
            num(r.median) if r.verdict == "valid" else rich(r.verdict.upper()),
            pct(r.spread) if r.spread is not None else "–",
            str(len(r.values)),
            f"[{colour.get(r.change, 'dim')}]{rich(change)}[/]",
            rich(_evidence(r, tiers)),
        )
    return t


def _evidence(r: history.HistoryRow, tiers: dict[tuple[str, str, str], tuple[str, str]]) -> str:
    found = tiers.get((r.results_root, r.sweep, r.sweep_started))
    return f"{found[0]}, signed by {found[1]}" if found else "own"


def run(args: argparse.Namespace) -> int:
    store_terms, axes = history.split_terms(args.filters)
    selection = select.parse(store_terms)
    engine, url = options.engine_for(args)
    rows = history.query(engine, selection, axes=axes)
    if not rows:
        shown = ",".join([str(selection)] + [f"{a}={v}" for a, vs in axes.items() for v in vs])
        raise UserError(f"store {db.shown(url)}: nothing measured matches {shown}")
    console = terminal.console()
    from agent.store import bundles

    console.print(table(rows, bundles.tiers_by_run(engine)))
    bad = history.regressions(rows)
    console.print(f"{len(rows)} row(s), {len(bad)} regression(s) beyond the noise")
    if changepoint.available():
        console.print(f"{sum(1 for r in rows if r.change_point)} change point(s) (a level that moved and stayed)")
    else:
        console.print("change points: not looked for; install the watch extra: pip install 'spark-agent[watch]'")
    if args.plot:
        atomic.write_bytes(args.plot, history.plot(rows, f"history: {selection}"))
        print(args.plot)
    return 1 if args.fail_on_regression and bad else 0
