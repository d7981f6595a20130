"""`store ingest BUNDLE`: a signed bundle (agent/bundles) into the store, only after `verify` passes.

A bundle that fails any check is refused with the check, its file and why, and nothing is written. One that passes
is one transaction: its cells as a sweep run of their own (results root "bundle:<digest>"), each host named after
its owner (spark-1@alice: two owners' hosts of one fingerprint are two hosts of one group), its source the path in
the bundle, and a bundles row with the signer, the tier, the reasons and the bundle's bytes. Then every re-derived
bundle of the same spec, image and hardware by another signer is compared with it (bundles/agree.py); where they
agree, both become "reproduced".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agent.bundles import agree, verify
from agent.errors import UserError
from agent.escape import plain
from agent.hostside import utc
from agent.results import tree
from agent.store import ingest, select
from agent.store.schema import bundles, cells, sweeps

ROOT_PREFIX = "bundle:"


@dataclass
class Outcome:
    digest: str
    tier: str
    signer: str
    cells: int
    new: bool  # False: the store held this bundle already
    reproduced_by: list[str]


def results_root(digest: str) -> str:
    return ROOT_PREFIX + digest[:16]


def owner(v: verify.Verification) -> str:
    if v.signer is None:
        return "unsigned"
    return v.signer.principal if v.signer.trusted else v.signer.fingerprint[:15]


def ingest_bundle(engine: sa.Engine, path: Path, allowed_signers: Path | None = None) -> Outcome:
    """UserError (one line: the first failed check, its file and why) for a bundle verify does not pass."""
    with verify.opened(path, allowed_signers) as v:
        if not v.ok:
            more = f" (and {len(v.findings) - 1} more: run `spark-agent verify {path}`)" if len(v.findings) > 1 else ""
            raise UserError(plain(f"{path}: refused, tier {v.tier}: {v.findings[0].line()}{more}"))
        with engine.begin() as conn:
            if conn.execute(sa.select(bundles.c.id).where(bundles.c.digest == v.digest)).first():
                return Outcome(v.digest, _tier(conn, v.digest), v.signer_name, 0, False, [])
            sweep_pk = _cells(conn, v)
            conn.execute(sa.insert(bundles).values(_row(v, sweep_pk, path)))
    reproduced = reproduce(engine, v.digest)
    with engine.connect() as conn:
        tier = _tier(conn, v.digest)
    return Outcome(v.digest, tier, v.signer_name, len(v.cells), True, reproduced)


def _cells(conn: sa.Connection, v: verify.Verification) -> int:
    assert v.manifest is not None
    root = results_root(v.digest)
    run = ingest.Run(root, v.sweep_started)
    folder = Path(v.cells[0]["dir"]).parents[1] if v.cells else Path()  # <tmp>/tree/<sweep>/<host>/<cell>
    for cell in tree.load_cells(folder) if v.cells else []:  # as a tree is ingested: read, not judged
        rel = Path(cell["dir"]).relative_to(folder.parent)
        cell = {**cell, "host": f"{cell.get('host', '')}@{owner(v)}"[:255]}
        ingest._ingest(conn, cell, run)
        conn.execute(
            sa.update(cells)
            .where(cells.c.source == str(Path(cell["dir"]).resolve()))
            .values(source=f"{root}/{rel}"[:1024])
        )
    key = (sweeps.c.name == v.manifest["sweep"]) & (sweeps.c.results_root == root)
    return int(conn.execute(sa.select(sweeps.c.id).where(key)).scalar_one())


def _row(v: verify.Verification, sweep_pk: int, path: Path) -> dict[str, Any]:
    assert v.signer is not None and v.manifest is not None
    return {
        "digest": v.digest,
        "sweep_id": sweep_pk,
        "signer": v.signer_name[:255],
        "signer_key": v.signer.fingerprint,
        "trusted": v.signer.trusted,
        "tier": v.tier,
        "reasons": list(v.notes),
        "reproduced_by": [],
        "identity": v.identity,
        "manifest": dict(v.manifest),
        "content": path.read_bytes(),
        "ingested_by": ingest._who(),
        "ingested_at": utc.iso(),
    }


def _tier(conn: sa.Connection, digest: str) -> str:
    return str(conn.execute(sa.select(bundles.c.tier).where(bundles.c.digest == digest)).scalar_one())


def reproduce(engine: sa.Engine, digest: str) -> list[str]:
    """Compare the bundle with every other signer's of the same identity; where they agree, both are reproduced.
    Returns the signers that reproduced it."""
    with engine.connect() as conn:
        me = conn.execute(sa.select(bundles).where(bundles.c.digest == digest)).mappings().one()
        others = conn.execute(
            sa.select(bundles.c.digest, bundles.c.signer, bundles.c.signer_key).where(
                (bundles.c.identity == me["identity"]) & (bundles.c.signer_key != me["signer_key"])
            )
        ).all()
    mine = _bundle_cells(engine, digest)
    found = []
    for other in others:
        said = agree.disagreement(_bundle_cells(engine, other.digest), mine)
        with engine.begin() as conn:
            if said:
                _add(conn, digest, "reasons", f"not reproduced by {other.signer}: {'; '.join(said[:2])}")
                continue
            _add(conn, digest, "reproduced_by", other.signer)
            _add(conn, other.digest, "reproduced_by", me["signer"])
            conn.execute(
                sa.update(bundles).where(bundles.c.digest.in_([digest, other.digest])).values(tier=verify.REPRODUCED)
            )
        found.append(str(other.signer))
    return found


def _bundle_cells(engine: sa.Engine, digest: str) -> list[dict[str, Any]]:
    return select.load(engine, select.parse([f"results_root={results_root(digest)}"]))


def _add(conn: sa.Connection, digest: str, column: str, value: str) -> None:
    current = conn.execute(sa.select(bundles.c[column]).where(bundles.c.digest == digest)).scalar_one()
    values = [str(x) for x in (current or []) if isinstance(x, str)]
    if value not in values:
        conn.execute(sa.update(bundles).where(bundles.c.digest == digest).values({column: [*values, value]}))


def tiers(engine: sa.Engine) -> dict[int, tuple[str, str]]:
    """sweep id -> (tier, signer) of every bundle's sweep run: what history, compare and site show beside a number
    (a sweep ingested from a tree has none)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(bundles.c.sweep_id, bundles.c.tier, bundles.c.signer)).all()
    return {int(r.sweep_id): (str(r.tier), str(r.signer)) for r in rows}


def tiers_by_run(engine: sa.Engine) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(results root, sweep name, run start) -> (tier, signer) of every bundle's sweep run: what `history` shows
    beside a row (a run ingested from a tree has none: it is the team's own)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(sweeps.c.results_root, sweeps.c.name, sweeps.c.started, bundles.c.tier, bundles.c.signer).join(
                bundles, bundles.c.sweep_id == sweeps.c.id
            )
        ).all()
    return {(str(r.results_root), str(r.name), str(r.started)): (str(r.tier), str(r.signer)) for r in rows}
