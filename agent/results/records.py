"""The records of the results tree, typed: cell.toml (CellRecord) and cNNN-rK.toml (MeasurementRecord).

to_toml() gives the table exactly as docs/results-tree.md describes it (and as schema 1 trees hold it); from_toml()
reads it back, older trees included (a key recorded later takes its default). What a host produced keeps its
host-side type (agent/hostside/contracts.py). Readers that only look values up (stats, reports, export) may
still read the plain tables of tree.load_cells.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, cast

from agent.hostside import loadpoints
from agent.hostside.contracts import (
    Attestation,
    Correctness,
    Facts,
    Measurement,
    MemoryRecord,
    RayNodeReport,
    StartupBreakdown,
)
from agent.planning.envrules import EnvProvenance
from agent.planning.matrix import CellConfig, CheckpointInfo
from agent.results.tree import SCHEMA, run_name


@dataclass
class Launch:
    argv: list[str]  # the server command line the controller planned
    command: str  # the exact launch line (the host's launch.txt when it wrote one)


@dataclass
class CellRecord:
    """cell.toml: a finished cell. Written last; its presence means the cell is done (resume skips it)."""

    cell_id: str
    sweep: str
    host: str  # inventory_hostname
    status: str  # done | failed (the server never became ready)
    verdict: str  # valid | invalid | failed
    config: CellConfig
    verdict_reasons: list[str] = field(default_factory=list)
    verdict_evidence: list[str] = field(default_factory=list)
    verdict_notes: list[str] = field(default_factory=list)
    failure_class: str = ""  # "" when none
    failure_evidence: list[str] = field(default_factory=list)
    failure_root_cause: str = ""
    startup_s: float = 0.0
    runs_collected: int = 0
    started_at: str = ""
    finished_at: str = ""
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # plan warnings and rule notes
    env: dict[str, str] = field(default_factory=dict)
    env_provenance: list[EnvProvenance] = field(default_factory=list)
    launch: Launch = field(default_factory=lambda: Launch([], ""))
    facts: Facts = field(default_factory=lambda: Facts())
    checkpoint_info: CheckpointInfo = field(default_factory=lambda: CheckpointInfo())
    attestation: Attestation | dict[str, Any] = field(default_factory=dict)  # {} when the log said nothing
    measure_s: float = 0.0  # the load driver's time on the host (windows, warmups, scrapes)
    died: dict[str, Any] = field(default_factory=dict)  # [died]: when and how the server died mid-cell ({} if not)
    schema: int = SCHEMA
    startup: StartupBreakdown | dict[str, Any] = field(default_factory=dict)  # [startup]: hostside/startuplog
    nodes: list[RayNodeReport] = field(default_factory=list)  # [[nodes]]: a multi-node cell's nodes (none: 1 node)
    correctness: Correctness | dict[str, Any] = field(default_factory=dict)  # [correctness]: the probe, scored
    run_started: str = ""  # the start of the sweep run it was measured in (sweep.toml as it landed): the store's key
    memory: MemoryRecord | dict[str, Any] = field(default_factory=dict)  # [memory]: planned beside logged ({}: no plan)

    # the order of cell.toml's keys (TOML writes the tables after the plain keys in any case)
    _ORDER = (
        "schema",
        "cell_id",
        "sweep",
        "host",
        "status",
        "verdict",
        "verdict_reasons",
        "verdict_evidence",
        "verdict_notes",
        "failure_class",
        "failure_evidence",
        "failure_root_cause",
        "startup_s",
        "runs_collected",
        "started_at",
        "finished_at",
        "run_started",
        "elapsed_s",
        "notes",
        "config",
        "env",
        "env_provenance",
        "launch",
        "facts",
        "checkpoint_info",
        "attestation",
        "measure_s",
        "died",
        "startup",
        "nodes",
        "correctness",
        "memory",
    )

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self._ORDER:
            value = getattr(self, name)
            if name == "config":
                value = self.config.to_dict()
            elif name == "launch":
                value = {"argv": list(self.launch.argv), "command": self.launch.command}
            elif name in ("died", "nodes", "correctness", "memory") and not value:
                continue  # only a cell whose server died has the table
            out[name] = value
        return out

    @classmethod
    def from_toml(cls, table: Mapping[str, Any]) -> CellRecord:
        """A cell.toml table; ValueError naming the key when it is not one (a key this version does not know,
        a required key missing, a table that is no table)."""
        known = {f.name for f in fields(cls)}
        unknown = set(table) - known
        if unknown:
            raise ValueError(f"cell.toml: unknown key(s) {', '.join(sorted(unknown))}")
        values = dict(table)
        for key in (
            "config",
            "launch",
            "env",
            "facts",
            "checkpoint_info",
            "attestation",
            "died",
            "startup",
            "correctness",
            "memory",
        ):
            if key in values and not isinstance(values[key], dict):
                raise ValueError(f"cell.toml: [{key}] must be a table")
        try:
            values["config"] = CellConfig.from_dict(values["config"])
        except KeyError:
            raise ValueError("cell.toml: no [config] table") from None
        except ValueError as exc:
            raise ValueError(f"cell.toml: [config]: {exc}") from None
        if "launch" in values:
            launch = values["launch"]
            values["launch"] = Launch(list(launch.get("argv", [])), str(launch.get("command", "")))
        for key in ("facts", "checkpoint_info", "attestation", "env", "died", "startup", "correctness", "memory"):
            if key in values:
                values[key] = dict(values[key])
        try:
            return cls(**values)
        except TypeError as exc:  # a required key is missing
            raise ValueError(f"cell.toml: {exc}") from None


@dataclass
class MeasurementRecord:
    """cNNN-rK.toml: one measured window of a cell: the host's window (keys as in `vllm bench serve` JSON where
    the meaning is the same) with the cell it belongs to."""

    cell_id: str
    window: Measurement
    schema: int = SCHEMA

    @property
    def name(self) -> str:
        """The file name: c008-r1.toml for concurrency 8, repeat 1; q2-c008-d8192-r1.toml at 2 req/s and a context
        depth of 8192 (hostside/loadpoints.py)."""
        point = self.point
        return run_name(point.concurrency, self.window["repeat"], point.rate, point.depth)

    @property
    def point(self) -> loadpoints.Point:
        """The load point the window measured (rate, depth, concurrency)."""
        return loadpoints.of_window(self.window)

    def to_toml(self) -> dict[str, Any]:
        return {**self.window, "schema": self.schema, "cell_id": self.cell_id}

    @classmethod
    def from_toml(cls, table: Mapping[str, Any]) -> MeasurementRecord:
        """A cNNN-rK.toml table; ValueError naming what a window lacks."""
        window = {k: v for k, v in table.items() if k not in ("schema", "cell_id")}
        missing = sorted(set(Measurement.__required_keys__) - set(window))
        if missing or "cell_id" not in table:
            raise ValueError(f"measurement: missing {', '.join(missing or ['cell_id'])}")
        return cls(cell_id=str(table["cell_id"]), window=cast(Measurement, window), schema=int(table.get("schema", 1)))
