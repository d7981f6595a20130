"""A sweep in the store is one run: (results root, name, start), no longer its name alone (issue 36: two folders with
a sweep of one name overwrote each other's cells). Existing rows are split by the results root their cells were
ingested from (cells.source), each part starting at its earliest cell; what an earlier ingest overwrote is not here
to recover (`spark-agent store ingest` of the trees brings it back).

Revision ID: 0003
Revises: 0002
"""

from pathlib import PurePath

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}  # SQLite's unnamed UNIQUE(name), named for batch mode


def upgrade() -> None:
    bind = op.get_bind()
    old = next(
        u["name"] or "uq_sweeps_name"
        for u in sa.inspect(bind).get_unique_constraints("sweeps")
        if u["column_names"] == ["name"]
    )
    with op.batch_alter_table("sweeps", naming_convention=NAMING) as batch:
        batch.drop_constraint(old, type_="unique")
        batch.add_column(sa.Column("results_root", sa.String(1024), nullable=False, server_default=""))
        batch.add_column(sa.Column("started", sa.String(40), nullable=False, server_default=""))
        batch.create_unique_constraint("uq_sweeps_root_name_started", ["results_root", "name", "started"])
        batch.create_index("ix_sweeps_name", ["name"])
    _split_by_root(bind)


def _split_by_root(bind: sa.Connection) -> None:
    meta = sa.MetaData()
    sweeps = sa.Table("sweeps", meta, autoload_with=bind)
    cells = sa.Table("cells", meta, autoload_with=bind)
    for sweep in bind.execute(sa.select(sweeps)).mappings().all():
        parts: dict[str, list[tuple[int, str, str]]] = {}
        for pk, source, started, finished in bind.execute(
            sa.select(cells.c.id, cells.c.source, cells.c.started_at, cells.c.finished_at)
            .where(cells.c.sweep_id == sweep["id"])
            .order_by(cells.c.started_at, cells.c.id)
        ):
            root = str(PurePath(source).parent.parent.parent) if source else ""
            parts.setdefault(root, []).append((pk, started or "", finished or ""))
        for i, (root, members) in enumerate(sorted(parts.items(), key=lambda kv: kv[1][0][1])):
            start = min((s for _, s, _ in members if s), default=sweep["first_started"])
            values = {
                "results_root": root,
                "started": start,
                "first_started": start,
                "last_finished": max((f for _, _, f in members), default=sweep["last_finished"]),
            }
            if i == 0:  # the earliest part keeps the row (and its id)
                bind.execute(sa.update(sweeps).where(sweeps.c.id == sweep["id"]).values(values))
                continue
            values |= {"name": sweep["name"], "ingested_by": sweep["ingested_by"]}
            new = bind.execute(sa.insert(sweeps).values(values).returning(sweeps.c.id)).scalar_one()
            ids = [pk for pk, _, _ in members]
            bind.execute(sa.update(cells).where(cells.c.id.in_(ids)).values(sweep_id=new))
