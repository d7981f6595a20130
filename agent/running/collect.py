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
from typing import Any

from agent.hostside import logparse, redact
from agent.hostside.serving import launch_command
from agent.judging import verdict
from agent.planning.matrix import Cell
from agent.results import tree as results

INCOMING = ".incoming"


def incoming_tar(root: Path, sweep: str, host: str, cell_id: str) -> Path:
    return Path(root) / INCOMING / sweep / host / f"{cell_id}.tar"


def finalize_cell(
    root: Path, cell: Cell, facts: dict[str, Any], started: float, finished: float, measure_s: float = 0.0
) -> dict | None:
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
    root: Path, cell: Cell, facts: dict, src: Path, started: float, finished: float, measure_s: float
) -> dict:
    dest = results.cell_dir(root, cell.sweep, cell.host, cell.id)
    dest.mkdir(parents=True, exist_ok=True)
    log_text = (src / "server.log").read_text(errors="replace") if (src / "server.log").exists() else ""
    serve = json.loads((src / "serve.json").read_text()) if (src / "serve.json").exists() else {}
    for name in ("server.log", "launch.txt"):
        if (src / name).exists():
            results.atomic_write_bytes(dest / name, _redacted_bytes((src / name).read_bytes()))
    runs = _write_runs(dest, cell, src)
    attestation = logparse.parse(log_text)
    outcome = verdict.verdict(_requested(cell), attestation, env_set=sorted(cell.env))
    failure = serve.get("failure") or {}
    if not serve.get("ready") and not failure:
        failure = attestation.get("failure") or {"class": "other", "evidence": ["the server never became ready"]}
    record = _cell_record(cell, facts, attestation, outcome, failure, serve, runs, started, finished)
    if (src / "launch.txt").exists():  # the host wrote what it really ran
        record["launch"]["command"] = (src / "launch.txt").read_text().strip()
    record["measure_s"] = round(measure_s, 2)  # the load driver's time on the host (windows, warmups, scrapes)
    record = redact.redact(record)
    results.atomic_write_toml(dest / results.CELL_FILE, record)
    return record


def _redacted_bytes(data: bytes) -> bytes:
    """A host file as we keep it: secrets masked line by line (a host of an older version did not mask them)."""
    lines = data.decode(errors="replace").splitlines(keepends=True)
    return "".join(redact.redact_text(line) for line in lines).encode()


def _write_runs(dest: Path, cell: Cell, src: Path) -> int:
    count = 0
    for path in sorted(src.glob("c[0-9][0-9][0-9]-r*.json")):
        run = json.loads(path.read_text())
        run.update(schema=results.SCHEMA, cell_id=cell.id)
        results.atomic_write_toml(
            dest / results.run_name(int(run["concurrency"]), int(run["repeat"])), redact.redact(run)
        )
        count += 1
    return count


def _requested(cell: Cell) -> dict[str, str]:
    spec = json.loads(cell.config["speculative"]) if cell.config["speculative"] else {}
    return {
        "moe_backend": cell.config["moe_backend"],
        "linear_backend": cell.config["linear_backend"],
        "attention_backend": cell.config["attention_backend"],
        "draft_moe_backend": str(spec.get("moe_backend", "")),
    }


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _cell_record(
    cell: Cell,
    facts: dict,
    attestation: dict,
    outcome: dict,
    failure: dict,
    serve: dict,
    runs: int,
    started: float,
    finished: float,
) -> dict:
    failed = not serve.get("ready", False)
    return {
        "schema": results.SCHEMA,
        "cell_id": cell.id,
        "sweep": cell.sweep,
        "host": cell.host,
        "status": "failed" if failed else "done",
        "verdict": "failed" if failed else outcome["verdict"],
        "verdict_reasons": outcome["reasons"] if not failed else [f"startup failed: {failure.get('class', 'other')}"],
        "verdict_evidence": outcome.get("evidence", []),
        "verdict_notes": outcome.get("notes", []),
        "failure_class": failure.get("class", "") if failed else "",
        "failure_evidence": list(failure.get("evidence", [])) if failed else [],
        "failure_root_cause": failure.get("root_cause", "") if failed else "",
        "startup_s": float(serve.get("startup_s", 0.0)),
        "runs_collected": runs,
        "started_at": _iso(started),
        "finished_at": _iso(finished),
        "elapsed_s": round(finished - started, 2),
        "notes": cell.notes,
        "config": cell.config,
        "env": cell.env,
        "env_provenance": cell.provenance,
        "launch": {"argv": cell.argv, "command": _launch_line(cell)},
        "facts": facts,
        "checkpoint_info": cell.checkpoint_info,
        "attestation": attestation,
    }


def _launch_line(cell: Cell) -> str:
    return launch_command(
        cell.config["runtime"], redact.redact_argv(cell.argv), redact.redact_env(cell.env), cell.config["image"]
    )


def clear_incoming(root: Path, sweep: str) -> None:
    """Leftovers of a killed run are never half-counted: they are dropped and the cell is measured again."""
    shutil.rmtree(Path(root) / INCOMING / sweep, ignore_errors=True)
