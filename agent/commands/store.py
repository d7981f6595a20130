"""`spark-agent store ingest RESULTS...`: index results trees into the store (SQLite by default, or PostgreSQL).

Sweeps ingest each cell as it lands; this back-fills trees measured before, elsewhere, or while the store was
unreachable. Idempotent: ingesting a tree again changes nothing, and says so (new, updated, already there). A sweep
in the store is one run, (results root, name, start): folders holding a sweep of one name never merge. `spark-agent store upgrade` migrates a store's
schema in place (any command that opens a store does it too); `store info` shows its revision and counts.
"""

from __future__ import annotations

import argparse

import sqlalchemy as sa

from agent.commands import flags
from agent.store import db, ingest, options, schema


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("store", help="ingest results trees into the results store", description=__doc__)
    sub = p.add_subparsers(dest="store_command", required=True)
    ing = sub.add_parser("ingest", help="index results trees (back-fill)", description=__doc__)
    ing.add_argument("results", nargs="+", type=flags.folder, help="results folders (root, sweep or host)")
    options.add_store_option(ing)
    info = sub.add_parser("info", help="the store's URL (password masked), schema revision and row counts")
    options.add_store_option(info)
    upgrade = sub.add_parser("upgrade", help="migrate the store's schema to this version's")
    options.add_store_option(upgrade)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine, url = options.engine_for(args)
    if args.store_command == "ingest":
        counts = ingest.ingest_trees(engine, args.results)
        print(
            f"{counts.cells} new cell(s), {counts.updated} updated, {counts.unchanged} already in the store as they "
            f"are; {counts.measurements} measurement(s) written into {db.shown(url)}"
            + (f"; {len(counts.skipped)} skipped (see the warnings)" if counts.skipped else "")
        )
        return 0
    print(f"store: {db.shown(url)}")
    print(f"schema revision: {db.current_revision(engine)} (this version: {db.head()})")
    if args.store_command == "info":
        with engine.connect() as conn:
            for table in (schema.sweeps, schema.hosts, schema.cells, schema.measurements):
                n = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()
                print(f"{table.name}: {n}")
    return 0
