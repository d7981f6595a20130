"""Spec × host → cells. A cell is one server configuration; all its concurrency levels share one server.

A cell's id is a content hash of everything that changes the result: image digest, checkpoint, flags, load, env.
Host plumbing (bind address, port, paths) is left out, so the same cell on another host has the same id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from agent.errors import UserError
from agent.hostside import loadpoints, redact
from agent.hostside.contracts import Facts, MemoryPlan, ModelMemory
from agent.planning import design, envrules
from agent.planning.settings import (
    CorrectnessSettings,
    LoadSettings,
    ServerSettings,
    TelemetrySettings,
    flat_dict,
    flat_fields,
    from_flat,
    meta,
)
from agent.planning.spec import VERSION, Spec, arg_key

BACKEND_FIELDS = ("moe_backend", "linear_backend", "attention_backend")  # the axes a sweep compares
EAGER = "--enforce-eager"  # CUDA graphs off


@dataclass(frozen=True)
class CellConfig:
    """What a cell asks for: the [config] table of cell.toml, and (with the env) what its id hashes.

    to_dict() gives the table exactly as recorded since schema 1 (key order, value types); changing what it gives
    changes every cell id and so breaks every user's resume (tests/test_cell_id_golden.py pins it)."""

    image: str  # name@sha256:<digest>
    runtime: str  # docker | process
    checkpoint: str  # the spec's name for it
    model: str  # path or hub id passed to `vllm serve`
    quant: str  # nvfp4 | fp8 | bf16
    moe_backend: str = field(metadata=meta(flag="--moe-backend"))  # "" = auto (flag not passed)
    linear_backend: str = field(metadata=meta(flag="--linear-backend"))
    attention_backend: str = field(metadata=meta(flag="--attention-backend"))
    server: ServerSettings  # flattened into the table, in its field order
    load: LoadSettings  # likewise
    concurrency: list[int]
    duration_s: float
    warmup: int
    repeats: int
    # Added with the [matrix] axes (left out of the table, and so of the id, at its default):
    env_variant: str = field(default="", metadata=meta(keep_default=False))  # [matrix.env] name; "" = none
    # warm up until steady (hostside/steady.py): at most warmup_max windows, the last two within warmup_tolerance
    warmup_max: int = field(default=0, metadata=meta(keep_default=False))
    warmup_tolerance: float = field(default=0.0, metadata=meta(keep_default=False))
    # Added with server starts: the k-th independent start of this config (1 = the only one before: same id)
    server_start: int = field(default=1, metadata=meta(keep_default=False))
    # Added with [correctness] eager_start: a server start that only runs the correctness checks (no windows)
    probe_only: bool = field(default=False, metadata=meta(keep_default=False))
    # Added with named extra_args variants ([matrix.extra_args] eager = [...]): what the report calls them
    extra_args_name: str = field(default="", metadata=meta(keep_default=False))

    def to_dict(self) -> dict[str, Any]:
        return flat_dict(self)

    @classmethod
    def from_dict(cls, table: Mapping[str, Any]) -> CellConfig:
        """From a [config] table; keys recorded before a setting existed take its default (ValueError if a
        required key is missing or a key is unknown)."""
        return from_flat(cls, table)

    def serve_args(self) -> list[str]:
        """`vllm serve` arguments after MODEL (server_args of the [config] table)."""
        return server_args(self.to_dict())

    @property
    def speculative_method(self) -> str:
        return str(json.loads(self.server.speculative).get("method", "?")) if self.server.speculative else ""


class CheckpointInfo(TypedDict, total=False):
    """[checkpoint_info] of cell.toml: what the weight headers on the host say, when the model is a folder there."""

    bytes_per_token: int
    total_gib: float
    packed_fp4_tensors: int
    high_precision_weights: int
    expert_format: str
    mtp_present: bool
    mtp_quantized: bool


@dataclass
class Cell:
    id: str
    sweep: str
    host: str
    config: CellConfig
    env: dict[str, str]  # the server's environment (rules + overrides)
    provenance: list[envrules.EnvProvenance]  # the [[env_provenance]] rows
    notes: list[str] = field(default_factory=list)  # warnings and rule notes, shown before the run
    rules_applied: list[str] = field(default_factory=list)  # of the notes: what a rule did for the spec (no warning)
    argv: list[str] = field(default_factory=list)  # the server command line on this host
    host_env: dict[str, str] = field(default_factory=dict)  # plumbing for this host's engine, not part of the id
    checkpoint_info: CheckpointInfo = field(default_factory=lambda: CheckpointInfo())  # {} unless a folder there
    model_memory: ModelMemory | None = None  # what its weights and KV cache need (hostside/memplan), read there
    memory_plan: MemoryPlan | None = None  # planning/memory.plan_cell on its host, before the start; not hashed
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)  # the spec's [telemetry]; not in the id
    correctness: CorrectnessSettings = field(default_factory=CorrectnessSettings)  # [correctness]; not in the id
    cluster: dict[str, Any] = field(default_factory=dict)  # multi-node plumbing (planning/multinode.py), not hashed

    @property
    def hosts(self) -> list[str]:
        """Every host the cell runs on: the head (this cell's host) first, then its Ray workers."""
        return [n["host"] for n in self.cluster["nodes"]] if self.cluster else [self.host]

    keep_runs: bool = False  # tune adds levels to a measured cell: its windows at levels not run now are kept
    axes_label: str = ""  # the values of the sweep's other varying axes ("env=no-dg max_num_seqs=8")
    reference_of: str = ""  # a reference cell (planning/blocks.py): the id of the full cell it measures one level of

    @property
    def label(self) -> str:
        """ "uns-fast marlin attention=flashinfer spec=mtp": checkpoint, backend_label, speculative method, and
        whatever else varies in the sweep."""
        c = self.config
        parts = [c.checkpoint, backend_label(c.to_dict())]
        if c.server.speculative:
            parts.append("spec=" + c.speculative_method)
        ref = [f"(reference, c={self.config.concurrency[0]})"] if self.reference_of else []
        start = [f"(start {c.server_start})"] if c.server_start > 1 else []
        checks = ["(eager, checks only)"] if c.probe_only else []
        return " ".join(parts + ([self.axes_label] if self.axes_label else []) + ref + start + checks)

    def playbook_vars(self) -> dict[str, Any]:
        """What cell.yml needs as `cell`."""
        c = self.config
        return {
            "id": self.id,
            "argv": self.argv,
            "image": c.image,
            "model": c.model,
            "concurrency": list(c.concurrency),
            "duration_s": c.duration_s,
            "warmup": c.warmup,
            "warmup_max": c.warmup_max,
            "warmup_tolerance": c.warmup_tolerance,
            "repeats": c.repeats,
            "prompt_len": c.load.prompt_len,
            "output_len": c.load.output_len,
            "profile": c.load.profile,
            "seed": c.load.seed,
            "host_env": self.host_env,
            "shape": shape_vars(c.load),
            # the load points, in the order the cell runs them (loadpoints.cell_points: the runner walks the same)
            "points": [dataclasses.asdict(p) for p in loadpoints.cell_points(c.concurrency, shape_vars(c.load))]
            if not c.probe_only
            else [],
            "probe_only": c.probe_only,  # a checks-only start: no load points, the probe and long decode only
            "telemetry": flat_dict(self.telemetry),
            "probe": self.correctness.enabled,  # the correctness probe before teardown (hostside/probe.py)
            "probe_long": _long_options(
                self.correctness, list(c.concurrency)
            ),  # then the long-decode check (hostside/longdecode.py); {} = off
            "time_scale": float(self.host_env.get("SPARK_SIM_TIME_SCALE", "1")),  # the simulator's accelerated clock
            **({"cluster": self.cluster} if self.cluster else {}),
        }


def _long_options(c: CorrectnessSettings, concurrency: list[int]) -> dict[str, Any]:
    if not (c.enabled and (c.long_decode or c.task_gate)):
        return {}
    highest = max(concurrency) if concurrency else 0
    return {
        "tokens": c.long_tokens if c.long_decode else 0,
        "prompts": c.long_prompts,
        "batch": highest if c.long_batch else 0,
        "budget_s": c.long_budget_s,
        "tasks_batch": highest if c.task_gate else 0,
    }


def shape_vars(load: LoadSettings) -> dict[str, Any]:
    """`cell.shape` of cell.yml: the load shape beyond lengths and profile (spark_bench's options, same names).
    dataset_src is the checked file on the controller; the playbook copies it to the host by its hash."""
    shape = {
        key: getattr(load, key)
        for key in ("request_rate", "burstiness", "dataset", "range_ratio", "prefix_len", "prefix_group_size")
        + ("context_depth", "exact_lengths", "reset_prefix_cache", "goodput", "dataset_sha256")
        + ("request_rates", "context_depths")
    }
    shape["dataset_src"] = load.dataset_path if load.dataset == "sharegpt" else ""
    return shape


def backend_label(config: dict[str, Any]) -> str:
    """ "marlin", or "marlin linear=x attention=y" when those are forced too; "" (auto) reads "auto".
    The one spelling of a cell's backends: progress bar, env table, report, compare and export."""
    parts = [config.get("moe_backend") or "auto"]
    for name in BACKEND_FIELDS[1:]:
        if config.get(name):
            parts.append(f"{name.removesuffix('_backend')}={config[name]}")
    return " ".join(parts)


def _auto(value: str) -> str:
    return "" if value == "auto" else value


def cell_id(config: CellConfig, env: Mapping[str, str]) -> str:
    """12 hex of sha256 over the canonical JSON of the [config] table and the env: the resume key. A secret's value
    does not change the result: rotating a token keeps the id (resume), and no hash of it is kept."""
    masked = {k: redact.MARKER if redact.is_secret_name(k) else v for k, v in env.items()}
    canonical = json.dumps({"config": config.to_dict(), "env": masked}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _serve_flags() -> tuple[tuple[str, str], ...]:
    """[config] key -> `vllm serve` flag, from the fields' metadata: the flags always passed first, then those passed
    when set, each in field order (the command line as it has always been built)."""
    flagged = [f for f in flat_fields(CellConfig) if f.metadata.get("flag")]
    flagged.sort(key=lambda f: not f.metadata.get("always"))  # stable: field order within each group
    return tuple((f.name, f.metadata["flag"]) for f in flagged)


SERVE_FLAGS = _serve_flags()


def server_args(config: Mapping[str, Any]) -> list[str]:
    """`vllm serve` arguments after MODEL for a cell (no host/port: those are host plumbing)."""
    args: list[str] = []
    for key, flag in SERVE_FLAGS:
        value = config.get(key)
        if isinstance(value, bool):  # vLLM's boolean flags: --flag / --no-flag
            args.append(flag if value else "--no-" + flag.removeprefix("--"))
        elif value not in (None, ""):  # a [config] read back from an older cell.toml may lack a key
            args += [flag, str(value)]
    return args + [str(a) for a in config.get("extra_args", [])]


def serve_argv(config: Mapping[str, Any], prefix: Sequence[str] = ("vllm", "serve")) -> list[str]:
    """The one builder of a serve command line: the engine command, MODEL, then the cell's flags."""
    return [str(a) for a in prefix] + [str(config.get("model", ""))] + server_args(config)


def launch_argv(config: CellConfig, host_vars: Mapping[str, Any]) -> list[str]:
    """The full server command on a host: serve_argv, then bind and port."""
    # process: the engine command; docker: the command after the image (NVIDIA's image runs `vllm serve`;
    # the simulator's image has it as its entrypoint, so its hosts set spark_serve_cmd: [])
    prefix = host_vars.get("spark_serve_cmd", ["vllm", "serve"])
    bind = str(host_vars.get("spark_bind_host", "127.0.0.1"))
    port = str(host_vars.get("spark_port", 8000))
    return serve_argv(config.to_dict(), prefix) + ["--host", bind, "--port", port]


def plan_cells(spec: Spec, host: str, facts: Facts, host_vars: Mapping[str, Any]) -> list[Cell]:
    """One cell per combination of the spec's axes (design.combinations: checkpoint × backends × image × env
    variant × server settings, narrowed by its includes and exclusions), with its environment for this host."""
    axes = spec.axes()
    shown = [a for a in design.varying(axes) if a not in _LABELLED]
    cells = []
    for combo in design.combinations(axes, spec.design.include, spec.design.exclude):
        cell = _cell(spec, host, facts, host_vars, combo)
        cell.axes_label = " ".join(f"{a}={_label_value(combo[a])}" for a in shown)
        cells.append(cell)
    starts = [start for k in range(1, spec.server_starts + 1) for start in (nth_start(c, k) for c in cells)]
    return eager_starts(starts, host_vars) if spec.correctness.eager_start else starts


def eager_starts(cells: list[Cell], host_vars: Mapping[str, Any]) -> list[Cell]:
    """After each cell with CUDA graphs (no --enforce-eager), a probe-only start of the same configuration with
    --enforce-eager: its outputs are the graphs path's yardstick (judging/correctness.py), without the windows a
    twin cell of the matrix would measure. A configuration the matrix already runs eager needs none; one per
    configuration (its first server start)."""
    eager_rest = {_key(without_eager(c.config.to_dict())) for c in cells if EAGER in c.config.server.extra_args}
    out = []
    for cell in cells:
        out.append(cell)
        c = cell.config
        rest = _key(without_eager(c.to_dict()))
        if EAGER in c.server.extra_args or c.server_start != 1 or cell.reference_of or rest in eager_rest:
            continue
        server = replace(c.server, extra_args=[*c.server.extra_args, EAGER])
        config = replace(c, server=server, probe_only=True)
        twin = replace(cell, id=cell_id(config, cell.env), config=config, notes=list(cell.notes))
        twin.argv = launch_argv(config, host_vars)
        out.append(twin)
    return out


def without_eager(table: Mapping[str, Any]) -> dict[str, Any]:
    """A [config] table as its CUDA-graphs self: --enforce-eager and the checks-only mark left out. The one test of
    "the same configuration but eager" (here, and the graphs path's twin in judging/correctness.py)."""
    out = dict(table)
    out["extra_args"] = [a for a in table.get("extra_args") or [] if a != EAGER]
    out.pop("probe_only", None)
    return out


def _key(table: Mapping[str, Any]) -> str:
    return json.dumps(table, sort_keys=True, default=str)


def nth_start(cell: Cell, k: int) -> Cell:
    """The k-th independent server start of a planned cell: its own id (start 1 keeps the cell's), run folder and
    server log. plan_cells lists every cell's start k before any start k+1, so a host runs A1 B1 A2 B2: drift over
    time falls on every config alike instead of posing as a difference between them."""
    if k == 1:
        return cell
    config = replace(cell.config, server_start=k)
    return replace(cell, id=cell_id(config, cell.env), config=config, notes=list(cell.notes))


SCHEDULE_FIELDS = ("server_start", "concurrency", "repeats")  # how a start was measured, not what it served


def start_key(cell_or_config: Mapping[str, Any]) -> str:
    """What the starts of one config share: its [config] table without its schedule (host and sweep aside). tune
    measures one config's starts on different schedules (a start's levels and windows per step), and every
    window says its own level, so the schedule is not part of what was served."""
    return json.dumps(
        {k: v for k, v in cell_or_config.items() if k not in SCHEDULE_FIELDS}, sort_keys=True, default=str
    )


_LABELLED = ("checkpoint", *BACKEND_FIELDS, "speculative")  # already in Cell.label


def _label_value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + " ".join(str(v) for v in value) + "]"
    if isinstance(value, str) and "@sha256:" in value:
        return value.split("@", 1)[1][:19]  # sha256: + 12 hex
    return str(value) if value != "" else "none"


def _cell(spec: Spec, host: str, facts: Facts, host_vars: Mapping[str, Any], combo: Mapping[str, Any]) -> Cell:
    ckpt = next(c for c in spec.checkpoints if c.name == combo["checkpoint"])
    server = replace(spec.server, **{k: combo[k] for k in spec.design.server})
    speculative, notes = envrules.speculative_defaults(ckpt.quant, server.speculative)
    config = CellConfig(
        image=combo["image"],
        runtime=str(host_vars.get("spark_runtime", "docker")),
        checkpoint=ckpt.name,
        model=ckpt.model,
        quant=ckpt.quant,
        moe_backend=_auto(combo["moe_backend"]),
        linear_backend=_auto(combo["linear_backend"]),
        attention_backend=_auto(combo["attention_backend"]),
        server=replace(server, speculative=speculative, extra_args=list(server.extra_args)),
        load=spec.load,
        concurrency=list(spec.concurrency),
        duration_s=spec.duration_s,
        warmup=spec.warmup,
        repeats=spec.repeats,
        env_variant=combo["env"],
        extra_args_name=spec.design.arg_names.get(arg_key(list(server.extra_args)), ""),
        warmup_max=spec.warmup_max,
        warmup_tolerance=spec.warmup_tolerance,
    )
    overrides = {**spec.env, **spec.design.env.get(combo["env"], {})}  # a variant's overrides win over [env]
    resolved = envrules.resolve_env(facts, ckpt.quant, spec.vllm_version, overrides)
    redact.remember_secrets(resolved.env)  # masked wherever it shows up later, e.g. echoed in a server log
    cell = Cell(
        id=cell_id(config, resolved.env),
        sweep=spec.name,
        host=host,
        config=config,
        env=resolved.env,
        provenance=resolved.provenance,
        notes=list(resolved.warnings) + notes,
        rules_applied=notes,
    )
    cell.argv = launch_argv(config, host_vars)
    cell.host_env = simulator_env(spec, facts)
    cell.telemetry = spec.telemetry
    cell.correctness = spec.correctness
    if facts.get("simulated"):  # inventory host vars: the simulated Spark's options; the spec's vllm_version wins
        cell.host_env = {**simulator_clock(host, host_vars), **cell.host_env}
    return cell


# Per-host simulator options, inventory host vars of their own: a host's own `spark_serve_env` would replace the
# group's (Ansible's precedence: the PYTHONPATH the simulator needs goes with it), these add to it.
SIM_NUMBERS = {  # host var -> (simulator env variable, upper bound, what it is)
    "spark_sim_time_scale": ("SPARK_SIM_TIME_SCALE", 10_000.0, "the accelerated clock"),
    "spark_sim_speed": ("SPARK_SIM_SPEED", 10.0, "this host's speed against a typical one (0.95: 5% slower)"),
}


def simulator_clock(host: str, host_vars: Mapping[str, Any]) -> dict[str, str]:
    """spark_sim_startup (fixed | calibrated), spark_sim_time_scale (0 < K <= 10000), spark_sim_speed (0 < F <= 10)
    and spark_sim_vllm_version (the vLLM version its log shows, e.g. 0.21.0) of a simulated host."""
    out = {}
    startup = host_vars.get("spark_sim_startup")
    if startup not in (None, ""):
        if startup not in ("fixed", "calibrated"):
            raise UserError(f"host {host}: spark_sim_startup must be fixed or calibrated, not {str(startup)[:40]!r}")
        out["SPARK_SIM_STARTUP"] = str(startup)
    version = host_vars.get("spark_sim_vllm_version")
    if version not in (None, ""):
        if not isinstance(version, str) or not VERSION.match(version):  # a YAML number (0.20) loses its zeros
            raise UserError(
                f'host {host}: spark_sim_vllm_version must be a version in quotes such as "0.21.0", '
                f"not {str(version)[:40]!r}"
            )
        out["SPARK_SIM_VLLM_VERSION"] = version
    for var, (env, top, what) in SIM_NUMBERS.items():
        given = host_vars.get(var)
        if given in (None, ""):
            continue
        try:
            value = float(given)
        except (TypeError, ValueError):
            value = math.nan
        if not 0 < value <= top:
            raise UserError(f"host {host}: {var} must be a number in (0, {top:g}] ({what}), not {str(given)[:40]!r}")
        out[env] = repr(value)
    return out


def simulator_env(spec: Spec, facts: Facts) -> dict[str, str]:
    """A simulated host plays the chip its facts report, and the vLLM version the spec says its image has."""
    if not facts.get("simulated"):
        return {}
    env = {"SPARK_SIM_HARDWARE": str(facts.get("arch") or "gb10")}
    if spec.vllm_version:
        env["SPARK_SIM_VLLM_VERSION"] = spec.vllm_version
    return env


def spec_warnings(spec: Spec) -> list[str]:
    """Warnings that need no host, said before anything is touched: one per rule, naming every checkpoint it is
    about. What a rule fills in by itself is a plan note, not a warning (the cells record it)."""
    said: dict[str, list[str]] = {}
    speculatives = spec.design.server.get("speculative", [spec.server.speculative])
    for ckpt in spec.checkpoints:
        for speculative in speculatives:
            for w in envrules.speculative_warnings(ckpt.quant, speculative, applied=False):
                names = said.setdefault(w, [])
                if ckpt.name not in names:
                    names.append(ckpt.name)
    return [f"{', '.join(names)}: {w}" for w, names in said.items()]
