"""The command-line side of the store, shared by the commands that read it (store, history, compare, report,
export, site): the --store option, and a positional argument that is a results folder or a store selection."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agent.commands import flags
from agent.errors import UserError
from agent.judging import correctness
from agent.store import db, select


def add_store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help=f"the results store (default: ${db.ENV_URL}, the config file's [store] url, else "
        f"results/{db.DEFAULT_NAME}); e.g. postgresql+psycopg://USER@HOST/DB",
    )
    p.add_argument(
        "--results-root",
        type=Path,
        default=Path("results"),
        help="the results folder whose SQLite store is the default (default: %(default)s)",
    )


def folder_or_selection(text: str) -> Path | select.Selection:
    """A results folder, or (when it is not one and reads key=value) a store selection."""
    if Path(text).is_dir() or not select.looks_like_selection(text):
        return flags.folder(text)
    return select.parse([text])


def engine_for(args: argparse.Namespace) -> tuple[Any, str]:
    url = db.resolve_url(args.store, args.results_root)
    if url == db.OFF:
        raise UserError(f"${db.ENV_URL}=off: no store to read; unset it or pass --store URL")
    return db.open_store(url), url


def cells_of(
    source: Path | select.Selection, args: argparse.Namespace, *, empty_ok: bool = False
) -> list[dict[str, Any]]:
    """The cell tables of a results folder or of a store selection; UserError when there are none (a folder of
    none is fine with empty_ok: an export of nothing is its header)."""
    if isinstance(source, Path):
        found = correctness.judged_cells(source)
        if not found and not empty_ok:
            raise UserError(f"{source}: no finished cell (no cell.toml below it); run a sweep first")
        return found
    engine, url = engine_for(args)
    return select.require(select.load(engine, source), source, url)
