"""The results tree: atomic writes, resume, reading back.

Layout (docs/results-tree.md): results/<sweep>/<host>/<cell_id>/{cell.toml, server.log, launch.txt, cNNN-rK.toml}.
cell.toml is written last; its presence means the cell is finished. A cell that was started but whose results never
arrived gets lost.toml instead (why, and when): resume only looks for cell.toml, so a lost cell is measured again.
"""

from __future__ import annotations

import math
import re
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tomli_w

from agent.escape import plain
from agent.hostside import atomic, loadpoints, redact
from agent.results import longrows

CELL_FILE = "cell.toml"
LOST_FILE = "lost.toml"
SCHEMA = 1
MAX_TOML_BYTES = 16 * 1024 * 1024  # a cell.toml holds a few KB; a bigger file is not ours

# The types of what readers use, from the contract in docs/results-tree.md. A key that is present must have its type
# (numbers finite); the keys in _REQUIRED must be present. Anything else is left as it is.
_NUMBER = (int, float)
_CONFIG = {
    **dict.fromkeys(
        ("image", "runtime", "checkpoint", "model", "quant", "moe_backend", "linear_backend", "attention_backend"),
        str,
    ),
    **dict.fromkeys(("speculative", "profile"), str),
    **dict.fromkeys(("max_model_len", "max_num_seqs", "prompt_len", "output_len", "warmup", "repeats"), int),
    **dict.fromkeys(("gpu_memory_utilization", "duration_s"), _NUMBER),
    "concurrency": (list, int),
    "extra_args": list,
}
_CELL: dict[str, Any] = {
    **dict.fromkeys(("cell_id", "sweep", "host", "status", "verdict", "failure_class", "started_at"), str),
    "finished_at": str,
    "run_started": str,
    "elapsed_s": _NUMBER,
    "verdict_reasons": (list, str),
    "failure_evidence": (list, str),
    "config": _CONFIG,
    "env": dict,
    "env_provenance": (list, dict),
    "launch": dict,
    "facts": dict.fromkeys(("fingerprint", "gpu_name", "arch", "sm", "driver", "cuda", "hostname"), str),
    "attestation": dict,
    "checkpoint_info": dict,
    "memory": {"plan": dict, "logged": dict, "weights_miss_pct": _NUMBER, "kv_tokens_miss_pct": _NUMBER},
    "correctness": {
        "probed": bool,
        **dict.fromkeys(("set_version", "prompts", "answered", "exact", "degenerate", "errors"), int),
        **dict.fromkeys(("score", "seconds"), _NUMBER),
        "outputs": (list, dict),
        "thresholds": dict,
        "reference": dict,
        "long": (list, dict),
        "long_seconds": _NUMBER,
    },
}
# [correctness] beyond its types: a score of 1e308 would become the reference, a threshold of "0.5" or a text that
# is a number an internal error in report, compare and export. Each row of [[correctness.outputs]] and its ranges.
_PROBE_ROW = {"id": str, "kind": str, "text": str, "error": str, "exact": bool, "degenerate": str}
_CORRECTNESS_RANGES = {
    "score": (0.0, 1.0),
    "seconds": (0.0, 86_400.0),
    **dict.fromkeys(("set_version", "prompts", "answered", "exact", "degenerate", "errors"), (0, 100_000)),
}
_SHARES = ("min_score", "max_score_drop", "min_agreement", "max_degenerate")  # the known thresholds: shares
_RUN: dict[str, Any] = {
    **dict.fromkeys(
        ("concurrency", "repeat", "completed", "failed", "total_input_tokens", "total_output_tokens"),
        int,
    ),
    "max_concurrent_requests": int,
    "context_depth": int,
    "ok": bool,
    "error": str,
    "started_at": str,
    "errors": list,
    "metrics_delta": dict,
    **dict.fromkeys(
        (
            "duration",
            "output_throughput",
            "request_throughput",
            "spec_decode_acceptance_rate",
            *(f"{s}_{m}_ms" for s in ("mean", "median", "p99") for m in ("ttft", "tpot", "itl")),
            "median_e2el_ms",
            "p99_e2el_ms",
            "request_rate",
        ),
        _NUMBER,
    ),
}
_REQUIRED = {"cell": ("cell_id", "host", "config"), "run": ("concurrency",)}


def run_name(concurrency: int, repeat: int, rate: float = 0.0, depth: int = 0) -> str:
    """A window's file: c008-r1.toml, or q2-c008-d8192-r1.toml at a request rate and context depth."""
    return loadpoints.Point(rate, depth, concurrency).window(repeat) + ".toml"


def window_files(folder: Path) -> list[Path]:
    """The window files of a cell folder (loadpoints.WINDOW names; trees from before the load axes hold cNNN-rK)."""
    return sorted(p for p in Path(folder).glob("*-r*.toml") if loadpoints.WINDOW.fullmatch(p.stem))


def point_key(run: dict[str, Any]) -> tuple[float, int, int, int]:
    """How windows sort: rate, depth, concurrency, repeat (the order the cell ran them)."""
    p = loadpoints.of_window(run)
    return (p.rate, p.depth, p.concurrency, int(run.get("repeat", 0)))


def clear_temp_files(root: Path, sweep: str) -> None:
    """Temp files of atomic writes cut short by a SIGKILL: never read by anyone, dropped before a sweep resumes."""
    folder = Path(root) / path_part(sweep, "sweep")
    if folder.is_dir():
        for tmp in folder.rglob(".*.tmp"):
            if tmp.is_file() and not tmp.is_symlink():
                tmp.unlink(missing_ok=True)


RUN_FILE = "sweep.toml"  # results/<sweep>/sweep.toml: when this run of the sweep began (the store's identity)


def begin_run(root: Path, sweep: str, fresh: bool, now: str, judge: dict[str, Any] | None = None) -> str:
    """Record when this run of the sweep began, unless one is already under way in this folder (a resume, a tune
    round, a follow-up collect keep it); --fresh begins a new run. Returns the run's start. `judge`: the spec's
    [judge] table (how the answer is judged), kept under [judge] and updated by every run."""
    folder = Path(root) / path_part(sweep, "sweep")
    extra = {"judge": dict(judge)} if judge else {}
    if not fresh and (start := run_start(folder)):
        if not (folder / RUN_FILE).is_file() or (extra and _judge_of(folder) != extra["judge"]):
            atomic_write_toml(folder / RUN_FILE, {"schema": SCHEMA, "started_at": start, **extra})
        return start
    atomic_write_toml(folder / RUN_FILE, {"schema": SCHEMA, "started_at": now, **extra})
    return now


def _judge_of(folder: Path) -> dict[str, Any]:
    try:
        table = read_toml(Path(folder) / RUN_FILE).get("judge")
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def equivalence_margins(results_dir: Path) -> list[float]:
    """The [judge] equivalence of every sweep at or below `results_dir` (a sweep folder, or a root of them), as
    their sweep.toml records it; malformed or out-of-range values are left out (the caller uses its default)."""
    folder = Path(results_dir)
    files = [folder / RUN_FILE] if (folder / RUN_FILE).is_file() else sorted(folder.glob(f"*/{RUN_FILE}"))
    out = []
    for f in files:
        value = _judge_of(f.parent).get("equivalence")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 0.5:
            out.append(float(value))
    return out


def run_start(folder: Path) -> str:
    """When the run of the sweep in `folder` began: its sweep.toml, else (a tree from before it was written) the
    earliest start of its cells; "" for an empty folder."""
    try:
        start = read_toml(Path(folder) / RUN_FILE).get("started_at")
        if isinstance(start, str) and start:
            return start
    except (OSError, ValueError):
        pass
    starts = []
    for cell_file in Path(folder).glob(f"*/*/{CELL_FILE}"):
        try:
            starts.append(str(read_toml(cell_file).get("started_at") or ""))
        except (OSError, ValueError):
            continue
    return min((s for s in starts if s), default="")


def atomic_write_toml(path: Path, data: dict[str, Any]) -> None:
    atomic.write_bytes(path, tomli_w.dumps(_drop_none(data)).encode())


def _drop_none(value: Any) -> Any:
    """TOML has no null: leave None out."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value if v is not None]
    return value


def read_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


class BadFile(ValueError):
    """A file of the results tree that cannot be used: message = what is wrong with it."""


def read_checked(path: Path, kind: str) -> dict[str, Any]:
    """A cell.toml (kind "cell") or a measurement (kind "run"), or BadFile: not a file, too big, not UTF-8 TOML,
    a missing key or a value of the wrong type."""
    if not path.is_file():
        raise BadFile("not a regular file")
    if path.stat().st_size > MAX_TOML_BYTES:
        raise BadFile(f"larger than {MAX_TOML_BYTES} bytes")
    try:
        data = read_toml(path)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadFile(f"not valid TOML ({str(exc)[:120]})") from None
    except RecursionError:
        raise BadFile("nested too deeply") from None
    except OSError as exc:
        raise BadFile(f"cannot read it ({exc.strerror})") from None
    problem = record_problem(data, kind)
    if problem:
        raise BadFile(problem)
    return data


def record_problem(data: Any, kind: str) -> str:
    """What is wrong with a cell.toml table (kind "cell") or a window's (kind "run"), "" when nothing: the same
    check for the tree's files and the store's rows."""
    if not isinstance(data, dict):
        return f"not a table ({type(data).__name__})"
    for key in _REQUIRED[kind]:
        if key not in data:
            return f"has no '{key}'"
    problem = size_problem(data) or _shape_problem(data, _CELL if kind == "cell" else _RUN, "")
    if problem or kind != "cell" or "correctness" not in data:
        return problem
    return _correctness_problem(data["correctness"])


MAX_RECORD = 4 * 1024 * 1024  # characters in all of a record's keys and texts: an honest cell's are under 2 MB
MAX_STRING = longrows.MAX_PACKED  # the longest text an honest record holds: a packed long-decode sequence


def size_problem(value: Any, most: int = MAX_RECORD) -> str:
    """A record too big to be ours, "" otherwise: any text over MAX_STRING characters, or more than `most` in all
    (each value counts a few). Walked without recursion, stopping at the bound: a huge store row costs no more."""
    left, todo = most, [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        if isinstance(item, str):
            if len(item) > MAX_STRING:
                return f"holds a text of {len(item)} characters (at most {MAX_STRING})"
            left -= len(item)
        left -= 8
        if left < 0:
            return f"is larger than {most} characters in all"
    return ""


def _correctness_problem(c: dict[str, Any]) -> str:
    for key, (low, high) in _CORRECTNESS_RANGES.items():
        if key in c and not low <= c[key] <= high:
            return f"'correctness.{key}' = {c[key]!r} is outside {low}..{high}"
    for i, row in enumerate(c.get("outputs", [])):
        problem = _shape_problem(row, _PROBE_ROW, f"correctness.outputs[{i}].")
        if problem:
            return problem
    for i, row in enumerate(c.get("long", [])):
        problem = longrows.problem(row, f"correctness.long[{i}]")
        if problem:
            return problem
    for key, value in c.get("thresholds", {}).items():
        low, high = (0.0, 1.0) if key in _SHARES else (0.0, 1e6)
        if not _is(value, _NUMBER) or not low <= value <= high:
            return f"'correctness.thresholds.{key}' must be a number in {low:g}..{high:g}"
    for key, value in c.get("reference", {}).items():
        if not _is(value, (str, int, float, bool)):
            return f"'correctness.reference.{key}' must be a config value (text or a number)"
    return ""


def _shape_problem(data: dict[str, Any], shape: dict[str, Any], where: str) -> str:
    for key, want in shape.items():
        if key not in data:
            continue
        value, name = data[key], f"{where}{key}"
        if isinstance(want, dict):
            if not isinstance(value, dict):
                return f"'{name}' must be a table"
            problem = _shape_problem(value, want, f"{name}.")
            if problem:
                return problem
        elif isinstance(want, tuple) and want[0] is list:
            if not isinstance(value, list) or not all(_is(v, want[1]) for v in value):
                return f"'{name}' must be a list of {want[1].__name__}"
        elif not _is(value, want):
            return f"'{name}' has the wrong type ({type(value).__name__})"
    return ""


def _is(value: Any, want: type | tuple[type, ...]) -> bool:
    if isinstance(value, bool) and want is not bool:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, want)


def warn_bad_file(path: Path, why: str) -> None:
    print(f"spark-agent: warning: {plain(str(path))}: {plain(why)}; skipped", file=sys.stderr)


# One folder name of the tree: a sweep name, an inventory host name, a cell id. Starting with a letter or digit and
# without separators, none of them can be ".", "..", hidden, absolute or a path of several parts.
PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
CELL_ID = re.compile(r"[0-9a-f]{12}")


def path_part(name: str, what: str) -> str:
    """name, if it is one plain folder name; ValueError otherwise (nothing may be written outside the tree)."""
    if not isinstance(name, str) or not PART.fullmatch(name):
        raise ValueError(f"{what} {name!r} cannot name a results folder (letters, digits, . _ - only)")
    return name


def cell_dir(root: Path, sweep: str, host: str, cell_id: str) -> Path:
    if not isinstance(cell_id, str) or not CELL_ID.fullmatch(cell_id):
        raise ValueError(f"cell id {cell_id!r} is not 12 hex characters")
    return Path(root) / path_part(sweep, "sweep") / path_part(host, "host") / cell_id


def is_finished(root: Path, sweep: str, host: str, cell_id: str) -> bool:
    return (cell_dir(root, sweep, host, cell_id) / CELL_FILE).is_file()


def record_lost(root: Path, sweep: str, host: str, cell_id: str, reason: str, error: str, at: str) -> None:
    """Say why a started cell has no results (reason: lost | host_lost | host_failed | interrupted | controller).
    Never marks the cell finished; a finished cell is never marked lost."""
    folder = cell_dir(root, sweep, host, cell_id)
    if (folder / CELL_FILE).is_file():
        return
    record = {
        "schema": SCHEMA,
        "cell_id": cell_id,
        "sweep": sweep,
        "host": host,
        "status": "lost",
        "reason": reason,
        "error": error,
        "at": at,
    }
    atomic_write_toml(folder / LOST_FILE, record)


def clear_lost(root: Path, sweep: str, host: str, cell_id: str) -> None:
    """A cell measured after all is no longer lost (called once cell.toml is in place)."""
    (cell_dir(root, sweep, host, cell_id) / LOST_FILE).unlink(missing_ok=True)


def iter_cell_dirs(root: Path) -> Iterator[Path]:
    """Finished cells under root, which may be the results root, one sweep, or one host folder."""
    root = Path(root)
    for cell_file in sorted(root.rglob(CELL_FILE)):
        yield cell_file.parent


def load_cell(cell_path: Path, on_bad: Callable[[Path, str], None] = warn_bad_file) -> dict[str, Any]:
    """cell.toml plus 'runs' (its measurements, sorted by point (rate, depth, concurrency) then repeat) and 'dir'.
    Raises BadFile for a bad cell.toml; a bad measurement is reported to `on_bad` and left out."""
    cell = redact.redact(read_checked(cell_path / CELL_FILE, "cell"))  # masked as read: reports built on it are clean
    runs = []
    for path in window_files(cell_path):
        try:
            runs.append(redact.redact(read_checked(path, "run")))
        except BadFile as exc:
            on_bad(path, str(exc))
    runs.sort(key=point_key)
    cell["runs"] = runs
    cell["dir"] = str(cell_path)
    return cell


def load_cells(root: Path, on_bad: Callable[[Path, str], None] = warn_bad_file) -> list[dict[str, Any]]:
    """Every finished cell below root, as its files say. A damaged file is named to `on_bad` (default: a warning line
    on stderr) and skipped: one bad cell never hides the others. Nothing here is judged: judging/correctness.py
    judged_cells reads a tree with each probed cell compared with its checkpoint's reference."""
    cells = []
    for path in iter_cell_dirs(root):
        try:
            cells.append(load_cell(path, on_bad))
        except BadFile as exc:
            on_bad(path / CELL_FILE, str(exc))
    return cells
