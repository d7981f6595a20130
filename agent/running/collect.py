"""Collect: turn what a host sent back (one tar per cell) into the results tree, then attest it.

The tar holds server.log, launch.txt, serve.json (startup outcome) and cNNN-rK.json (one per window).
Measurements are written first, cell.toml last, each atomically: a crash never leaves a finished-looking cell.
"""

from __future__ import annotations

import json
import math
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.hostside import logparse
from agent.hostside.serving import DIED_FILE, launch_command
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
            results.atomic_write_bytes(dest / name, (src / name).read_bytes())
    died = _died(src / DIED_FILE)
    runs = _write_runs(dest, cell, src, died)
    attestation = logparse.parse(log_text)
    outcome = verdict.verdict(_requested(cell), attestation, env_set=sorted(cell.env))
    failure = serve.get("failure") or {}
    if not serve.get("ready") and not failure:
        failure = attestation.get("failure") or {"class": "other", "evidence": ["the server never became ready"]}
    record = _cell_record(cell, facts, attestation, outcome, failure, serve, len(runs), started, finished)
    if died:
        _record_death(record, _death(cell, died, attestation, runs))
    if (src / "launch.txt").exists():  # the host wrote what it really ran
        record["launch"]["command"] = (src / "launch.txt").read_text().strip()
    record["measure_s"] = round(measure_s, 2)  # the load driver's time on the host (windows, warmups, scrapes)
    results.atomic_write_toml(dest / results.CELL_FILE, record)
    return record


def _write_runs(dest: Path, cell: Cell, src: Path, died: dict) -> list[dict]:
    """The windows, as written; when the server died in this cell every window but the one it died in is marked
    before_crash (nothing is measured after a death)."""
    runs = []
    for path in sorted(src.glob("c[0-9][0-9][0-9]-r*.json")):
        run = json.loads(path.read_text())
        run.update(schema=results.SCHEMA, cell_id=cell.id)
        run["engine_died"] = run.get("engine_died") is True
        run["before_crash"] = bool(died) and not run["engine_died"]
        results.atomic_write_toml(dest / results.run_name(int(run["concurrency"]), int(run["repeat"])), run)
        runs.append(run)
    return runs


def _died(path: Path) -> dict:
    """died.json from the host ({} when the server did not die), reduced to checked types and bounded strings."""
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text(errors="replace")[:65536])
    except ValueError:
        raw = {}
    raw = raw if isinstance(raw, dict) else {}

    def when(key: str) -> float:
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return 0.0
        return max(float(value), 0.0)

    code = raw.get("exit_code")
    return {
        "at": when("at"),
        "detected_at": when("detected_at") or when("at"),
        "how": str(raw.get("how") or "the server died (the host's record is unreadable)")[:300],
        "window": str(raw.get("window") or "")[:80],
        "exit_code": code if isinstance(code, int) and not isinstance(code, bool) else None,
    }


def _death(cell: Cell, died: dict, attestation: dict, runs: list[dict]) -> dict:
    """The [died] table: when and how the server died, the root cause from its log, which windows survive."""
    runtime = attestation.get("runtime_failure") or {}
    collected = {(int(r["concurrency"]), int(r["repeat"])) for r in runs}
    planned = [(c, r) for c in cell.config["concurrency"] for r in range(1, int(cell.config["repeats"]) + 1)]
    return {
        "at": _iso(died["at"]) if died["at"] else "",
        "detected_at": _iso(died["detected_at"]) if died["detected_at"] else "",
        "detection_s": round(max(died["detected_at"] - died["at"], 0.0), 2) if died["at"] else -1.0,
        "window": died["window"],
        "how": died["how"],
        "exit_code": died["exit_code"],
        "cause": runtime.get("class") or "other",
        "root_cause": runtime.get("root_cause") or died["how"],
        "evidence": list(runtime.get("evidence", [])),
        "windows_kept": [_window(r["concurrency"], r["repeat"]) for r in runs if r["before_crash"]],
        "windows_skipped": [_window(c, r) for c, r in planned if (c, r) not in collected],
    }


def _window(concurrency: int, repeat: int) -> str:
    return Path(results.run_name(int(concurrency), int(repeat))).stem


def _record_death(record: dict, death: dict) -> None:
    """A server that died mid-cell fails the cell, whatever the windows before the crash measured."""
    where = death["window"]
    where = where if where.startswith(("after ", "at ")) else (f"during {where}" if where else "")
    said = f"engine died at {death['at'] or '?'}" + (f" {where}" if where else "") + f": {death['root_cause']}"
    record.update(
        status="failed",
        verdict="failed",
        verdict_reasons=[said],
        failure_class="engine_died",
        failure_evidence=death["evidence"] + [death["how"]],
        failure_root_cause=death["root_cause"],
        died=death,
    )


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
    return launch_command(cell.config["runtime"], cell.argv, cell.env, cell.config["image"])


def clear_incoming(root: Path, sweep: str) -> None:
    """Leftovers of a killed run are never half-counted: they are dropped and the cell is measured again."""
    shutil.rmtree(Path(root) / INCOMING / sweep, ignore_errors=True)
