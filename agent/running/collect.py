"""Collect: turn what a host sent back (one tar per cell) into the results tree, then attest it.

The tar holds server.log, launch.txt, serve.json (startup outcome) and cNNN-rK.json (one per window).
Measurements are written first, cell.toml last, each atomically: a crash never leaves a finished-looking cell.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from agent.hostside import logparse
from agent.hostside.contracts import Attestation, Facts, Failure, Measurement
from agent.hostside.serving import launch_command
from agent.judging import verdict
from agent.planning.matrix import Cell
from agent.results import tree as results
from agent.results.records import CellRecord, Launch, MeasurementRecord

INCOMING = ".incoming"


def incoming_tar(root: Path, sweep: str, host: str, cell_id: str) -> Path:
    return Path(root) / INCOMING / sweep / host / f"{cell_id}.tar"


def finalize_cell(
    root: Path, cell: Cell, facts: Facts, started: float, finished: float, measure_s: float = 0.0
) -> CellRecord | None:
    """Write the cell's results from its incoming tar. Returns the cell record, or None if nothing came back."""
    tar_path = incoming_tar(root, cell.sweep, cell.host, cell.id)
    if not tar_path.exists():
        return None
    with tempfile.TemporaryDirectory(prefix="spark-agent-collect-") as tmp:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        record = _write_cell(root, cell, facts, Path(tmp), started, finished, measure_s)
    tar_path.unlink()
    return record


def _write_cell(
    root: Path, cell: Cell, facts: Facts, src: Path, started: float, finished: float, measure_s: float
) -> CellRecord:
    dest = results.cell_dir(root, cell.sweep, cell.host, cell.id)
    dest.mkdir(parents=True, exist_ok=True)
    log_text = (src / "server.log").read_text(errors="replace") if (src / "server.log").exists() else ""
    serve: dict[str, Any] = json.loads((src / "serve.json").read_text()) if (src / "serve.json").exists() else {}
    for name in ("server.log", "launch.txt"):
        if (src / name).exists():
            results.atomic_write_bytes(dest / name, (src / name).read_bytes())
    runs = _write_runs(dest, cell, src)
    attestation = logparse.parse(log_text)
    outcome = verdict.verdict(_requested(cell), attestation, env_set=sorted(cell.env))
    failure: Failure = serve.get("failure") or Failure()
    if not serve.get("ready") and not failure:
        failure = attestation.get("failure") or Failure(
            {"class": "other", "evidence": ["the server never became ready"]}
        )
    record = _cell_record(cell, facts, attestation, outcome, failure, serve, runs, started, finished)
    if (src / "launch.txt").exists():  # the host wrote what it really ran
        record.launch.command = (src / "launch.txt").read_text().strip()
    record.measure_s = round(measure_s, 2)  # the load driver's time on the host (windows, warmups, scrapes)
    results.atomic_write_toml(dest / results.CELL_FILE, record.to_toml())
    return record


def _write_runs(dest: Path, cell: Cell, src: Path) -> int:
    count = 0
    for path in sorted(src.glob("c[0-9][0-9][0-9]-r*.json")):
        window = cast(Measurement, json.loads(path.read_text()))
        name = results.run_name(int(window["concurrency"]), int(window["repeat"]))
        results.atomic_write_toml(dest / name, MeasurementRecord(cell.id, window).to_toml())
        count += 1
    return count


def _requested(cell: Cell) -> dict[str, str]:
    c = cell.config
    spec = json.loads(c.server.speculative) if c.server.speculative else {}
    return {
        "moe_backend": c.moe_backend,
        "linear_backend": c.linear_backend,
        "attention_backend": c.attention_backend,
        "draft_moe_backend": str(spec.get("moe_backend", "")),
    }


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _cell_record(
    cell: Cell,
    facts: Facts,
    attestation: Attestation,
    outcome: verdict.Verdict,
    failure: Failure,
    serve: dict[str, Any],
    runs: int,
    started: float,
    finished: float,
) -> CellRecord:
    failed = not serve.get("ready", False)
    return CellRecord(
        cell_id=cell.id,
        sweep=cell.sweep,
        host=cell.host,
        status="failed" if failed else "done",
        verdict="failed" if failed else outcome["verdict"],
        verdict_reasons=outcome["reasons"] if not failed else [f"startup failed: {failure.get('class', 'other')}"],
        verdict_evidence=outcome["evidence"],
        verdict_notes=outcome["notes"],
        failure_class=failure.get("class", "") if failed else "",
        failure_evidence=list(failure.get("evidence", [])) if failed else [],
        failure_root_cause=failure.get("root_cause", "") if failed else "",
        startup_s=float(serve.get("startup_s", 0.0)),
        runs_collected=runs,
        started_at=_iso(started),
        finished_at=_iso(finished),
        elapsed_s=round(finished - started, 2),
        notes=cell.notes,
        config=cell.config,
        env=cell.env,
        env_provenance=cell.provenance,
        launch=Launch(argv=cell.argv, command=_launch_line(cell)),
        facts=facts,
        checkpoint_info=cell.checkpoint_info,
        attestation=attestation,
    )


def _launch_line(cell: Cell) -> str:
    return launch_command(cell.config.runtime, cell.argv, cell.env, cell.config.image)


def clear_incoming(root: Path, sweep: str) -> None:
    """Leftovers of a killed run are never half-counted: they are dropped and the cell is measured again."""
    shutil.rmtree(Path(root) / INCOMING / sweep, ignore_errors=True)
