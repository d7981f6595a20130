"""The first schema: sweeps, hosts (with fingerprints), cells, measurements (one row per window).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("ingested_by", sa.String(255), nullable=False, server_default=""),
        sa.Column("first_started", sa.String(40), nullable=False, server_default=""),
        sa.Column("last_finished", sa.String(40), nullable=False, server_default=""),
    )
    op.create_table(
        "hosts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(255), nullable=False),
        sa.Column("gpu", sa.String(255), nullable=False, server_default=""),
        sa.Column("facts", sa.JSON, nullable=False),
        sa.UniqueConstraint("name", "fingerprint", name="uq_hosts_name_fingerprint"),
    )
    op.create_table(
        "cells",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("sweep_id", sa.Integer, sa.ForeignKey("sweeps.id"), nullable=False),
        sa.Column("host_id", sa.Integer, sa.ForeignKey("hosts.id"), nullable=False),
        sa.Column("cell_id", sa.String(12), nullable=False),
        sa.Column("checkpoint", sa.String(255), nullable=False),
        sa.Column("quant", sa.String(64), nullable=False),
        sa.Column("backend", sa.String(255), nullable=False),
        sa.Column("image", sa.String(512), nullable=False),
        sa.Column("image_digest", sa.String(80), nullable=False),
        sa.Column("vllm_version", sa.String(64), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("failure_class", sa.String(64), nullable=False),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("finished_at", sa.String(40), nullable=False),
        sa.Column("config_key", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("attestation", sa.JSON, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
        sa.Column("source", sa.String(1024), nullable=False),
        sa.UniqueConstraint("sweep_id", "host_id", "cell_id", name="uq_cells_sweep_host_cell"),
    )
    op.create_index("ix_cells_config", "cells", ["checkpoint", "backend"])
    op.create_index("ix_cells_config_key", "cells", ["config_key"])
    op.create_index("ix_cells_image", "cells", ["image"])
    op.create_index("ix_cells_vllm_version", "cells", ["vllm_version"])
    op.create_index("ix_cells_started_at", "cells", ["started_at"])
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("cell_pk", sa.Integer, sa.ForeignKey("cells.id", ondelete="CASCADE"), nullable=False),
        sa.Column("window", sa.String(64), nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("output_throughput", sa.Float, nullable=False),
        sa.Column("median_ttft_ms", sa.Float, nullable=False),
        sa.Column("median_tpot_ms", sa.Float, nullable=False),
        sa.Column("p99_ttft_ms", sa.Float, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.UniqueConstraint("cell_pk", "window", name="uq_measurements_cell_window"),
    )
    op.create_index("ix_measurements_cell_concurrency", "measurements", ["cell_pk", "concurrency"])
