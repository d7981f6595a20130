"""What a `vllm serve` command line does on the chosen chip: which backends load, or where startup fails.

Pure: (Options, environment) -> Plan. The startup module turns a Plan into log lines; the rate model uses it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from ..hostside import facts as hostfacts
from ..hostside import memplan, safetensors
from ..hostside.contracts import DeviceMemory, MemoryPlan, ModelMemory
from . import calibration
from .options import Options

# Where in startup a failure strikes (the order vLLM gets there).
STAGES = ("model", "memory_check", "flashinfer_import", "moe_select", "weights", "draft", "compile", "profile", "kv")


@dataclass
class Failure:
    key: str  # a [failures.*] table
    stage: str  # one of STAGES
    fields: dict = field(default_factory=dict)


@dataclass
class Plan:
    checkpoint: str = ""
    quant: str = ""
    version: str = ""
    hardware: str = ""
    moe_loaded: str = ""  # backend key, e.g. "marlin"
    moe_candidates: list = field(default_factory=list)
    attention: str = ""  # enum name
    attention_explicit: bool = False
    linear_backend: str = ""
    spec_tokens: int = 0  # 0 = no speculative decoding
    spec_method: str = ""
    gpu_memory_utilization: float = 0.9
    kv_tokens: int = 0
    unknown_env: list = field(default_factory=list)
    failure: Failure | None = None
    draft_moe: str = ""  # the MoE backend an unquantized (BF16) draft head loaded with; "" = none or the target's
    memory: MemoryPlan | None = None  # hostside/memplan: what the log says it loaded and what KV cache is left


def _fail(plan: Plan, key: str, stage: str, **fields) -> Plan:
    if plan.failure is None or STAGES.index(stage) < STAGES.index(plan.failure.stage):
        plan.failure = Failure(key, stage, fields)
    return plan


def unknown_env(version: str, env: dict) -> list[str]:
    """VLLM_* variables this version does not know (it warns about each, 0.17+)."""
    cal = calibration.load()["versions"]
    known = set(cal["known_env"]) | {
        n for n, life in cal["env_lifetime"].items() if calibration.in_lifetime(version, life)
    }
    return sorted(n for n in env if n.startswith("VLLM_") and n not in known)


def env_known(version: str, name: str) -> bool:
    cal = calibration.load()["versions"]
    life = cal["env_lifetime"].get(name)
    return name in cal["known_env"] or (life is not None and calibration.in_lifetime(version, life))


def _available(version: str, backend: str, quant: str) -> bool:
    mb = calibration.load()["moe_backends"]
    since = mb["since"].get(backend, mb["flag_since"] if backend not in ("marlin", "triton", "deep_gemm") else "0.12")
    return backend in mb["accepted"][quant] and calibration.at_least(version, since)


def candidates(version: str, quant: str) -> list[str]:
    """vLLM's candidate list for the `Using ... MoE backend out of potential backends: [...]` line."""
    mb = calibration.load()["moe_backends"]
    return [mb["names"][b] for b in mb["accepted"][quant] if calibration.at_least(version, mb["since"].get(b, "0.12"))]


def _deep_gemm_allowed(plan: Plan, env: dict, hw: dict) -> bool:
    off = any(env.get(n) == "0" for n in ("VLLM_USE_DEEP_GEMM", "VLLM_MOE_USE_DEEP_GEMM"))
    return not off and calibration.at_least(plan.version, hw["deep_gemm_capable_since"])


def _auto_moe(plan: Plan, env: dict, hw: dict) -> str:
    table = hw["moe"][plan.quant]
    if (
        plan.quant == "nvfp4"
        and env.get("VLLM_USE_FLASHINFER_MOE_FP4") == "1"
        and env_known(plan.version, "VLLM_USE_FLASHINFER_MOE_FP4")
    ):
        return "flashinfer_cutlass"  # the pre-0.24 switch NVIDIA's card still sets
    for backend in hw["auto"][plan.quant]:
        if not _available(plan.version, backend, plan.quant) and backend != "deep_gemm":
            continue
        if backend == "deep_gemm" and not _deep_gemm_allowed(plan, env, hw):
            continue
        if backend == "deep_gemm" or "fails" not in table.get(backend, {"fails": "x"}):
            return backend  # deep_gemm counts itself capable on SM12x from 0.24 (facts), then faults
    return ""


def _select_moe(plan: Plan, opts: Options, env: dict, hw: dict) -> None:
    cal = calibration.load()
    label = cal["quants"][plan.quant]["moe_label"]
    requested = opts.moe_backend.lower()
    if requested and not _available(plan.version, requested, plan.quant):
        expected = [b for b in cal["moe_backends"]["accepted"][plan.quant] if _available(plan.version, b, plan.quant)]
        _fail(plan, "bad_moe_value", "moe_select", backend=requested, moe_label=label, expected=expected)
        return
    chosen = requested or _auto_moe(plan, env, hw)
    if not chosen:
        _fail(plan, "no_moe_backend", "moe_select", moe_label=label)
        return
    fallback = opts.sim["silent_fallback"].lower()
    plan.moe_loaded = fallback if fallback in hw["moe"][plan.quant] else chosen
    entry = hw["moe"][plan.quant].get(plan.moe_loaded, {"fails": "no_moe_backend"})
    if plan.moe_loaded == "deep_gemm" and hw["deep_gemm_faults"]:
        _fail(plan, "deep_gemm_assert", "profile")
    elif "fails" in entry:
        _fail(
            plan,
            entry["fails"],
            "moe_select",
            moe_label=label,
            backend_enum=cal["moe_backends"]["names"][plan.moe_loaded],
        )


def _select_attention(plan: Plan, opts: Options, env: dict, hw: dict) -> None:
    valid = calibration.load()["attention"]["valid"]
    requested = opts.attention_backend or (
        env.get("VLLM_ATTENTION_BACKEND", "") if env_known(plan.version, "VLLM_ATTENTION_BACKEND") else ""
    )
    plan.attention = requested.upper() or hw["default_attention"]
    plan.attention_explicit = bool(requested)
    if plan.attention not in valid:
        _fail(plan, "bad_attention", "moe_select", backend=plan.attention)


def _uses(plan: Plan, package: str) -> bool:
    """Does anything this server loads come from FlashInfer / the CuTe DSL?"""
    cal = calibration.load()
    moe = plan.moe_loaded in cal["moe_backends"]["uses"][package]
    linear = plan.linear_backend.startswith("flashinfer") and (package == "flashinfer" or "b12x" in plan.linear_backend)
    attention = package == "flashinfer" and plan.attention in cal["attention"]["uses_flashinfer"]
    return moe or linear or attention


def _check_env(plan: Plan, env: dict, hw: dict) -> None:
    if not hw.get("env_checks"):
        return
    stages = {"flashinfer": "flashinfer_import", "cute_dsl": "compile"}
    for name, check in calibration.load()["env_checks"].items():
        if _uses(plan, check["uses"]) and env.get(name) != check["needs"]:
            _fail(plan, check["failure"], stages[check["uses"]])


def _check_spec(plan: Plan, opts: Options, ckpt: dict) -> None:
    spec = opts.speculative_config
    if not spec:
        return
    plan.spec_method = str(spec.get("method", "mtp"))
    plan.spec_tokens = int(spec.get("num_speculative_tokens", 1))
    if ckpt["draft_dtype"] != "bf16":
        return  # a quantized draft head loads with the target's backend
    draft_backend = str(spec.get("moe_backend") or plan.moe_loaded).lower()
    accepted = calibration.load()["moe_backends"]["accepted"]["unquantized"]
    if draft_backend not in accepted or draft_backend != "triton":
        _fail(plan, "draft_moe_unquantized", "draft", backend=draft_backend, expected=accepted)
    else:
        plan.draft_moe = draft_backend


def device_memory(hardware: str) -> DeviceMemory:
    """The memory the simulated chip has (calibration.toml [hardware.*]); unified where gpus.toml says so. The
    controller plans a simulated host's cells on the same figures (planning/memory.device_memory)."""
    hw = calibration.load()["hardware"].get(hardware, {})
    kind = str(hostfacts.load_gpu_rules().get(hardware, {}).get("memory_kind", ""))
    return DeviceMemory(
        kind="unified" if "unified" in kind else "discrete",
        total_gib=float(hw.get("mem_total_gib", 0.0)),
        free_gib=float(hw.get("mem_free_gib", -1.0)),
        source="the simulator's calibration",
    )


def model_memory(model: str, ckpt: dict, quant: str) -> ModelMemory:
    """A checkpoint folder with a config.json is read as the controller reads it on a host (hostside/memplan);
    a calibration key (no folder) has the calibration's weights and KV bytes per token."""
    if os.path.isfile(os.path.join(os.path.expanduser(model), "config.json")):
        with contextlib.suppress(safetensors.CheckpointError, OSError):
            return memplan.model_memory(model)
    return memplan.simulated(ckpt["weights_gib"], calibration.load()["quants"][quant]["kv_bytes_per_token"])


def _check_memory(plan: Plan, opts: Options, ckpt: dict, hw: dict) -> None:
    """What vLLM refuses, from the same memory plan the controller makes before the start (hostside/memplan)."""
    util = plan.gpu_memory_utilization
    mem = memplan.plan(
        model_memory(opts.model, ckpt, plan.quant),
        device_memory(plan.hardware),
        gpu_memory_utilization=util,
        max_model_len=opts.max_model_len,
        max_num_seqs=opts.max_num_seqs,
        kv_cache_dtype=opts.kv_cache_dtype,
        speculative=bool(opts.speculative_config),
        moe_backend=plan.moe_loaded,
    )
    plan.memory = mem
    common = {
        "mem_total_gib": hw["mem_total_gib"],
        "mem_free_gib": hw["mem_free_gib"],
        "util": util,
        "wanted_gib": mem["budget_gib"],
        "weights_gib": mem["weights_gib"],
        "max_model_len": opts.max_model_len,
    }
    if mem["budget_gib"] > hw["mem_free_gib"]:
        _fail(plan, "uma_free_memory", "memory_check", **common)
        return
    if opts.sim["oom"]:
        _fail(plan, "oom", "weights", **common)
    if mem["kv_gib"] <= 0:
        _fail(plan, "no_cache_memory", "kv", **common)
        return
    plan.kv_tokens = mem["kv_tokens"]
    if mem["fit_seqs"] < 1:
        _fail(
            plan,
            "kv_too_small",
            "kv",
            **common,
            kv_gib=mem["kv_gib"],
            fit_tokens=mem["fit_model_len"],
            needed_gib=round(mem["request_gib"], 2),
        )


def _default_util(version: str) -> float:
    table = calibration.load()["versions"]["gpu_util_default"]
    return [
        v
        for since, v in sorted(table.items(), key=lambda kv: calibration.version_tuple(kv[0]))
        if calibration.at_least(version, since)
    ][-1]


def make_plan(opts: Options, env: dict) -> Plan:
    cal = calibration.load()
    sim = opts.sim
    hw = cal["hardware"][sim["hardware"]]
    plan = Plan(
        version=sim["vllm_version"],
        hardware=sim["hardware"],
        linear_backend=opts.linear_backend.lower(),
        unknown_env=unknown_env(sim["vllm_version"], env),
    )
    plan.gpu_memory_utilization = opts.gpu_memory_utilization or _default_util(plan.version)
    plan.checkpoint = calibration.resolve_checkpoint(opts.model) or ""
    if not plan.checkpoint:
        return _fail(plan, "unknown_model", "model", model=opts.model)
    ckpt = cal["checkpoints"][plan.checkpoint]
    plan.quant = ckpt["quant"]
    plan.moe_candidates = candidates(plan.version, plan.quant)
    _select_attention(plan, opts, env, hw)
    _select_moe(plan, opts, env, hw)
    # a chip measured on real vLLM states its own lists (calibration: hardware.h200); auto's omits what auto skips
    own = hw.get(f"{plan.quant}_moe_candidates" + ("" if opts.moe_backend else "_auto"))
    if own:
        plan.moe_candidates = list(own)
    _check_env(plan, env, hw)
    _check_spec(plan, opts, ckpt)
    _check_memory(plan, opts, ckpt, hw)
    return plan
