"""The store's tables (SQLAlchemy Core), at the newest revision: migrations/versions builds them step by step.

Typed columns hold what queries filter and sort on; JSON columns hold the whole record (cell.toml, the window),
so a field added to the tree later flows through the store without a migration. Rows are rebuilt into exactly the
tables judging/correctness.judged_cells returns (select.py), so every reader works on a store selection unchanged.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

sweeps = sa.Table(
    "sweeps",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("ingested_by", sa.String(255), nullable=False, server_default=""),  # who ingested it first
    sa.Column("first_started", sa.String(40), nullable=False, server_default=""),
    sa.Column("last_finished", sa.String(40), nullable=False, server_default=""),
    # revision 0003: a run of a sweep is (results root, name, start), never its name alone
    sa.Column("results_root", sa.String(1024), nullable=False, server_default=""),  # absolute, as ingested
    sa.Column("started", sa.String(40), nullable=False, server_default=""),  # results/<sweep>/sweep.toml
    sa.UniqueConstraint("results_root", "name", "started", name="uq_sweeps_root_name_started"),
    sa.Index("ix_sweeps_name", "name"),
)

hosts = sa.Table(
    "hosts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),  # inventory_hostname
    sa.Column("fingerprint", sa.String(255), nullable=False),  # facts.fingerprint: hardware, driver, CUDA
    sa.Column("gpu", sa.String(255), nullable=False, server_default=""),
    sa.Column("facts", sa.JSON, nullable=False),
    sa.Column("host_group", sa.String(255), nullable=False, server_default=""),  # revision 0002
    sa.UniqueConstraint("name", "fingerprint", name="uq_hosts_name_fingerprint"),
)

cells = sa.Table(
    "cells",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("sweep_id", sa.Integer, sa.ForeignKey("sweeps.id"), nullable=False),
    sa.Column("host_id", sa.Integer, sa.ForeignKey("hosts.id"), nullable=False),
    sa.Column("cell_id", sa.String(12), nullable=False),  # the config+env hash: the same on every host and sweep
    sa.Column("checkpoint", sa.String(255), nullable=False),
    sa.Column("quant", sa.String(64), nullable=False),
    sa.Column("backend", sa.String(255), nullable=False),  # the label reports use (summary.CellSummary.backend)
    sa.Column("image", sa.String(512), nullable=False),
    sa.Column("image_digest", sa.String(80), nullable=False),  # sha256:... ("" when the ref has none)
    sa.Column("vllm_version", sa.String(64), nullable=False),  # from the server log (attestation)
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("verdict", sa.String(16), nullable=False),
    sa.Column("failure_class", sa.String(64), nullable=False),
    sa.Column("started_at", sa.String(40), nullable=False),
    sa.Column("finished_at", sa.String(40), nullable=False),
    sa.Column("config_key", sa.String(64), nullable=False),  # hash of the config without image and schedule
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("attestation", sa.JSON, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),  # the whole cell.toml table
    sa.Column("source", sa.String(1024), nullable=False),  # the cell folder it was ingested from
    sa.UniqueConstraint("sweep_id", "host_id", "cell_id", name="uq_cells_sweep_host_cell"),
    sa.Index("ix_cells_config", "checkpoint", "backend"),
    sa.Index("ix_cells_config_key", "config_key"),
    sa.Index("ix_cells_image", "image"),
    sa.Index("ix_cells_vllm_version", "vllm_version"),
    sa.Index("ix_cells_started_at", "started_at"),
)

measurements = sa.Table(
    "measurements",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("cell_pk", sa.Integer, sa.ForeignKey("cells.id", ondelete="CASCADE"), nullable=False),
    sa.Column("window", sa.String(64), nullable=False),  # c008-r1, q2-c008-d8192-r1: the load point and the repeat
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("repeat", sa.Integer, nullable=False),
    sa.Column("ok", sa.Boolean, nullable=False),
    sa.Column("started_at", sa.String(40), nullable=False),
    # `vllm bench serve` key names
    sa.Column("output_throughput", sa.Float, nullable=False),
    sa.Column("median_ttft_ms", sa.Float, nullable=False),
    sa.Column("median_tpot_ms", sa.Float, nullable=False),
    sa.Column("p99_ttft_ms", sa.Float, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),  # the whole window (cNNN-rK.toml)
    sa.UniqueConstraint("cell_pk", "window", name="uq_measurements_cell_window"),
    sa.Index("ix_measurements_cell_concurrency", "cell_pk", "concurrency"),
)

# the typed window columns, filled from the window's keys of the same name
WINDOW_COLUMNS = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "p99_ttft_ms")

# revision 0004: a signed bundle ingested (agent/store/bundles.py); its cells are the sweep run sweep_id
bundles = sa.Table(
    "bundles",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False),  # sha256 of the bundle file
    sa.Column("sweep_id", sa.Integer, sa.ForeignKey("sweeps.id"), nullable=False),
    sa.Column("signer", sa.String(255), nullable=False),  # the allowed-signers principal, else the key's fingerprint
    sa.Column("signer_key", sa.String(80), nullable=False),  # SHA256:... of the signing key
    sa.Column("trusted", sa.Boolean, nullable=False),  # an allowed-signers file named the key
    sa.Column("tier", sa.String(16), nullable=False),  # re-derived | reproduced (a bundle that fails is refused)
    sa.Column("reasons", sa.JSON, nullable=False),  # verify's notes, and each reproduction's
    sa.Column("reproduced_by", sa.JSON, nullable=False),  # the other signers whose bundles agree
    sa.Column("identity", sa.String(64), nullable=False),  # spec x image x hardware (bundles/verify.identity)
    sa.Column("manifest", sa.JSON, nullable=False),
    sa.Column("content", sa.LargeBinary, nullable=False),  # the bundle itself: nothing shared is lost
    sa.Column("ingested_by", sa.String(255), nullable=False, server_default=""),
    sa.Column("ingested_at", sa.String(40), nullable=False, server_default=""),
    sa.UniqueConstraint("digest", name="uq_bundles_digest"),
    sa.Index("ix_bundles_identity", "identity"),
)
