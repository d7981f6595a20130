"""Spec × host → cells. A cell is one server configuration; all its concurrency levels share one server.

A cell's id is a content hash of everything that changes the result: image digest, checkpoint, flags, load, env.
Host plumbing (bind address, port, paths) is left out, so the same cell on another host has the same id.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.planning import envrules
from agent.planning.spec import Checkpoint, Spec

BACKEND_FIELDS = ("moe_backend", "linear_backend", "attention_backend")  # the axes a sweep compares


@dataclass
class Cell:
    id: str
    sweep: str
    host: str
    config: dict[str, Any]  # the [config] table of cell.toml
    env: dict[str, str]  # the server's environment (rules + overrides)
    provenance: list[dict]  # the [[env_provenance]] rows
    notes: list[str] = field(default_factory=list)  # warnings and rule notes, shown before the run
    argv: list[str] = field(default_factory=list)  # the server command line on this host
    host_env: dict[str, str] = field(default_factory=dict)  # plumbing for this host's engine, not part of the id
    checkpoint_info: dict[str, Any] = field(default_factory=dict)  # from the weight headers on the host, if any

    @property
    def label(self) -> str:
        """ "uns-fast marlin attention=flashinfer spec=mtp": checkpoint, backend_label, speculative method."""
        c = self.config
        parts = [c["checkpoint"], backend_label(c)]
        if c["speculative"]:
            parts.append("spec=" + json.loads(c["speculative"]).get("method", "?"))
        return " ".join(parts)

    def playbook_vars(self) -> dict[str, Any]:
        """What cell.yml needs as `cell`."""
        c = self.config
        return {
            "id": self.id,
            "argv": self.argv,
            "image": c["image"],
            "model": c["model"],
            "concurrency": c["concurrency"],
            "duration_s": c["duration_s"],
            "warmup": c["warmup"],
            "repeats": c["repeats"],
            "prompt_len": c["prompt_len"],
            "output_len": c["output_len"],
            "profile": c["profile"],
            "seed": c["seed"],
            "host_env": self.host_env,
        }


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


def cell_id(config: dict[str, Any], env: dict[str, str]) -> str:
    canonical = json.dumps({"config": config, "env": env}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# [config] key -> its `vllm serve` flag, in command-line order; "" (auto / off) passes no flag.
SERVE_FLAGS = (
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("max_model_len", "--max-model-len"),
    ("max_num_seqs", "--max-num-seqs"),
    ("moe_backend", "--moe-backend"),
    ("linear_backend", "--linear-backend"),
    ("attention_backend", "--attention-backend"),
    ("speculative", "--speculative-config"),
)


def server_args(config: dict[str, Any]) -> list[str]:
    """`vllm serve` arguments after MODEL for a cell (no host/port: those are host plumbing)."""
    args = []
    for key, flag in SERVE_FLAGS:
        if config.get(key) not in (None, ""):  # a [config] read back from an older cell.toml may lack a key
            args += [flag, str(config[key])]
    return args + [str(a) for a in config.get("extra_args", [])]


def serve_argv(config: dict[str, Any], prefix: Sequence[str] = ("vllm", "serve")) -> list[str]:
    """The one builder of a serve command line: the engine command, MODEL, then the cell's flags."""
    return [str(a) for a in prefix] + [str(config.get("model", ""))] + server_args(config)


def launch_argv(config: dict[str, Any], host_vars: dict[str, Any]) -> list[str]:
    """The full server command on a host: serve_argv, then bind and port."""
    # process: the engine command; docker: the command after the image (NVIDIA's image runs `vllm serve`;
    # the simulator's image has it as its entrypoint, so its hosts set spark_serve_cmd: [])
    prefix = host_vars.get("spark_serve_cmd", ["vllm", "serve"])
    bind = str(host_vars.get("spark_bind_host", "127.0.0.1"))
    port = str(host_vars.get("spark_port", 8000))
    return serve_argv(config, prefix) + ["--host", bind, "--port", port]


def plan_cells(spec: Spec, host: str, facts: dict[str, Any], host_vars: dict[str, Any]) -> list[Cell]:
    """Every (checkpoint × moe × linear × attention) combination, with its environment for this host."""
    cells = []
    combos = itertools.product(spec.checkpoints, spec.moe_backends, spec.linear_backends, spec.attention_backends)
    for ckpt, moe, linear, attention in combos:
        cells.append(_cell(spec, host, facts, host_vars, ckpt, moe, linear, attention))
    return cells


def _cell(
    spec: Spec, host: str, facts: dict, host_vars: dict, ckpt: Checkpoint, moe: str, linear: str, attention: str
) -> Cell:
    speculative, notes = envrules.speculative_defaults(ckpt.quant, spec.server["speculative"])
    config = {
        "image": spec.image,
        "runtime": str(host_vars.get("spark_runtime", "docker")),
        "checkpoint": ckpt.name,
        "model": ckpt.model,
        "quant": ckpt.quant,
        "moe_backend": _auto(moe),
        "linear_backend": _auto(linear),
        "attention_backend": _auto(attention),
        "speculative": speculative,
        "gpu_memory_utilization": float(spec.server["gpu_memory_utilization"]),
        "max_model_len": spec.server["max_model_len"],
        "max_num_seqs": spec.server["max_num_seqs"],
        "extra_args": list(spec.server["extra_args"]),
        "prompt_len": spec.load["prompt_len"],
        "output_len": spec.load["output_len"],
        "profile": spec.load["profile"],
        "seed": spec.load["seed"],
        "concurrency": list(spec.concurrency),
        "duration_s": spec.duration_s,
        "warmup": spec.warmup,
        "repeats": spec.repeats,
    }
    resolved = envrules.resolve_env(facts, ckpt.quant, spec.vllm_version, spec.env)
    cell = Cell(
        id=cell_id(config, resolved.env),
        sweep=spec.name,
        host=host,
        config=config,
        env=resolved.env,
        provenance=resolved.provenance,
        notes=list(resolved.warnings) + notes,
    )
    cell.argv = launch_argv(config, host_vars)
    cell.host_env = simulator_env(spec, facts)
    return cell


def simulator_env(spec: Spec, facts: dict) -> dict[str, str]:
    """A simulated host plays the chip its facts report, and the vLLM version the spec says its image has."""
    if not facts.get("simulated"):
        return {}
    env = {"SPARK_SIM_HARDWARE": str(facts.get("arch") or "gb10")}
    if spec.vllm_version:
        env["SPARK_SIM_VLLM_VERSION"] = spec.vllm_version
    return env


def spec_warnings(spec: Spec) -> list[str]:
    """Warnings that need no host: said before anything is touched."""
    out = []
    for ckpt in spec.checkpoints:
        for w in envrules.speculative_warnings(ckpt.quant, spec.server["speculative"]):
            out.append(f"{ckpt.name}: {w}")
    return out
