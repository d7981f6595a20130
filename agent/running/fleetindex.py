"""Where this user's detached sweeps are: sweep name -> the results folders that hold its record.

`status` and `collect` without --results find the sweep through it, and refuse to guess when one name is in two
folders. A cache only: the record itself (results/.fleet/<sweep>.json) is the truth, so a folder whose record is
gone is skipped, and an index that cannot be read or written costs nothing but the lookup.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import structlog

log = structlog.get_logger("spark_agent.fleetindex")

MAX_ENTRIES = 1000  # names; the oldest go first


def index_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "spark-agent" / "detached.json"


def _read() -> dict[str, list[str]]:
    try:
        data = json.loads(index_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: [v for v in vs if isinstance(v, str)] for k, vs in data.items() if isinstance(vs, list)}


def remember(results_root: Path, sweep: str) -> None:
    """Note that `sweep`'s record is under results_root (absolute)."""
    data = _read()
    folder = str(Path(results_root).resolve())
    folders = [f for f in data.pop(sweep, []) if f != folder] + [folder]
    data[sweep] = folders
    while len(data) > MAX_ENTRIES:
        data.pop(next(iter(data)))
    path = index_path()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    except OSError as exc:  # a read-only home: only the lookup without --results is lost
        tmp.unlink(missing_ok=True)
        log.debug("index_not_written", path=str(path), error=str(exc))


def folders(sweep: str, has_record) -> list[Path]:
    """The results folders the index knows for `sweep` whose record is still there (has_record(folder))."""
    return [Path(f) for f in _read().get(sweep, []) if has_record(Path(f))]


def names(has_record) -> dict[str, list[Path]]:
    """Every indexed sweep with the folders that still hold its record (has_record(folder, name))."""
    out: dict[str, list[Path]] = {}
    for name, fs in _read().items():
        kept = [Path(f) for f in fs if has_record(Path(f), name)]
        if kept:
            out[name] = kept
    return out
