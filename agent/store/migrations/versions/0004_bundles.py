"""Bundles: each signed bundle ingested (`store ingest BUNDLE`), with its signer, tier and reasons, and the bundle's
own bytes, so the index can be rebuilt from the store alone and nothing shared is lost. Its cells are a sweep run
of their own (results_root "bundle:<digest>").

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "bundles",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("sweep_id", sa.Integer, sa.ForeignKey("sweeps.id"), nullable=False),
        sa.Column("signer", sa.String(255), nullable=False),
        sa.Column("signer_key", sa.String(80), nullable=False),
        sa.Column("trusted", sa.Boolean, nullable=False),
        sa.Column("tier", sa.String(16), nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("reproduced_by", sa.JSON, nullable=False),
        sa.Column("identity", sa.String(64), nullable=False),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
        sa.Column("ingested_by", sa.String(255), nullable=False, server_default=""),
        sa.Column("ingested_at", sa.String(40), nullable=False, server_default=""),
        sa.UniqueConstraint("digest", name="uq_bundles_digest"),
        sa.Index("ix_bundles_identity", "identity"),
    )
