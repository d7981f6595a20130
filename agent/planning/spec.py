"""Load and validate a sweep spec (TOML). Every error names the file and line and says how to fix it.

No I/O beyond reading the file: validation happens before any host is touched.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from agent.errors import UserError
from agent.hostside import docker, longdecode, steady
from agent.judging import verdicts
from agent.planning import design as axes_design
from agent.planning import loadspec
from agent.planning.design import Design
from agent.planning.settings import (
    CorrectnessSettings,
    LoadSettings,
    ServerSettings,
    TelemetrySettings,
    toml_schema,
)

QUANTS = ("nvfp4", "fp8", "bf16")
PROFILES = ("uniform", "mixed")
SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # also a folder name in the results tree
# results/calibrate/ is `spark-agent calibrate`'s: every later sweep of its image takes its cells for host speeds for
# a week (running/calibration.py), so a sweep of that name (in any case: macOS folders ignore it) is refused.
CALIBRATION_SWEEP = "calibrate"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
VERSION = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SPEC_MAX_BYTES = 1024 * 1024  # a spec is a page of TOML; more is a wrong file
# Flags the agent sets itself (from [server]/[matrix] and the host's bind address and port).
MANAGED_FLAGS = (
    "--host",
    "--port",
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-seqs",
    "--moe-backend",
    "--linear-backend",
    "--attention-backend",
    "--speculative-config",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--distributed-executor-backend",
)
# key -> (lowest, highest): anything outside is a typo or an absurd value, refused before any host is touched.
_RANGES: dict[str, tuple[float, float]] = {
    "max_model_len": (1, 1 << 24),
    "max_num_seqs": (1, 1 << 16),
    "duration_s": (0.001, 86_400),
    "warmup": (0, 100),
    "warmup_max": (0, 100),
    "warmup_tolerance": (0, 1),
    "repeats": (1, 1000),
    "server_starts": (1, 100),
    "prompt_len": (1, 1 << 24),
    "output_len": (1, 1 << 24),
    "seed": (0, (1 << 63) - 1),
    "interval_s": (0.05, 3600),
    "throttle_threshold": (0, 100),
    "cooldown_s": (0, 86_400),
    "cool_to_c": (0, 150),
    "cool_timeout_s": (0, 86_400),
    "nodes": (1, 64),
    "tensor_parallel_size": (1, 512),
    "pipeline_parallel_size": (1, 64),
}
_MAX_LIST = 64  # checkpoints, backends per axis, concurrency levels


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
    server: ServerSettings
    moe_backends: list[str]
    linear_backends: list[str]
    attention_backends: list[str]
    concurrency: list[int]
    duration_s: float
    warmup: int
    repeats: int
    load: LoadSettings
    warmup_max: int = 0  # with warmup_tolerance: warm up until steady, at most this many windows (hostside/steady)
    warmup_tolerance: float = 0.0  # 0: the fixed `warmup`
    env: dict[str, str] = field(default_factory=dict)  # overrides, recorded with the rule they override
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    correctness: CorrectnessSettings = field(default_factory=CorrectnessSettings)
    design: Design = field(default_factory=Design)  # the [matrix] axes beyond the backends
    server_starts: int = 1  # independent server starts of every cell (planning/matrix.nth_start), interleaved
    # [sweep] one_trust_domain: hosts of different owners may serve one multi-node cell (its nodes trust each other
    # fully: docs/security.md); by default a node set never mixes owners (ansible_user, or spark_owner)
    one_trust_domain: bool = False
    equivalence: float = verdicts.DEFAULT_MARGIN  # [judge] equivalence: Δ, values within ±Δ are one choice

    def axes(self) -> list[tuple[str, list[Any]]]:
        """(axis, values) in planning order: the fixed axes, then each [matrix] server setting in field order."""
        d = self.design
        return [
            ("checkpoint", [c.name for c in self.checkpoints]),
            ("moe_backend", self.moe_backends),
            ("linear_backend", self.linear_backends),
            ("attention_backend", self.attention_backends),
            ("image", d.images or [self.image]),
            ("env", list(d.env) or [""]),
            *d.server.items(),
        ]

    def with_duration(self, seconds: float) -> Spec:
        """--duration: the same spec with every window set to `seconds` (for quick rehearsals)."""
        return replace(self, duration_s=float(seconds))


# table -> key -> (types, required, default)
_SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], bool, Any]]] = {
    "sweep": {
        "name": ((str,), True, None),
        "description": ((str,), False, ""),
        "one_trust_domain": ((bool,), False, False),
    },
    "image": {"ref": ((str,), True, None), "vllm_version": ((str,), False, "")},
    "checkpoints": {"name": ((str,), True, None), "model": ((str,), True, None), "quant": ((str,), True, None)},
    "server": toml_schema(ServerSettings),
    "matrix": {
        "moe_backend": ((list,), True, None),
        "linear_backend": ((list,), False, ["auto"]),
        "attention_backend": ((list,), False, ["auto"]),
        "concurrency": ((list,), True, None),
        "duration_s": ((int, float), False, 60),
        "warmup": ((int,), False, 1),
        "warmup_max": ((int,), False, 0),  # 0: steady.DEFAULT_MAX once warmup_tolerance is set
        "warmup_tolerance": ((int, float), False, 0),
        "repeats": ((int,), False, 3),
        "server_starts": ((int,), False, 1),
        # axes beyond the backends (planning/design.py) and the combinations to leave out or keep
        "checkpoint": ((list,), False, None),
        "image": ((list,), False, None),
        "env": ((dict,), False, None),
        **{name: ((list,), False, None) for name in toml_schema(ServerSettings)},
        "extra_args": ((list, dict), False, None),  # a list of argument lists, or named ones: {eager = [...]}
        "include": ((list,), False, None),
        "exclude": ((list,), False, None),
    },
    "load": toml_schema(LoadSettings),
    "env": {},
    "telemetry": toml_schema(TelemetrySettings),
    "correctness": toml_schema(CorrectnessSettings),
    # how the answer is judged, not what is measured: never part of a cell id, recorded in the sweep's sweep.toml
    "judge": {"equivalence": ((int, float), False, verdicts.DEFAULT_MARGIN)},
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
            if current == table and seen == index and key is not None and _assigns(line, key):
                return n
        return start or 1


def _assigns(line: str, key: str) -> bool:
    """Whether a TOML line sets `key` (bare or quoted)."""
    k = re.escape(key)
    return bool(re.match(rf"""^\s*(?:{k}|"{k}"|'{k}')\s*=""", line))


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec; raises UserError('FILE:LINE: what is wrong; how to fix it')."""
    path = packaged_example(Path(path))
    text = read_text_file(path, "spec", SPEC_MAX_BYTES)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise UserError(f"{path}:{m.group(1) if m else 1}: not valid TOML: {exc}") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a sweep spec; write plain tables and lists") from None
    return _build(path, raw, _Lines(text))


def packaged_example(path: Path) -> Path:
    """`examples/NAME.toml` as the README writes it, run outside a checkout: the copy installed with the package
    (said on the console, with how to copy it to edit). Any other path is the user's, as given."""
    from agent import logs
    from agent.paths import EXAMPLES

    if path.exists() or path.parent != Path("examples") or not (EXAMPLES / path.name).is_file():
        return path
    packaged = EXAMPLES / path.name
    logs.say(
        "packaged_example", f"{path}: not in this folder; using the packaged example {packaged} (cp it here to edit)"
    )
    return packaged


def read_text_file(path: Path, what: str, limit: int) -> str:
    """A small UTF-8 text file the user wrote, or a UserError naming it (and the line of a bad byte)."""
    if path.is_dir():
        raise UserError(f"{path}: is a folder; pass the {what} file")
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    if len(data) > limit:
        raise UserError(f"{path}: larger than {limit // 1024} KiB; is this the {what}?")
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise UserError(f"{path}:{line}: a NUL byte: this is a binary file, not the {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte {exc.start}); save the {what} as UTF-8") from None


def _err(path: Path, line: int, message: str) -> UserError:
    return UserError(f"{path}:{line}: {message}")


def _fail(path: Path, line: int, message: str) -> NoReturn:
    raise _err(path, line, message)


def _check_table(path: Path, lines: _Lines, table: str, values: dict, index: int = 0) -> dict[str, Any]:
    """Unknown keys and wrong types are errors; missing optional keys get their defaults."""
    schema = _SCHEMA[table]
    where = f"[[{table}]]" if table == "checkpoints" else f"[{table}]"
    if not isinstance(values, dict):
        raise _err(path, lines.of(table, None, index), f"{where} must be a table of keys, not {_kind(values)}")
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in schema:
            known = ", ".join(schema) or "none"
            raise _err(path, lines.of(table, key, index), f"unknown key '{key}' in {where}; known keys: {known}")
        types = schema[key][0]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            want = " or ".join(t.__name__ for t in types)
            raise _err(path, lines.of(table, key, index), f"'{key}' in {where} must be {want}, not {_kind(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise _err(path, lines.of(table, key, index), f"'{key}' in {where} must be a finite number, got {value}")
        if isinstance(value, str):
            _check_string(path, lines.of(table, key, index), f"'{key}' in {where}", value)
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


def _kind(value: Any) -> str:
    """A value's type for an error message, and the value itself only when short and not text (no secret)."""
    name = {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), type(value).__name__)
    return f"{name} ({value!r})" if isinstance(value, (int, float)) and not isinstance(value, bool) else name


def _check_string(path: Path, line: int, what: str, value: str, limit: int = 4096) -> None:
    if len(value) > limit:
        raise _err(path, line, f"{what} is {len(value)} characters long; the limit is {limit}")
    if _CONTROL.search(value):
        raise _err(path, line, f"{what} holds a control character (newline, tab, NUL...); write it on one line")


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
            shown = table if SWEEP_NAME.match(table) else repr(table[:40])
            raise _err(path, lines.of(table), f"unknown table [{shown}]; known tables: {', '.join(_SCHEMA)}")
    image_axis = raw.get("matrix", {}).get("image") if isinstance(raw.get("matrix"), dict) else None
    for table in _REQUIRED_TABLES:
        if table not in raw and not (table == "image" and image_axis):
            raise _err(path, 1, f"the spec has no [{table}] table")
    sweep = _check_table(path, lines, "sweep", raw["sweep"])
    if not SWEEP_NAME.match(sweep["name"]):
        raise _err(
            path, lines.of("sweep", "name"), "sweep name must be 1-64 letters, digits, . _ - (starting with one)"
        )
    if sweep["name"].lower() == CALIBRATION_SWEEP:
        raise _err(
            path,
            lines.of("sweep", "name"),
            f"sweep name {sweep['name']!r} is reserved for `spark-agent calibrate` (its folder holds the fleet's host "
            "speeds); name the sweep otherwise",
        )
    image_raw = raw.get("image", {})
    if isinstance(image_axis, list) and image_axis and isinstance(image_raw, dict) and "ref" not in image_raw:
        image_raw = {**image_raw, "ref": image_axis[0]}  # with an image axis, [image] ref may be left out
    image = _check_table(path, lines, "image", image_raw)
    if image["vllm_version"] and not VERSION.match(image["vllm_version"]):
        raise _err(path, lines.of("image", "vllm_version"), "vllm_version must look like 0.24.0 (or leave it out)")
    problem = check_image_ref(image["ref"], path)
    if problem:
        raise _err(path, lines.of("image", "ref"), problem)
    checkpoints = _checkpoints(path, lines, raw["checkpoints"])
    server = _check_table(path, lines, "server", raw.get("server", {}))
    server["speculative"] = _speculative(path, lines.of("server", "speculative"), server["speculative"])
    _extra_args(path, lines.of("server", "extra_args"), server["extra_args"])
    matrix = _check_table(path, lines, "matrix", raw["matrix"])
    load = _check_table(path, lines, "load", raw.get("load", {}))
    design, checkpoints = _design(path, lines, raw, server, matrix, load, checkpoints)
    _check_values(path, lines, server, matrix, load)
    loadspec.check(
        load, raw.get("load", {}), server, path.parent, lambda key, why: _fail(path, lines.of("load", key), why)
    )
    env = _env(path, raw.get("env", {}), lambda key=None: lines.of("env", key), "[env]")
    telemetry = _telemetry(path, lines, raw.get("telemetry", {}))
    judge = _check_table(path, lines, "judge", raw.get("judge", {}))
    if problem := verdicts.check_margin(judge["equivalence"]):
        raise _err(path, lines.of("judge", "equivalence"), f"'equivalence' in [judge]: {problem}")
    spec = Spec(
        path=path,
        name=sweep["name"],
        one_trust_domain=sweep["one_trust_domain"],
        image=image["ref"],
        vllm_version=image["vllm_version"],
        checkpoints=checkpoints,
        server=ServerSettings(**dict(server, gpu_memory_utilization=float(server["gpu_memory_utilization"]))),
        moe_backends=_backends(path, lines, matrix, "moe_backend"),
        linear_backends=_backends(path, lines, matrix, "linear_backend"),
        attention_backends=_backends(path, lines, matrix, "attention_backend"),
        concurrency=matrix["concurrency"],
        duration_s=float(matrix["duration_s"]),
        warmup=matrix["warmup"],
        repeats=matrix["repeats"],
        server_starts=matrix["server_starts"],
        load=LoadSettings(**load),
        warmup_max=_warmup_max(matrix),
        warmup_tolerance=float(matrix["warmup_tolerance"]),
        env={k: str(v) for k, v in env.items()},
        telemetry=telemetry,
        correctness=_correctness(
            path, lines, raw.get("correctness", {}), min(design.server.get("max_model_len", [server["max_model_len"]]))
        ),
        design=design,
        equivalence=float(judge["equivalence"]),
    )
    _check_moe_backends(path, lines, spec)
    return _with_combinations(path, lines, spec, matrix)


def _check_moe_backends(path: Path, lines: _Lines, spec: Spec) -> None:
    """A backend vLLM has for no quant (a typo: flashinfer_b13x), or one newer than the stated vLLM, is refused here: otherwise it provisions a host and starts a server to fail (rules/backends.toml)."""
    from agent.planning import envrules

    version = envrules.parse_version(spec.vllm_version) if spec.vllm_version else None
    for value in spec.moe_backends:
        problem = envrules.moe_backend_problem(value, version)
        if problem:
            raise _err(path, lines.of("matrix", "moe_backend"), problem)


def _telemetry(path: Path, lines: _Lines, raw: Any) -> TelemetrySettings:
    """[telemetry]: a sampling interval > 0, a throttle threshold that is a share (0-100 %)."""
    table = _check_table(path, lines, "telemetry", raw)
    if not table["interval_s"] > 0:
        raise _err(
            path, lines.of("telemetry", "interval_s"), f"'interval_s' must be > 0 seconds, got {table['interval_s']!r}"
        )
    if not 0 <= table["throttle_threshold"] <= 100:
        raise _err(
            path,
            lines.of("telemetry", "throttle_threshold"),
            f"'throttle_threshold' is a share of the window, 0 to 100 (%), got {table['throttle_threshold']!r}",
        )
    for key, value in table.items():
        low, high = _RANGES.get(key, (-math.inf, math.inf))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not low <= value <= high:
            raise _err(path, lines.of("telemetry", key), f"'{key}' must be from {low:g} to {high:g}, got {value!r}")
    numbers = {k: float(v) for k, v in table.items() if k != "required"}
    return TelemetrySettings(required=table["required"], **numbers)


def _correctness(path: Path, lines: _Lines, raw: Any, max_model_len: int) -> CorrectnessSettings:
    """[correctness]: shares from 0 to 1; long generations that fit the context; a reference names config keys
    with string values."""
    table = _check_table(path, lines, "correctness", raw)
    for key in ("min_score", "max_score_drop", "min_agreement", "max_degenerate", "min_task_accuracy"):
        if not 0 <= table[key] <= 1:
            raise _err(path, lines.of("correctness", key), f"'{key}' is a share, 0 to 1, got {table[key]!r}")
    room = min(max_model_len - LONG_PROMPT_ROOM, longdecode.MAX_TOKENS)
    if not (isinstance(raw, dict) and "long_tokens" in raw):  # the default: as long as the context allows
        table["long_tokens"] = max(1, min(table["long_tokens"], room))
    elif not 1 <= table["long_tokens"] <= room:
        raise _err(
            path,
            lines.of("correctness", "long_tokens"),
            f"long_tokens = {table['long_tokens']} does not fit: give 1 to {room} (the smallest max_model_len, "
            f"{max_model_len}, less {LONG_PROMPT_ROOM} for the prompt; at most {longdecode.MAX_TOKENS})",
        )
    bounds = {"long_prompts": (1, longdecode.MAX_PROMPTS), "long_min_tokens": (1, 4096), "long_budget_s": (1, 86400)}
    for key, (low, high) in bounds.items():
        if not low <= table[key] <= high:
            raise _err(path, lines.of("correctness", key), f"'{key}' must be from {low} to {high}, got {table[key]!r}")
    if table["eager_start"] and not table["enabled"]:
        raise _err(
            path,
            lines.of("correctness", "eager_start"),
            "eager_start runs the correctness checks on an --enforce-eager start, but enabled = false turns them "
            "off; drop eager_start or set enabled = true",
        )
    reference = table["reference"]
    for key, value in reference.items():
        if key not in CORRECTNESS_REFERENCE_KEYS or not isinstance(value, str):
            known = ", ".join(CORRECTNESS_REFERENCE_KEYS)
            raise _err(
                path,
                lines.of("correctness", "reference"),
                f"[correctness] reference: {str(key)[:40]!r} must be one of {known}, with a string value",
            )
    numbers = {k: float(table[k]) for k in ("min_score", "max_score_drop", "min_agreement", "max_degenerate")}
    return CorrectnessSettings(
        enabled=table["enabled"],
        reference=dict(reference),
        long_decode=bool(table["long_decode"]),
        long_tokens=int(table["long_tokens"]),
        long_prompts=int(table["long_prompts"]),
        long_min_tokens=int(table["long_min_tokens"]),
        long_batch=bool(table["long_batch"]),
        long_budget_s=float(table["long_budget_s"]),
        task_gate=bool(table["task_gate"]),
        eager_start=bool(table["eager_start"]),
        min_task_accuracy=float(table["min_task_accuracy"]),
        **numbers,
    )


LONG_PROMPT_ROOM = 256  # tokens left for a long-decode opening (hostside/longdecode.py: under 100 words each)
CORRECTNESS_REFERENCE_KEYS = ("moe_backend", "linear_backend", "attention_backend", "image")


def _env(path: Path, env: Any, line_of: Callable[..., int], where: str) -> dict[str, str]:
    """Variable names as a shell and docker accept them; values on one line. Values are never echoed: they
    may be secrets. line_of(key=None) is the line of the table or of one of its keys."""
    if not isinstance(env, dict):
        raise _err(path, line_of(), f"{where} must be a table of NAME = value, not {_kind(env)}")
    for key, value in env.items():
        if not ENV_NAME.match(key):
            shown = key if len(key) < 40 and not _CONTROL.search(key) else repr(key[:40])
            raise _err(path, line_of(key), f"env name {shown!r} must be letters, digits and _ (not first a digit)")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise _err(path, line_of(key), f"env override '{key}' must be a string or number")
        if isinstance(value, float) and not math.isfinite(value):
            raise _err(path, line_of(key), f"env override '{key}' must be a finite number")
        if isinstance(value, str):
            _check_string(path, line_of(key), f"env override '{key}'", value, limit=32 * 1024)
    return {k: str(v) for k, v in env.items()}


def _extra_args(path: Path, line: int, args: list[Any]) -> None:
    if len(args) > 256:
        raise _err(path, line, f"extra_args has {len(args)} entries; the limit is 256")
    for arg in args:
        if not isinstance(arg, (str, int)) or isinstance(arg, bool):
            raise _err(path, line, f"extra_args entries must be strings, not {_kind(arg)}")
        _check_string(path, line, "an extra_args entry", str(arg))
        flag = str(arg).split("=", 1)[0]
        if flag in MANAGED_FLAGS:
            raise _err(path, line, f"extra_args sets {flag}, which spark-agent sets itself; use [server] or [matrix]")


def _checkpoints(path: Path, lines: _Lines, raw: Any) -> list[Checkpoint]:
    if not isinstance(raw, list) or not raw:
        raise _err(path, lines.of("checkpoints"), "[[checkpoints]] must list at least one checkpoint")
    if len(raw) > _MAX_LIST:
        raise _err(path, lines.of("checkpoints"), f"{len(raw)} checkpoints; the limit is {_MAX_LIST} per spec")
    out: list[Checkpoint] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw):
        values = _check_table(path, lines, "checkpoints", entry, index=i)
        if not SWEEP_NAME.match(values["name"]):
            raise _err(
                path,
                lines.of("checkpoints", "name", i),
                "checkpoint name must be 1-64 letters, digits, . _ - (starting with one)",
            )
        model = values["model"]
        if not model.strip() or model.startswith("-") or len(model) > 1024:
            raise _err(
                path,
                lines.of("checkpoints", "model", i),
                "model must be a hub id or a folder path (1-1024 characters, not starting with -)",
            )
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


def _speculative(path: Path, line: int, value: str | dict) -> str:
    """Normalise the speculative config to canonical JSON ('' = off)."""
    if isinstance(value, dict):
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except ValueError:  # TOML has inf and nan; JSON does not
            raise _err(path, line, "speculative holds inf or nan; give finite numbers") from None
        except (TypeError, RecursionError):
            raise _err(path, line, "speculative must be a table of plain values (strings, numbers)") from None
    if value.strip().lower() in ("", "off", "none"):
        return ""
    try:
        parsed = json.loads(value, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise _err(path, line, f'speculative must be JSON for --speculative-config or "off": {exc.msg}') from None
    except (ValueError, RecursionError):
        raise _err(path, line, "speculative must be plain JSON: no NaN/Infinity, no deep nesting") from None
    if not isinstance(parsed, dict) or "method" not in parsed:
        raise _err(path, line, 'speculative must be a JSON object with a "method"')
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"))


def _warmup_max(matrix: dict[str, Any]) -> int:
    """The most warmup windows: as written, or with a tolerance and none written steady.DEFAULT_MAX (at least
    `warmup`); 0 without a tolerance (fixed warmup)."""
    if not matrix["warmup_tolerance"]:
        return 0
    return int(matrix["warmup_max"]) or max(steady.DEFAULT_MAX, matrix["warmup"])


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _backends(path: Path, lines: _Lines, matrix: dict, key: str) -> list[str]:
    values = matrix[key]
    if len(values) > _MAX_LIST:
        raise _err(path, lines.of("matrix", key), f"'{key}' lists {len(values)} backends; the limit is {_MAX_LIST}")
    if not values:
        raise _err(
            path, lines.of("matrix", key), f"'{key}' is empty; list at least one backend (\"auto\" = let vLLM choose)"
        )
    for v in values:
        if not isinstance(v, str) or not re.match(r"^[a-z0-9_]{1,64}$", v):
            shown = repr(v[:40]) if isinstance(v, str) else _kind(v)
            raise _err(path, lines.of("matrix", key), f"'{key}' entries must be lower-case backend names, got {shown}")
    if len(set(values)) != len(values):
        raise _err(path, lines.of("matrix", key), f"'{key}' lists a backend twice")
    return list(values)


def _check_values(path: Path, lines: _Lines, server: dict, matrix: dict, load: dict) -> None:
    conc = matrix["concurrency"]
    if not conc:
        raise _err(path, lines.of("matrix", "concurrency"), "'concurrency' is empty; list levels such as [1, 2, 4, 8]")
    if len(conc) > _MAX_LIST:
        raise _err(path, lines.of("matrix", "concurrency"), f"{len(conc)} concurrency levels; the limit is {_MAX_LIST}")
    for c in conc:
        if not isinstance(c, int) or isinstance(c, bool) or not 1 <= c <= _RANGES["max_num_seqs"][1]:
            raise _err(
                path,
                lines.of("matrix", "concurrency"),
                f"concurrency levels must be whole numbers >= 1 and <= {_RANGES['max_num_seqs'][1]}, got "
                + (repr(c) if isinstance(c, (int, float)) else _kind(c)),
            )
    if len(set(conc)) != len(conc):
        raise _err(path, lines.of("matrix", "concurrency"), "'concurrency' lists a level twice")
    checks = [
        ("matrix", "duration_s", matrix["duration_s"] > 0, "must be > 0 seconds"),
        ("matrix", "warmup", matrix["warmup"] >= 0, "must be >= 0"),
        ("matrix", "repeats", matrix["repeats"] >= 1, "must be >= 1"),
        (
            "matrix",
            "warmup_tolerance",
            0 <= matrix["warmup_tolerance"] < 1,
            "must be a share from 0 (fixed warmup) to below 1, e.g. 0.05 (windows within 5%)",
        ),
        (
            "matrix",
            "warmup_max",
            not matrix["warmup_max"] or matrix["warmup_tolerance"] > 0,
            "needs warmup_tolerance (the steady-state rule), e.g. warmup_tolerance = 0.05",
        ),
        (
            "matrix",
            "warmup_max",
            not matrix["warmup_max"] or matrix["warmup_max"] >= max(matrix["warmup"], 1),
            f"must be at least warmup ({matrix['warmup']}) and at least 1",
        ),
        ("matrix", "server_starts", matrix["server_starts"] >= 1, "must be >= 1"),
        ("server", "gpu_memory_utilization", 0 < server["gpu_memory_utilization"] <= 1, "must be in (0, 1]"),
        ("server", "max_model_len", server["max_model_len"] > 0, "must be > 0"),
        ("server", "max_num_seqs", server["max_num_seqs"] > 0, "must be > 0"),
        ("load", "prompt_len", load["prompt_len"] > 0, "must be > 0"),
        ("load", "output_len", load["output_len"] > 0, "must be > 0"),
        ("load", "profile", load["profile"] in PROFILES, f"must be one of {', '.join(PROFILES)}"),
        ("server", "transport", server["transport"] in TRANSPORTS, "must be rdma, socket or left out (auto)"),
        (
            "server",
            "distributed_executor_backend",
            server["distributed_executor_backend"] in ("", "ray"),
            'must be "ray" (the only multi-node backend spark-agent drives) or left out',
        ),
    ]
    for table, key, ok, why in checks:
        if not ok:
            value = (matrix if table == "matrix" else server if table == "server" else load)[key]
            raise _err(path, lines.of(table, key), f"'{key}' {why}, got {value!r}")
    for table, values in (("server", server), ("matrix", matrix), ("load", load)):
        for key, value in values.items():
            low, high = _RANGES.get(key, (-math.inf, math.inf))
            if isinstance(value, (int, float)) and not low <= value <= high:
                raise _err(path, lines.of(table, key), f"'{key}' must be from {low:g} to {high:g}, got {value!r}")
    _check_parallel(path, lines, server)
    if load["prompt_len"] + load["output_len"] > server["max_model_len"]:
        raise _err(
            path,
            lines.of("load", "prompt_len"),
            f"prompt_len + output_len ({load['prompt_len'] + load['output_len']}) exceeds max_model_len "
            f"{server['max_model_len']}; every request would be refused",
        )
    if max(conc) > server["max_num_seqs"]:
        raise _err(
            path,
            lines.of("matrix", "concurrency"),
            f"concurrency {max(conc)} exceeds server max_num_seqs {server['max_num_seqs']}; "
            "raise max_num_seqs or drop the level",
        )


TRANSPORTS = ("", "rdma", "socket")


def _check_parallel(path: Path, lines: _Lines, server: dict) -> None:
    """TP x PP must fill whole nodes: every node runs the same number of GPUs (the GPUs per node come from the
    facts; a Spark has one, checked again once they are known)."""
    nodes, tp, pp = server["nodes"], server["tensor_parallel_size"], server["pipeline_parallel_size"]
    if nodes > 1 and (tp * pp) % nodes:
        raise _err(
            path,
            lines.of("server", "nodes"),
            f"tensor_parallel_size x pipeline_parallel_size = {tp * pp} does not split over nodes = {nodes}; "
            "TP x PP must be nodes x GPUs per node (a Spark has 1 GPU: e.g. nodes = 2, tensor_parallel_size = 2)",
        )


# ---------------------------------------------------------------- [matrix] axes beyond the backends (design.py)

_KV_CACHE_DTYPE = re.compile(r"^[a-z0-9_]{1,32}$")


def _design(
    path: Path,
    lines: _Lines,
    raw: dict[str, Any],
    server: dict[str, Any],
    matrix: dict[str, Any],
    load: dict[str, Any],
    checkpoints: list[Checkpoint],
) -> tuple[Design, list[Checkpoint]]:
    """The axes [matrix] adds (server settings, env variants, images, checkpoints), each value checked as its own
    table would check it. A server axis's first value stands in [server] for the checks that follow."""
    written = raw.get("server", {}) if isinstance(raw.get("server"), dict) else {}
    server_axes: dict[str, list[Any]] = {}
    arg_names: dict[str, str] = {}
    for key in toml_schema(ServerSettings):  # field order: the order of the axes
        if matrix.get(key) is None:
            continue
        line = lines.of("matrix", key)
        if key in written:
            raise _err(path, line, f"'{key}' is set in [server] and is an axis in [matrix]; keep one of the two")
        raw_values = matrix[key]
        if isinstance(raw_values, dict):  # named variants, as [matrix.env] names its own: {graphs = [], eager = [...]}
            line = lines.of(f"matrix.{key}") if lines.of(f"matrix.{key}") > 1 else line
            raw_values = _named_args(path, line, raw_values, arg_names)
        values = [_server_value(path, line, key, v, matrix, load) for v in _axis_list(path, line, key, raw_values)]
        _distinct(path, line, key, values)
        server_axes[key] = values
        server[key] = values[0]
    images: list[str] = []
    if matrix.get("image") is not None:
        line = lines.of("matrix", "image")
        for ref in _axis_list(path, line, "image", matrix["image"]):
            problem = (
                check_image_ref(ref, path) if isinstance(ref, str) else f"image refs are strings, not {_kind(ref)}"
            )
            if problem:
                raise _err(path, line, f"'image' in [matrix]: {problem}")
            images.append(ref)
        _distinct(path, line, "image", images)
    if matrix.get("checkpoint") is not None:
        checkpoints = _checkpoint_axis(path, lines.of("matrix", "checkpoint"), matrix["checkpoint"], checkpoints)
    env = _env_variants(path, lines, matrix["env"]) if matrix.get("env") is not None else {}
    return Design(images=images, env=env, server=server_axes, arg_names=arg_names), checkpoints


def _named_args(path: Path, line: int, table: dict[str, Any], names: dict[str, str]) -> list[Any]:
    """[matrix.extra_args] name = [args...]: the lists as the axis's values, each name kept in `names` (by the
    list's canonical JSON) for [config] extra_args_name."""
    if len(table) > _MAX_LIST:
        raise _err(path, line, f"the 'extra_args' axis names {len(table)} variants; the limit is {_MAX_LIST}")
    for name, args in table.items():
        if not SWEEP_NAME.match(name):
            raise _err(path, line, "extra_args variant names must be 1-64 letters, digits, . _ - (starting with one)")
        if not isinstance(args, list):
            raise _err(path, line, f"extra_args variant '{name}' must be a list of arguments, not {_kind(args)}")
        names[arg_key(args)] = name
    return list(table.values())


def arg_key(args: list[Any]) -> str:
    """An extra_args list as the key of its variant name (planning/matrix reads it back for [config])."""
    return json.dumps([str(a) for a in args])


def _axis_list(path: Path, line: int, key: str, values: list[Any]) -> list[Any]:
    if not values:
        raise _err(path, line, f"the '{key}' axis in [matrix] is empty; list at least one value (or remove the key)")
    if len(values) > _MAX_LIST:
        raise _err(path, line, f"the '{key}' axis lists {len(values)} values; the limit is {_MAX_LIST}")
    return values


def _distinct(path: Path, line: int, key: str, values: list[Any]) -> None:
    seen: list[Any] = []
    for v in values:
        if v in seen:
            raise _err(path, line, f"the '{key}' axis in [matrix] lists a value twice")
        seen.append(v)


def _server_value(path: Path, line: int, key: str, value: Any, matrix: dict, load: dict) -> Any:
    """One value of a server-setting axis, checked and normalised as [server] would have it."""
    types = toml_schema(ServerSettings)[key][0]
    what = f"a value of the '{key}' axis in [matrix]"
    if not _of_type(value, types):
        want = " or ".join(t.__name__ for t in types)
        raise _err(path, line, f"{what} must be {want}, not {_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _err(path, line, f"{what} must be a finite number, got {value}")
    if isinstance(value, str):
        _check_string(path, line, what, value)
    if key == "speculative":
        return _speculative(path, line, value)
    if key == "extra_args":
        _extra_args(path, line, value)
        return list(value)
    if key == "gpu_memory_utilization":
        if not 0 < value <= 1:
            raise _err(path, line, f"'gpu_memory_utilization' values must be in (0, 1], got {value!r}")
        return float(value)
    if key == "kv_cache_dtype" and value and not _KV_CACHE_DTYPE.match(value):
        raise _err(path, line, f"'kv_cache_dtype' values are vLLM's names (auto, fp8, fp8_e4m3...), got {value[:40]!r}")
    low, high = _RANGES.get(key, (-math.inf, math.inf))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not low <= value <= high:
        raise _err(path, line, f"'{key}' values must be from {low:g} to {high:g}, got {value!r}")
    if key == "max_model_len" and load["prompt_len"] + load["output_len"] > value:
        raise _err(
            path,
            line,
            f"max_model_len {value} is below prompt_len + output_len ({load['prompt_len'] + load['output_len']}); "
            "every request would be refused",
        )
    levels = [c for c in matrix["concurrency"] if isinstance(c, int)]
    if key == "max_num_seqs" and levels and max(levels) > value:
        raise _err(path, line, f"max_num_seqs {value} is below concurrency {max(levels)}; raise it or drop the level")
    return value


def _of_type(value: Any, types: tuple[type, ...]) -> bool:
    """A TOML value of one of `types` (a boolean only where bool is one of them)."""
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def _checkpoint_axis(path: Path, line: int, names: list[Any], checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    """[matrix] checkpoint: which [[checkpoints]] (by name) the sweep measures, in this order."""
    by_name = {c.name: c for c in checkpoints}
    for name in _axis_list(path, line, "checkpoint", names):
        if not isinstance(name, str) or name not in by_name:
            shown = repr(name[:40]) if isinstance(name, str) else _kind(name)
            raise _err(
                path, line, f"'checkpoint' in [matrix] names {shown}, not a [[checkpoints]] name: {', '.join(by_name)}"
            )
    _distinct(path, line, "checkpoint", names)
    return [by_name[n] for n in names]


def _env_variants(path: Path, lines: _Lines, table: dict[str, Any]) -> dict[str, dict[str, str]]:
    """[matrix.env]: variant name -> NAME = value overrides (applied on top of [env]); {} is a valid variant."""
    own = lines.of("matrix.env")
    line = own if own > 1 else lines.of("matrix", "env")  # [matrix.env], or env = {...} in [matrix]
    if not table:
        raise _err(path, line, "the 'env' axis in [matrix] is empty; name at least one variant")
    if len(table) > _MAX_LIST:
        raise _err(path, line, f"{len(table)} env variants; the limit is {_MAX_LIST}")
    out = {}
    for name, overrides in table.items():
        line = _variant_line(lines, name, line)
        if not SWEEP_NAME.match(name):
            raise _err(path, line, "env variant names must be 1-64 letters, digits, . _ - (starting with one)")
        out[name] = _env(path, overrides, lambda key=None, line=line: line, f"env variant '{name}'")
    return out


def _variant_line(lines: _Lines, name: str, table_line: int) -> int:
    """`name = {...}` under [matrix.env], a [matrix.env.name] table of its own, or else the env axis's line."""
    own, inline = lines.of(f"matrix.env.{name}"), lines.of("matrix.env", name)
    return own if own > 1 else inline if inline > 1 else table_line


def _with_combinations(path: Path, lines: _Lines, spec: Spec, matrix: dict[str, Any]) -> Spec:
    """[[matrix.include]] / [[matrix.exclude]] checked against the axes, and at least one cell left."""
    axes = spec.axes()
    line = lines.of("matrix")
    if axes_design.size(axes) > axes_design.MAX_CELLS * 16:
        raise _err(
            path, line, f"the axes multiply to {axes_design.size(axes):,} cells; exclude combinations or list them"
        )
    include = _rules(path, lines, "include", matrix["include"], axes)
    exclude = _rules(path, lines, "exclude", matrix["exclude"], axes)
    cells = axes_design.combinations(axes, include, exclude)
    if not cells:
        raise _err(
            path,
            _rule_line(lines, "exclude", 0),
            "the exclusions remove every cell of the matrix; exclude fewer combinations",
        )
    if len(cells) > axes_design.MAX_CELLS:
        raise _err(path, line, f"{len(cells):,} cells per host; the limit is {axes_design.MAX_CELLS:,}: exclude some")
    _reference_planned(path, lines, spec.correctness.reference, cells)
    return replace(spec, design=replace(spec.design, include=include, exclude=exclude))


def _reference_planned(path: Path, lines: _Lines, reference: dict[str, Any], cells: list[dict[str, Any]]) -> None:
    """A [correctness] reference that no planned cell matches would be ignored without a word (the best-scoring
    cell stands in): refused. Compared as judging/correctness.py matches ("" is auto)."""
    if reference and not any(
        all(str(c.get(k) or "auto") == str(v or "auto") for k, v in reference.items()) for c in cells
    ):
        wanted = ", ".join(f"{k} = {v!r}" for k, v in reference.items())
        raise _err(
            path,
            lines.of("correctness", "reference"),
            f"[correctness] reference ({wanted}) matches no cell of the matrix; name a value the matrix has",
        )


def _rule_line(lines: _Lines, kind: str, index: int, key: str | None = None) -> int:
    line = lines.of(f"matrix.{kind}", key, index)
    return line if line > 1 else lines.of("matrix", kind)


def _rules(
    path: Path, lines: _Lines, kind: str, raw: list[Any] | None, axes: list[tuple[str, list[Any]]]
) -> list[dict]:
    """Each [[matrix.<kind>]] table: axis -> one of that axis's values (normalised as the axis is)."""
    if raw is None:
        return []
    values = dict(axes)
    if not raw:
        raise _err(path, _rule_line(lines, kind, 0), f"'{kind}' in [matrix] is empty; list combinations or remove it")
    out = []
    for i, rule in enumerate(raw):
        if not isinstance(rule, dict) or not rule:
            raise _err(path, _rule_line(lines, kind, i), f"each [[matrix.{kind}]] is a table of axis = value")
        normalised = {}
        for axis, value in rule.items():
            line = _rule_line(lines, kind, i, axis)
            if axis not in values:
                raise _err(
                    path, line, f"'{axis}' in [[matrix.{kind}]] is not an axis of [matrix]; axes: {', '.join(values)}"
                )
            v = _speculative(path, line, value) if axis == "speculative" and isinstance(value, (str, dict)) else value
            if v not in values[axis]:
                shown = ", ".join(_shown(x) for x in values[axis])
                raise _err(
                    path, line, f"{_shown(v)} is not a value of the '{axis}' axis ({shown}); list it there first"
                )
            normalised[axis] = v
        out.append(normalised)
    return out


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value[:60]) if value else "''"
    return _kind(value) if isinstance(value, dict) else repr(value)[:60]
