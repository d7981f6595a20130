"""Load and validate a sweep spec (TOML). Every error names the file and line and says how to fix it.

No I/O beyond reading the file: validation happens before any host is touched.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.hostside import docker

QUANTS = ("nvfp4", "fp8", "bf16")
PROFILES = ("uniform", "mixed")
SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Checkpoint:
    name: str
    model: str  # a path on the host or a hub id, passed to `vllm serve`
    quant: str  # nvfp4 | fp8 | bf16


@dataclass
class Spec:
    path: Path
    name: str
    image: str  # name@sha256:<digest>
    vllm_version: str  # the image's vLLM version if the spec states it ("" = read it from the log)
    checkpoints: list[Checkpoint]
    server: dict[str, Any]  # gpu_memory_utilization, max_model_len, max_num_seqs, speculative, extra_args
    moe_backends: list[str]
    linear_backends: list[str]
    attention_backends: list[str]
    concurrency: list[int]
    duration_s: float
    warmup: int
    repeats: int
    load: dict[str, Any]  # prompt_len, output_len, profile, seed
    env: dict[str, str] = field(default_factory=dict)  # overrides, recorded with the rule they override

    def with_duration(self, seconds: float) -> Spec:
        """--duration: the same spec with every window set to `seconds` (for quick rehearsals)."""
        copy = Spec(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        copy.duration_s = float(seconds)
        return copy


# table -> key -> (types, required, default)
_SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], bool, Any]]] = {
    "sweep": {"name": ((str,), True, None), "description": ((str,), False, "")},
    "image": {"ref": ((str,), True, None), "vllm_version": ((str,), False, "")},
    "checkpoints": {"name": ((str,), True, None), "model": ((str,), True, None), "quant": ((str,), True, None)},
    "server": {
        "gpu_memory_utilization": ((float, int), False, 0.85),
        "max_model_len": ((int,), False, 8192),
        "max_num_seqs": ((int,), False, 16),
        "speculative": ((str, dict), False, ""),
        "extra_args": ((list,), False, []),
    },
    "matrix": {
        "moe_backend": ((list,), True, None),
        "linear_backend": ((list,), False, ["auto"]),
        "attention_backend": ((list,), False, ["auto"]),
        "concurrency": ((list,), True, None),
        "duration_s": ((int, float), False, 60),
        "warmup": ((int,), False, 1),
        "repeats": ((int,), False, 3),
    },
    "load": {
        "prompt_len": ((int,), False, 1024),
        "output_len": ((int,), False, 256),
        "profile": ((str,), False, "uniform"),
        "seed": ((int,), False, 0),
    },
    "env": {},
}
_REQUIRED_TABLES = ("sweep", "image", "checkpoints", "matrix")


class _Lines:
    """Finds the line a table or key was written on, for error messages (tomllib gives no positions)."""

    def __init__(self, text: str):
        self.lines = text.splitlines()

    def of(self, table: str, key: str | None = None, index: int = 0) -> int:
        current, seen, start = None, -1, 0
        header = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?")
        for n, line in enumerate(self.lines, 1):
            m = header.match(line)
            if m:
                current = m.group(1)
                if current == table:
                    seen += 1
                    if seen == index:
                        start = n
                continue
            if current == table and seen == index and key and re.match(rf"^\s*{re.escape(key)}\s*=", line):
                return n
        return start or 1


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec; raises UserError('FILE:LINE: what is wrong; how to fix it')."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"{path}: cannot read the spec: {exc.strerror}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    return _build(path, raw, _Lines(text))


def _err(path: Path, line: int, message: str) -> UserError:
    return UserError(f"{path}:{line}: {message}")


def _check_table(path: Path, lines: _Lines, table: str, values: dict, index: int = 0) -> dict[str, Any]:
    """Unknown keys and wrong types are errors; missing optional keys get their defaults."""
    schema = _SCHEMA[table]
    where = f"[[{table}]]" if table == "checkpoints" else f"[{table}]"
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in schema:
            known = ", ".join(schema) or "none"
            raise _err(path, lines.of(table, key, index), f"unknown key '{key}' in {where}; known keys: {known}")
        types = schema[key][0]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            want = " or ".join(t.__name__ for t in types)
            raise _err(
                path,
                lines.of(table, key, index),
                f"'{key}' in {where} must be {want}, not {type(value).__name__} ({value!r})",
            )
        out[key] = value
    for key, (_, required, default) in schema.items():
        if key not in out:
            if required:
                raise _err(path, lines.of(table, None, index), f"{where} is missing '{key}'")
            out[key] = default
    return out


def pin_command(tag_ref: str, host: str, inventory: str | None = None, write: str | None = None) -> str:
    """The command that resolves `tag_ref` to a digest on `host` (shown when a spec names a tag)."""
    argv = ["spark-agent", "pin", tag_ref, "--host", host]
    if inventory:
        argv += ["-i", inventory]
    if write:
        argv += ["--write", write]
    return shlex.join(argv)


def check_image_ref(ref: str, spec_path: Path | None = None) -> str:
    """An error message for anything but name@sha256:<64 hex> (with the pin command for a tag), or ''."""
    try:
        docker.parse_ref(ref)
    except ValueError as exc:
        if "@" in ref:
            return str(exc)
        return f"{exc}; pin it with: " + pin_command(ref, "<HOST>", write=str(spec_path) if spec_path else None)
    return ""


def _build(path: Path, raw: dict[str, Any], lines: _Lines) -> Spec:
    for table in raw:
        if table not in _SCHEMA:
            raise _err(path, lines.of(table), f"unknown table [{table}]; known tables: {', '.join(_SCHEMA)}")
    for table in _REQUIRED_TABLES:
        if table not in raw:
            raise _err(path, 1, f"the spec has no [{table}] table")
    sweep = _check_table(path, lines, "sweep", raw["sweep"])
    if not SWEEP_NAME.match(sweep["name"]):
        raise _err(path, lines.of("sweep", "name"), f"sweep name '{sweep['name']}' must be letters, digits, . _ -")
    image = _check_table(path, lines, "image", raw["image"])
    problem = check_image_ref(image["ref"], path)
    if problem:
        raise _err(path, lines.of("image", "ref"), problem)
    checkpoints = _checkpoints(path, lines, raw["checkpoints"])
    server = _check_table(path, lines, "server", raw.get("server", {}))
    server["speculative"] = _speculative(path, lines, server["speculative"])
    matrix = _check_table(path, lines, "matrix", raw["matrix"])
    load = _check_table(path, lines, "load", raw.get("load", {}))
    _check_values(path, lines, server, matrix, load)
    env = raw.get("env", {})
    for key, value in env.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise _err(path, lines.of("env", key), f"env override '{key}' must be a string or number")
    return Spec(
        path=path,
        name=sweep["name"],
        image=image["ref"],
        vllm_version=image["vllm_version"],
        checkpoints=checkpoints,
        server=server,
        moe_backends=_backends(path, lines, matrix, "moe_backend"),
        linear_backends=_backends(path, lines, matrix, "linear_backend"),
        attention_backends=_backends(path, lines, matrix, "attention_backend"),
        concurrency=matrix["concurrency"],
        duration_s=float(matrix["duration_s"]),
        warmup=matrix["warmup"],
        repeats=matrix["repeats"],
        load=load,
        env={k: str(v) for k, v in env.items()},
    )


def _checkpoints(path: Path, lines: _Lines, raw: Any) -> list[Checkpoint]:
    if not isinstance(raw, list) or not raw:
        raise _err(path, lines.of("checkpoints"), "[[checkpoints]] must list at least one checkpoint")
    out, seen = [], {}
    for i, entry in enumerate(raw):
        values = _check_table(path, lines, "checkpoints", entry, index=i)
        if values["quant"] not in QUANTS:
            raise _err(
                path,
                lines.of("checkpoints", "quant", i),
                f"quant '{values['quant']}' is not one of {', '.join(QUANTS)}",
            )
        if values["name"] in seen:
            raise _err(
                path,
                lines.of("checkpoints", "name", i),
                f"duplicate checkpoint name '{values['name']}' (first at line {seen[values['name']]}); "
                "give each checkpoint its own name",
            )
        seen[values["name"]] = lines.of("checkpoints", "name", i)
        out.append(Checkpoint(values["name"], values["model"], values["quant"]))
    return out


def _speculative(path: Path, lines: _Lines, value: str | dict) -> str:
    """Normalise the speculative config to canonical JSON ('' = off)."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if value.strip().lower() in ("", "off", "none"):
        return ""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise _err(
            path,
            lines.of("server", "speculative"),
            f'speculative must be JSON for --speculative-config or "off": {exc.msg}',
        ) from None
    if not isinstance(parsed, dict) or "method" not in parsed:
        raise _err(path, lines.of("server", "speculative"), 'speculative must be a JSON object with a "method"')
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"))


def _backends(path: Path, lines: _Lines, matrix: dict, key: str) -> list[str]:
    values = matrix[key]
    if not values:
        raise _err(
            path, lines.of("matrix", key), f"'{key}' is empty; list at least one backend (\"auto\" = let vLLM choose)"
        )
    for v in values:
        if not isinstance(v, str) or not re.match(r"^[a-z0-9_]+$", v):
            raise _err(path, lines.of("matrix", key), f"'{key}' entries must be lower-case backend names, got {v!r}")
    if len(set(values)) != len(values):
        raise _err(path, lines.of("matrix", key), f"'{key}' lists a backend twice")
    return list(values)


def _check_values(path: Path, lines: _Lines, server: dict, matrix: dict, load: dict) -> None:
    conc = matrix["concurrency"]
    if not conc:
        raise _err(path, lines.of("matrix", "concurrency"), "'concurrency' is empty; list levels such as [1, 2, 4, 8]")
    for c in conc:
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            raise _err(
                path, lines.of("matrix", "concurrency"), f"concurrency levels must be whole numbers >= 1, got {c!r}"
            )
    if len(set(conc)) != len(conc):
        raise _err(path, lines.of("matrix", "concurrency"), "'concurrency' lists a level twice")
    checks = [
        ("matrix", "duration_s", matrix["duration_s"] > 0, "must be > 0 seconds"),
        ("matrix", "warmup", matrix["warmup"] >= 0, "must be >= 0"),
        ("matrix", "repeats", matrix["repeats"] >= 1, "must be >= 1"),
        ("server", "gpu_memory_utilization", 0 < server["gpu_memory_utilization"] <= 1, "must be in (0, 1]"),
        ("server", "max_model_len", server["max_model_len"] > 0, "must be > 0"),
        ("server", "max_num_seqs", server["max_num_seqs"] > 0, "must be > 0"),
        ("load", "prompt_len", load["prompt_len"] > 0, "must be > 0"),
        ("load", "output_len", load["output_len"] > 0, "must be > 0"),
        ("load", "profile", load["profile"] in PROFILES, f"must be one of {', '.join(PROFILES)}"),
    ]
    for table, key, ok, why in checks:
        if not ok:
            value = (matrix if table == "matrix" else server if table == "server" else load)[key]
            raise _err(path, lines.of(table, key), f"'{key}' {why}, got {value!r}")
    if max(conc) > server["max_num_seqs"]:
        raise _err(
            path,
            lines.of("matrix", "concurrency"),
            f"concurrency {max(conc)} exceeds server max_num_seqs {server['max_num_seqs']}; "
            "raise max_num_seqs or drop the level",
        )
