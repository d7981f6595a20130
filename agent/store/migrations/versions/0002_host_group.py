"""Hosts get a group: the fingerprint group a fleet's hosts fall into (filter `host_group=`), backfilled from the
facts already stored.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("host_group", sa.String(255), nullable=False, server_default=""))
    # Until a fleet names its groups, a host's group is its fingerprint: hosts that measure alike.
    op.execute("UPDATE hosts SET host_group = fingerprint")
