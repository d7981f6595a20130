"""The results store's two speed claims, on SQLite (a temp file) and PostgreSQL (a temp cluster of Debian's
package, started like the test fixture):

1. ingest: 100,000 measurements (2,000 cells × 5 concurrencies × 10 repeats, full window tables as a sweep writes
   them) through agent.store.ingest.ingest_cell, one transaction per cell, as `store ingest` and sweeps do;
2. history: one `spark-agent history` query (checkpoint + backend + concurrency) over a store of 1,000,000
   measurement rows (20,000 cells × 50 windows; the windows' JSON kept small so the store fits a laptop: history
   reads typed, indexed columns only). Target: under 1 s (indexes, not scans).

    python bench/bench_store.py [--only sqlite|postgresql] [--ingest 100000] [--rows 1000000]

State the machine's load average with the figures: they are wall times.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.store import db, history, ingest, select  # noqa: E402
from agent.store.schema import cells, hosts, measurements, sweeps  # noqa: E402
from tests.fixtures_postgres import running_postgres  # noqa: E402
from tests.test_report_fixtures import GB10_FACTS, measurement  # noqa: E402

BACKENDS = ["marlin", "flashinfer_b12x", "triton", "cutlass", "deep_gemm", "flashinfer_cutlass"]
CHECKPOINTS = [f"ckpt-{i}" for i in range(20)]


def cell(i: int, windows: list[tuple[int, int]], sweep: str) -> dict[str, Any]:
    cell_id = f"{i:012x}"
    config = {
        "image": f"nvcr.io/nvidia/vllm:{25 + i % 3}.01@sha256:{'ab' * 32}",
        "checkpoint": CHECKPOINTS[i % len(CHECKPOINTS)],
        "quant": "nvfp4",
        "moe_backend": BACKENDS[i % len(BACKENDS)],
        "concurrency": sorted({c for c, _ in windows}),
    }
    return {
        "schema": 1, "cell_id": cell_id, "sweep": sweep, "host": f"spark-{i % 8}", "status": "done",
        "verdict": "valid", "started_at": f"2026-11-{1 + i % 28:02d}T10:00:00Z", "finished_at": "2026-11-29T00:00:00Z",
        "config": config, "facts": {**GB10_FACTS, "fingerprint": f"fp{i % 8}"},
        "attestation": {"vllm_version": "0.24.0"}, "env": {}, "dir": f"/results/{sweep}/{cell_id}",
        "runs": [measurement(cell_id, c, r, 50.0 * c + random.random()) for c, r in windows],
    }  # fmt: skip


def bench_ingest(url: str, n: int) -> float:
    engine = db.open_store(url)
    windows = [(c, r) for c in (1, 2, 4, 8, 16) for r in range(1, 11)]
    todo = [cell(i, windows, f"ingest-{i // 200}") for i in range(n // len(windows))]
    start = time.perf_counter()
    for c in todo:
        ingest.ingest_cell(engine, c)
    return time.perf_counter() - start


def fill(url: str, rows: int) -> None:
    """1M rows the fast way (bulk inserts of typed rows): the figure is the query, not the filling."""
    engine = db.open_store(url)
    per_cell = 50
    with engine.begin() as conn:
        conn.execute(sa.insert(sweeps), [{"name": f"big-{s}"} for s in range(100)])
        conn.execute(sa.insert(hosts), [{"name": f"spark-{h}", "fingerprint": f"fp{h}", "facts": {}} for h in range(8)])
        sweep_ids = list(conn.execute(sa.select(sweeps.c.id)).scalars())
        host_ids = list(conn.execute(sa.select(hosts.c.id)).scalars())
    n_cells = rows // per_cell
    for start in range(0, n_cells, 2000):
        batch = []
        for i in range(start, min(n_cells, start + 2000)):
            batch.append({
                "sweep_id": sweep_ids[i % len(sweep_ids)], "host_id": host_ids[(i // len(sweep_ids)) % len(host_ids)],
                "cell_id": f"{i:012x}", "checkpoint": CHECKPOINTS[i % len(CHECKPOINTS)], "quant": "nvfp4",
                "backend": BACKENDS[(i // len(CHECKPOINTS)) % len(BACKENDS)], "image": f"img:{i % 5}",
                "image_digest": "", "vllm_version": "0.24.0", "status": "done", "verdict": "valid",
                "failure_class": "", "started_at": f"2026-{1 + i % 12:02d}-01T00:00:00Z", "finished_at": "",
                "config_key": f"{i % 120:016x}", "config": {}, "attestation": {}, "record": {}, "source": "",
            })  # fmt: skip
        with engine.begin() as conn:
            ids = [r.id for r in conn.execute(sa.insert(cells).returning(cells.c.id), batch)]
            windows = [
                {"cell_pk": pk, "window": f"c{c:03d}-r{r}", "concurrency": c, "repeat": r, "ok": True,
                 "started_at": "", "output_throughput": 50.0 * c + random.random(), "median_ttft_ms": 1.0,
                 "median_tpot_ms": 1.0, "p99_ttft_ms": 1.0, "data": {"concurrency": c}}
                for pk in ids for c in (1, 2, 4, 8, 16) for r in range(1, 11)
            ]  # fmt: skip
            conn.execute(sa.insert(measurements), windows)


def bench_history(url: str) -> tuple[float, int]:
    engine = db.open_store(url)
    sel = select.parse(["checkpoint=ckpt-3", "backend=triton", "concurrency=8"])
    history.query(engine, sel)  # warm: the first query pays for the cache
    start = time.perf_counter()
    rows = history.query(engine, sel)
    return time.perf_counter() - start, len(rows)


def run(kind: str, url_for: Any, args: argparse.Namespace) -> None:
    t = bench_ingest(url_for("ingest"), args.ingest)
    print(f"{kind}: ingest {args.ingest:,} measurements: {t:.1f} s ({args.ingest / t:,.0f}/s)", flush=True)
    url = url_for("history")
    t0 = time.perf_counter()
    fill(url, args.rows)
    print(f"{kind}: filled {args.rows:,} measurement rows in {time.perf_counter() - t0:.0f} s (not the figure)")
    t, n = bench_history(url)
    print(f"{kind}: history query over {args.rows:,} rows: {t * 1000:.0f} ms ({n} history rows)", flush=True)
    db.close_all()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["sqlite", "postgresql"])
    p.add_argument("--ingest", type=int, default=100_000)
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args()
    random.seed(1)
    print(f"load average: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "sqlite"):
            run("sqlite", lambda name: f"sqlite:///{tmp}/{name}.sqlite", args)
        if args.only in (None, "postgresql"):
            with running_postgres() as pg:
                run("postgresql", pg.create_database, args)
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
