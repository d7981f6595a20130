"""The command line: `vllm serve`'s flags (unknown ones accepted and echoed) plus --sim-* / SPARK_SIM_* settings."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import answers, calibration


class UsageError(Exception):
    """A bad command line: printed like argparse does, exit code 2."""


# vLLM flags the simulator understands: name -> converter.
VLLM_FLAGS = {
    "model": str,
    "host": str,
    "port": int,
    "served_model_name": str,
    "moe_backend": str,
    "linear_backend": str,
    "attention_backend": str,
    "speculative_config": "json",
    "gpu_memory_utilization": float,
    "max_model_len": int,
    "max_num_seqs": int,
    "load_format": str,
    "kv_cache_dtype": str,
}
CRASH_KINDS = ("cuda", "oom", "kill")
FLAG_SINCE = {"moe_backend": "moe_backends", "linear_backend": "linear_backends", "attention_backend": "attention"}

# --sim-* flag -> (SPARK_SIM_* variable, converter, default). Faults default to off.
SIM_FLAGS = {
    "vllm_version": (str, None),
    "hardware": (str, "gb10"),
    "seed": (int, None),
    "rate": (str, "calibrated"),
    "startup_s": (float, None),
    "log_interval": (float, None),
    "crash_after": (float, None),  # fault: the engine dies N s after startup completes
    "crash_at_request": (int, 0),  # fault: the engine dies mid-stream of its Nth completion request (0 = never)
    "crash_kind": (str, "cuda"),  # how a crash fault dies: cuda | oom | kill (SIGKILL, no last words)
    "crash_backend": (str, ""),  # crash faults fire only when this MoE backend loaded ("" = any)
    "slow_start": (float, 0.0),  # fault: N s more before the server is up
    "startup": (str, "fixed"),  # fixed: startup_s in all | calibrated: the [startup] phases of calibration.toml
    "time_scale": (float, 1.0),  # the accelerated clock: rates and the calibrated startup run K times faster
    "health_hang": ("bool", False),  # fault: /health never answers
    "oom": ("bool", False),  # fault: CUDA OOM while loading weights
    # fault: TARGET:RATE or TARGET:late@N (several: comma-separated), TARGET a MoE backend, draft (speculative
    # decoding on) or graph (not --enforce-eager): loops or noise on RATE of prompts, or on every output from token N
    "wrong_output": (str, ""),
    "drop_streams": (float, 0.0),  # fault: this fraction of streams is cut mid-response
    "silent_fallback": (str, ""),  # fault: the named MoE backend loads whatever was requested
    "throttle_after": (float, None),  # fault: the GPU throttles (thermal) after N s of busy time (sim/gpu.py)
    "jit_s": (float, 0.0),  # fault: the first S s of serving compile kernels: JIT lines, slower (sim/jit.py)
    "speed": (float, 1.0),  # this machine's speed against a typical one (0.95: a host 5% slower; host effects)
    "start_noise": (float, None),  # between-start noise (0.1: +-10% a start); None: the hardware's (calibration.toml)
}


@dataclass
class Options:
    model: str = ""
    served_model_name: str = ""
    host: str = "127.0.0.1"  # vLLM binds all interfaces; the simulator stays on loopback unless told
    port: int = 8000
    moe_backend: str = ""
    linear_backend: str = ""
    attention_backend: str = ""
    speculative_config: dict | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int = 262144
    max_num_seqs: int = 256
    kv_cache_dtype: str = ""  # "" = auto
    load_format: str = "auto"  # dummy: random weights, every answer noise (as a real server's)
    given: dict = field(default_factory=dict)  # vLLM's "non-default args", in command-line order
    sim: dict = field(default_factory=dict)


def _convert(name: str, kind, text):
    try:
        if kind == "json":
            return json.loads(text)
        if kind == "bool":
            return str(text).lower() in ("1", "true", "yes", "on")
        return kind(text)
    except (ValueError, json.JSONDecodeError):
        raise UsageError(f"argument --{name.replace('_', '-')}: invalid value: {text!r}") from None


def _loose_value(text: str):
    """An unknown flag's value, typed the way vLLM's argparse would most likely type it."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _split(argv: list[str]) -> tuple[list[str], list[tuple[str, object]]]:
    """argv -> (positionals, [(flag_name, raw value or True)])."""
    positionals: list[str] = []
    flags: list[tuple[str, object]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            positionals.append(token)
            i += 1
            continue
        name, eq, value = token[2:].partition("=")
        name = name.replace("-", "_")
        if eq:
            flags.append((name, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            flags.append((name, argv[i + 1]))
            i += 1
        else:
            flags.append((name, True))
        i += 1
    return positionals, flags


def _sim_settings(flags: list[tuple[str, object]], env: Mapping[str, str]) -> dict:
    cal = calibration.load()
    sim = {}
    for name, (kind, default) in SIM_FLAGS.items():
        raw = env.get("SPARK_SIM_" + name.upper())
        sim[name] = default if raw in (None, "") else _convert("sim_" + name, kind, raw)
    for name, value in flags:
        if name.startswith("sim_"):
            key = name[4:]
            if key not in SIM_FLAGS:
                raise UsageError(f"unrecognized arguments: --{name.replace('_', '-')}")
            sim[key] = _convert(name, SIM_FLAGS[key][0], value)
    sim["vllm_version"] = sim["vllm_version"] or cal["default_vllm_version"]
    sim["startup_s"] = cal["startup_s"] if sim["startup_s"] is None else sim["startup_s"]
    sim["log_interval"] = sim["log_interval"] or cal["log_interval_s"]
    _check_sim(sim, cal)
    return sim


def _check_sim(sim: dict, cal: dict) -> None:
    low, high = cal["supported_versions"]
    try:
        version_ok = calibration.at_least(sim["vllm_version"], low) and not calibration.at_least(
            sim["vllm_version"], f"0.{int(high.split('.')[1]) + 1}"
        )
    except ValueError:
        version_ok = False
    if not version_ok:
        raise UsageError(f"--sim-vllm-version {sim['vllm_version']}: choose a version from {low} to {high}")
    if sim["hardware"] not in cal["hardware"]:
        raise UsageError(f"--sim-hardware {sim['hardware']}: choose one of {', '.join(cal['hardware'])}")
    if sim["rate"] not in ("calibrated", "unlimited"):
        raise UsageError(f"--sim-rate {sim['rate']}: choose calibrated or unlimited")
    if sim["crash_kind"] not in CRASH_KINDS:
        raise UsageError(f"--sim-crash-kind {sim['crash_kind']}: choose one of {', '.join(CRASH_KINDS)}")
    if not 0.05 <= sim["speed"] <= 20:
        raise UsageError(f"--sim-speed {sim['speed']}: give a factor from 0.05 to 20 (1 = a typical machine)")
    if sim["start_noise"] is not None and not 0 <= sim["start_noise"] <= 1:
        raise UsageError(f"--sim-start-noise {sim['start_noise']}: give a spread from 0 to 1 (0.10 = 10%)")
    if sim["wrong_output"]:
        try:
            answers.parse_faults(sim["wrong_output"])
        except ValueError:
            raise UsageError(
                f"--sim-wrong-output {sim['wrong_output']}: give TARGET:RATE or TARGET:late@N, e.g. marlin:0.5 "
                "(RATE from 0 to 1), draft:late@6000 or graph:1 (TARGET: a MoE backend, draft or graph)"
            ) from None
    if not 0 <= sim["jit_s"] <= 86_400:
        raise UsageError(f"--sim-jit-s {sim['jit_s']}: give seconds from 0 to 86400 (0 = off)")
    if sim["crash_at_request"] < 0:
        raise UsageError(f"--sim-crash-at-request {sim['crash_at_request']}: give a request number >= 1 (0 = off)")


def parse(argv: list[str], env: Mapping[str, str] | None = None) -> Options:
    """`serve MODEL [flags]` (the leading `serve` already removed) -> Options."""
    positionals, flags = _split(argv)
    opts = Options(sim=_sim_settings(flags, os.environ if env is None else env))
    if len(positionals) > 1:
        raise UsageError(f"unrecognized arguments: {' '.join(positionals[1:])}")
    if positionals:
        opts.model = positionals[0]
        opts.given["model_tag"] = opts.model
    for name, value in flags:
        if name.startswith("sim_"):
            continue
        _apply_flag(opts, name, value)
    if not opts.model:
        raise UsageError("the following arguments are required: model_tag")
    opts.given.setdefault("model", opts.model)
    opts.served_model_name = opts.served_model_name or opts.model
    return opts


def _apply_flag(opts: Options, name: str, value) -> None:
    cal = calibration.load()
    if name in FLAG_SINCE and not calibration.at_least(opts.sim["vllm_version"], cal[FLAG_SINCE[name]]["flag_since"]):
        raise UsageError(f"unrecognized arguments: --{name.replace('_', '-')}")
    if name not in VLLM_FLAGS:
        opts.given[name] = _loose_value(value) if isinstance(value, str) else value
        return
    if value is True:
        raise UsageError(f"argument --{name.replace('_', '-')}: expected one argument")
    converted = _convert(name, VLLM_FLAGS[name], value)
    setattr(opts, name, converted)
    opts.given[name] = converted
