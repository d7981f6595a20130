"""`spark-agent store ingest RESULTS...`: index results trees into the store (SQLite by default, or PostgreSQL).

Sweeps ingest each cell as it lands; this back-fills trees measured before, elsewhere, or while the store was
unreachable. Idempotent: ingesting a tree again changes nothing, and says so (new, updated, already there). A sweep
in the store is one run, (results root, name, start): folders holding a sweep of one name never merge. `spark-agent store upgrade` migrates a store's
schema in place (any command that opens a store does it too); `store info` shows its revision and counts.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import sqlalchemy as sa

from agent.commands import flags
from agent.store import db, ingest, options, schema


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("store", help="ingest results trees into the results store", description=__doc__)
    sub = p.add_subparsers(dest="store_command", required=True)
    ing = sub.add_parser("ingest", help="index results trees (back-fill)", description=__doc__)
    ing.add_argument(
        "results", nargs="+", type=folder_or_bundle, help="results folders (root, sweep or host), or bundle files"
    )
    ing.add_argument("--allowed-signers", type=Path, default=None, help="bundles: ssh-keygen allowed_signers")
    options.add_store_option(ing)
    info = sub.add_parser("info", help="the store's URL (password masked), schema revision and row counts")
    options.add_store_option(info)
    upgrade = sub.add_parser("upgrade", help="migrate the store's schema to this version's")
    options.add_store_option(upgrade)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine, url = options.engine_for(args)
    if args.store_command == "ingest":
        refused = _bundles(engine, [p for p in args.results if p.is_file()], args.allowed_signers)
        folders = [p for p in args.results if not p.is_file()]
        counts = ingest.ingest_trees(engine, folders)
        if folders:
            print(
                f"{counts.cells} new cell(s), {counts.updated} updated, {counts.unchanged} already in the store as "
                f"they are; {counts.measurements} measurement(s) written into {db.shown(url)}"
                + (f"; {len(counts.skipped)} skipped (see the warnings)" if counts.skipped else "")
            )
        return 1 if refused else 0
    print(f"store: {db.shown(url)}")
    print(f"schema revision: {db.current_revision(engine)} (this version: {db.head()})")
    if args.store_command == "info":
        with engine.connect() as conn:
            for table in (schema.sweeps, schema.hosts, schema.cells, schema.measurements):
                n = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()
                print(f"{table.name}: {n}")
    return 0


def folder_or_bundle(text: str) -> Path:
    """A results folder, or a bundle file (`spark-agent share`)."""
    return Path(text) if Path(text).is_file() else flags.folder(text)


def _bundles(engine: sa.Engine, files: list[Path], allowed: Path | None) -> int:
    """Each bundle verified, then ingested; one line each. Returns how many were refused."""
    from agent.errors import UserError
    from agent.escape import plain
    from agent.store import bundles

    refused = 0
    for path in files:
        try:
            done = bundles.ingest_bundle(engine, path, allowed)
        except UserError as exc:
            print(exc.message)
            refused += 1
            continue
        said = "already in the store" if not done.new else f"{done.cells} cell(s) ingested"
        extra = f"; reproduced by {', '.join(done.reproduced_by)}" if done.reproduced_by else ""
        print(plain(f"{path}: {said}, tier {done.tier}, signed by {done.signer}{extra}"))
    return refused
