"""Collect: turn what a host sent back (one tar per cell) into the results tree, then attest it.

The tar holds server.log, launch.txt, serve.json (startup outcome), one JSON per window (named by its load point,
hostside/loadpoints.py: c008-r1.json, q2-c008-d8192-r1.json), died.json
(only when the server died mid-cell) and probe.json (the correctness probe's outputs, hostside/probe.py).
Measurements are written first, cell.toml last, each atomically: a crash never leaves a finished-looking cell.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from agent.hostside import loadpoints, logparse, redact, startuplog, utc
from agent.hostside.contracts import Attestation, Facts, Failure, Measurement, RayNodeReport
from agent.hostside.logparse import cluster as clusterlog
from agent.hostside.probe import PROBE_FILE
from agent.hostside.serving import DIED_FILE, launch_command
from agent.judging import cluster as cluster_verdict
from agent.judging import correctness, verdict
from agent.planning import memory
from agent.planning.matrix import Cell, shape_vars
from agent.results import tree as results
from agent.results.records import CellRecord, Launch, MeasurementRecord
from agent.running import archive, hostdata, hostmemory

INCOMING = ".incoming"
STAGING_PREFIX = ".receiving-"  # inside the cell's own folder, removed before finalize_cell returns
BAD_HOST_DATA = "bad_host_data"


def incoming_tar(root: Path, sweep: str, host: str, cell_id: str) -> Path:
    """Where the collect playbook fetches a cell's tar to: every part checked like the results folder's."""
    folder = results.cell_dir(Path(root) / INCOMING, sweep, host, cell_id)
    return folder.parent / f"{cell_id}.tar"


def finalize_cell(
    root: Path, cell: Cell, facts: Facts, started: float, finished: float, measure_s: float = 0.0
) -> CellRecord | None:
    """Write the cell's results from its incoming tar. Returns the cell record, or None if nothing came back.

    Nothing from the archive is trusted (agent/running/archive.py, hostdata.py): a bad archive or a bad shape in it
    makes the cell failed with class bad_host_data, and nothing outside the cell's own folder is created."""
    tar_path = incoming_tar(root, cell.sweep, cell.host, cell.id)
    if not tar_path.is_file() or tar_path.is_symlink():
        return None
    dest = results.cell_dir(root, cell.sweep, cell.host, cell.id)
    dest.mkdir(parents=True, exist_ok=True)
    _clear_previous(dest, kept_levels(cell))
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=dest))
    try:
        try:
            archive.unpack(tar_path, staging)
            received = _read_received(staging, cell)
        except hostdata.BadHostData as exc:
            record = _bad_host_data_record(cell, facts, exc.reason, started, finished)
        else:
            record = _write_cell(dest, cell, facts, staging, received, started, finished, measure_s)
            notes, record.nodes = _node_logs(root, cell, dest, staging)
            record.notes += notes
        record = _redacted(record)
        record.run_started = results.run_start(dest.parent.parent)
        record.notes += hostmemory.learn_version(root, record)  # the next sweep's fingerprint; differing hosts said
        results.atomic_write_toml(dest / results.CELL_FILE, record.to_toml())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    tar_path.unlink()
    _index(root, dest)
    return record


def record_bad_host_data(
    root: Path, cell: Cell, facts: Facts, reason: str, started: float, finished: float
) -> CellRecord:
    """A cell whose host answered with a bad shape (serve or bench result): failed, bad_host_data, the reason."""
    dest = results.cell_dir(root, cell.sweep, cell.host, cell.id)
    dest.mkdir(parents=True, exist_ok=True)
    _clear_previous(dest)
    record = _redacted(_bad_host_data_record(cell, facts, reason, started, finished))
    record.run_started = results.run_start(dest.parent.parent)
    results.atomic_write_toml(dest / results.CELL_FILE, record.to_toml())
    _index(root, dest)
    return record


def _index(root: Path, dest: Path) -> None:
    """The cell is in the tree (the record): index it in the results store as it lands (agent/store)."""
    from agent.store import ingest  # the SQL layer loads only when a cell lands

    ingest.on_cell_landed(root, dest)


def clear_cell_incoming(root: Path, cell: Cell) -> None:
    incoming_tar(root, cell.sweep, cell.host, cell.id).unlink(missing_ok=True)


def kept_levels(cell: Cell) -> Callable[[Path], bool]:
    """Which earlier measurement files survive a re-run: none, unless tune adds levels to the cell (keep_runs);
    then those of the levels this run does not measure."""
    if not cell.keep_runs:
        return lambda path: False
    now = set(loadpoints.cell_points(cell.config.concurrency, shape_vars(cell.config.load)))

    def keep(path: Path) -> bool:
        parsed = loadpoints.parse_window(path.stem)
        return parsed is not None and parsed[0] not in now

    return keep


def _clear_previous(dest: Path, keep: Callable[[Path], bool] = lambda path: False) -> None:
    """A re-run (--fresh) replaces the cell whole: cell.toml goes first, so a crash here leaves it unfinished.
    `keep`: measurement files to leave in place (tune adding levels to a measured cell)."""
    runs = [p for p in results.window_files(dest) if not keep(p)]
    for path in [dest / results.CELL_FILE, *runs, dest / "server.log", dest / "launch.txt", *dest.glob("node-*.log")]:
        path.unlink(missing_ok=True)
    for leftover in dest.glob(STAGING_PREFIX + "*"):  # a controller killed while it was receiving
        shutil.rmtree(leftover, ignore_errors=True)


def _node_logs(root: Path, cell: Cell, dest: Path, staging: Path) -> tuple[list[str], list[RayNodeReport]]:
    """A multi-node cell: every node's Ray log as node-<host>.log (the head's came in its own archive; each worker's
    archive is checked like the head's, and only its ray-node.log is kept). Returns a note per log that did not
    come back, and each node's report from its log's header line (page cache, image)."""
    notes: list[str] = []
    reports: list[RayNodeReport] = []
    for host in cell.hosts if cell.cluster else []:
        src = staging / "ray-node.log"
        if host != cell.host:
            tar_path = incoming_tar(root, cell.sweep, host, cell.id)
            src = dest / f"{STAGING_PREFIX}node-{host}" / "ray-node.log"
            try:
                if not tar_path.is_file() or tar_path.is_symlink():
                    raise hostdata.BadHostData("nothing came back")
                src.parent.mkdir()
                archive.unpack(tar_path, src.parent)
            except (hostdata.BadHostData, OSError) as exc:
                notes.append(f"node {host}: its Ray log did not come back ({hostdata.one_line(str(exc), 200)})")
            finally:
                tar_path.unlink(missing_ok=True)
        if src.is_file():
            _mask_secrets(src)
            os.replace(src, dest / f"node-{host}.log")
            report = _node_report(host, dest / f"node-{host}.log")
            if report is None:
                notes.append(f"node {host}: its Ray log has no spark-agent header (page cache, image not recorded)")
            else:
                reports.append(report)
        if src.parent != staging:
            shutil.rmtree(src.parent, ignore_errors=True)
    return notes, reports


def _node_report(host: str, log: Path) -> RayNodeReport | None:
    """The header line the node wrote (host data: only its first 600 bytes are read, and matched strictly)."""
    with open(log, "rb") as handle:
        first = handle.read(600).decode("utf-8", errors="replace").split("\n", 1)[0]
    return clusterlog.node_report(host, first)


def _read_received(staging: Path, cell: Cell) -> dict[str, Any]:
    """serve.json, launch.txt and the measurement windows, validated; server.log stays a file (it can be large)."""
    serve_path, launch_path = staging / "serve.json", staging / "launch.txt"
    serve = hostdata.serve_status(_json(serve_path)) if serve_path.exists() else {}
    launch = _utf8(launch_path).strip() if launch_path.exists() else None
    runs: dict[str, dict[str, Any]] = {}
    for path in sorted(staging.iterdir()):
        if archive.RUN_FILE.fullmatch(path.name):
            run = hostdata.run_result(_json(path), path.name)
            record = MeasurementRecord(cell.id, cast(Measurement, run))  # run_result checked it
            if record.name != path.name.removesuffix(".json") + ".toml":  # a window filed under another point
                p = record.point
                at = f" at rate {p.rate:g} depth {p.depth}" if p.rate or p.depth else ""
                raise hostdata.BadHostData(f"{path.name} holds concurrency {p.concurrency} repeat {run['repeat']}{at}")
            runs[record.name] = record.to_toml()
    died_path = staging / DIED_FILE
    died = hostdata.died_record(_json(died_path), DIED_FILE) if died_path.exists() else {}
    probe_path = staging / PROBE_FILE
    probe = hostdata.probe_run(_json(probe_path), PROBE_FILE) if probe_path.exists() else None
    return {"serve": serve, "launch": launch, "runs": runs, "died": died, "probe": probe}


def _utf8(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise hostdata.BadHostData(f"{path.name} is not UTF-8") from None


def _json(path: Path) -> Any:
    try:
        return json.loads(_utf8(path), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise hostdata.BadHostData(f"{path.name} is not valid JSON ({exc})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")  # NaN and Infinity are not JSON


def _write_cell(
    dest: Path,
    cell: Cell,
    facts: Facts,
    src: Path,
    received: dict[str, Any],
    started: float,
    finished: float,
    measure_s: float,
) -> CellRecord:
    # kept byte for byte (a log cut mid-character by a kill is still the log); parsed as a stream with replacement
    # characters, so a large log costs no memory
    attestation = logparse.parse_file(str(src / "server.log")) if (src / "server.log").exists() else logparse.parse("")
    serve = received["serve"]
    for name in ("server.log", "launch.txt"):
        if (src / name).exists():
            _mask_secrets(src / name)
            os.replace(src / name, dest / name)  # same folder tree: the rename is atomic
    died = received["died"]
    for name, run in received["runs"].items():
        # every record says whether its window saw the server die, or came before a death later in the cell
        run["engine_died"] = bool(run.get("engine_died", False))
        run["before_crash"] = bool(died) and not run["engine_died"]
        run["pressure"] = memory.window_flags(run)  # saturated, preempted, KV above 90% (the server's /metrics)
        results.atomic_write_toml(dest / name, redact.redact(run))
    outcome = verdict.judge(_requested(cell), attestation, env_set=sorted(cell.env))
    reasons, evidence, notes = cluster_verdict.judge(cell.config.to_dict(), attestation["cluster"])
    if reasons and outcome["verdict"] != "failed":  # e.g. NCCL on sockets where the rules expect RDMA
        outcome = verdict.Verdict(
            verdict="invalid",
            reasons=outcome["reasons"] + reasons,
            evidence=outcome["evidence"] + evidence,
            notes=outcome["notes"] + notes,
        )
    else:
        outcome["notes"] += notes
    failure: Failure = serve.get("failure") or Failure()
    if not serve.get("ready") and not failure:
        failure = attestation.get("failure") or Failure(
            {"class": "other", "evidence": ["the server never became ready"]}
        )
    record = _cell_record(cell, facts, attestation, outcome, failure, serve, len(received["runs"]), started, finished)
    if died:
        _record_death(record, _death(cell, died, attestation, list(received["runs"].values())))
    if received["launch"] is not None:  # the host wrote what it really ran
        record.launch.command = received["launch"]
    record.measure_s = round(measure_s, 2)  # the load driver's time on the host (windows, warmups, scrapes)
    if cell.correctness.enabled:  # outputs scored here, against the shipped prompt set (hostside/probe.py)
        record.correctness = correctness.table(received["probe"], cell.correctness)
    if (dest / "server.log").exists():
        record.startup = startuplog.parse_file(str(dest / "server.log"))
    return record


def _mask_secrets(path: Path) -> None:
    """Secrets masked line by line, every other byte kept: an engine may echo a token into its log, and a host of an
    older version wrote launch.txt unmasked."""
    masked = path.with_name(path.name + ".masked")
    with open(path, "rb") as source, open(masked, "wb") as out:
        for line in source:
            text = line.decode("utf-8", errors="surrogateescape")
            out.write(redact.redact_text(text).encode("utf-8", errors="surrogateescape"))
    os.replace(masked, path)


def _death(cell: Cell, died: dict[str, Any], attestation: Attestation, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The [died] table: when and how the server died, the root cause from its log, which windows survive."""
    runtime: dict[str, Any] = dict(attestation.get("runtime_failure") or {})
    collected = {(loadpoints.of_window(r), int(r["repeat"])) for r in runs}
    points = loadpoints.cell_points(cell.config.concurrency, shape_vars(cell.config.load))
    planned = [(p, r) for p in points for r in range(1, cell.config.repeats + 1)]
    return {
        "at": utc.iso(died["at"]) if died["at"] else "",
        "detected_at": utc.iso(died["detected_at"]) if died["detected_at"] else "",
        "detection_s": round(max(died["detected_at"] - died["at"], 0.0), 2) if died["at"] else -1.0,
        "window": died["window"],
        "how": died["how"],
        "exit_code": died["exit_code"],
        "cause": runtime.get("class") or "other",
        "root_cause": runtime.get("root_cause") or died["how"],
        "evidence": list(runtime.get("evidence", [])),
        "windows_kept": [loadpoints.of_window(r).window(int(r["repeat"])) for r in runs if r["before_crash"]],
        "windows_skipped": [p.window(r) for p, r in planned if (p, r) not in collected],
    }


def _record_death(record: CellRecord, death: dict[str, Any]) -> None:
    """A server that died mid-cell fails the cell, whatever the windows before the crash measured."""
    where = death["window"]
    where = where if where.startswith(("after ", "at ")) else (f"during {where}" if where else "")
    said = f"engine died at {death['at'] or '?'}" + (f" {where}" if where else "") + f": {death['root_cause']}"
    record.status, record.verdict, record.verdict_reasons = "failed", "failed", [said]
    record.failure_class, record.failure_root_cause = "engine_died", death["root_cause"]
    record.failure_evidence = death["evidence"] + [death["how"]]
    record.died = death


def _redacted(record: CellRecord) -> CellRecord:
    """The record as written: secrets masked (what the caller shows matches the file)."""
    return CellRecord.from_toml(redact.redact(record.to_toml()))


def _bad_host_data_record(cell: Cell, facts: Facts, reason: str, started: float, finished: float) -> CellRecord:
    """The host sent back something we refuse: the cell is failed, with the reason; none of it is kept."""
    failure = Failure({"class": BAD_HOST_DATA, "evidence": [reason], "root_cause": reason})
    nothing = verdict.Verdict(verdict="failed", reasons=[], evidence=[], notes=[])
    record = _cell_record(cell, facts, {}, nothing, failure, {"ready": False}, 0, started, finished)
    record.verdict_reasons = [f"bad host data: {reason}"]
    return record


def _requested(cell: Cell) -> dict[str, str]:
    c = cell.config
    spec = json.loads(c.server.speculative) if c.server.speculative else {}
    return {
        "moe_backend": c.moe_backend,
        "linear_backend": c.linear_backend,
        "attention_backend": c.attention_backend,
        "draft_moe_backend": str(spec.get("moe_backend", "")),
    }


def _cell_record(
    cell: Cell,
    facts: Facts,
    attestation: Attestation | dict[str, Any],
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
        started_at=utc.iso(started),
        finished_at=utc.iso(finished),
        elapsed_s=round(finished - started, 2),
        notes=cell.notes,
        config=cell.config,
        env=cell.env,
        env_provenance=cell.provenance,
        launch=Launch(argv=cell.argv, command=_launch_line(cell)),
        facts=facts,
        checkpoint_info=cell.checkpoint_info,
        attestation=attestation,
        memory=memory.record(cell.memory_plan, attestation) if cell.memory_plan else {},
    )


def _launch_line(cell: Cell) -> str:
    return launch_command(
        cell.config.runtime, redact.redact_argv(cell.argv), redact.redact_env(cell.env), cell.config.image
    )


def clear_incoming(root: Path, sweep: str) -> None:
    """Leftovers of a killed run are never half-counted: they are dropped and the cell is measured again."""
    shutil.rmtree(Path(root) / INCOMING / results.path_part(sweep, "sweep"), ignore_errors=True)


def disk_full(text: str) -> bool:
    """Whether an error (ours, or Ansible's fetch) says the controller's disk is full."""
    return any(s in text for s in ("No space left on device", "Disk quota exceeded", "Errno 28]", "Errno 122]"))
