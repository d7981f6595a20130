"""The memory plan of each cell on its host, before any start (hostside/memplan.py does the arithmetic).

device_memory: what a host's gpu_memory_utilization is a fraction of (GB10: unified memory, free now from
/proc/meminfo; a simulated host: the simulator's own figures). plan_cell: one cell on one host. refuse: the cells
vLLM would refuse to start, with the numbers and what to change; UserError (exit 2) when no cell is left.
record: the plan beside what the server logged, for cell.toml. Nothing here touches a host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.errors import UserError
from agent.escape import md
from agent.hostside import facts as hostfacts
from agent.hostside import memplan
from agent.hostside.contracts import DeviceMemory, Facts, MemoryLogged, MemoryPlan, MemoryRecord, ModelMemory
from agent.hostside.safetensors import CheckpointError
from agent.planning.matrix import Cell


def device_memory(facts: Facts) -> DeviceMemory:
    """The memory vLLM sees on this host. Unified (gpus.toml says so, or NVML reports none): MemTotal and, free
    now, MemAvailable. Discrete: the GPU's memory, free taken as all of it (the agent evicts before it serves)."""
    arch = str(facts.get("arch") or "")
    if facts.get("simulated"):  # the simulator plays the chip with its own memory (agent/sim/calibration.toml)
        from agent.sim.plan import device_memory as simulated

        return simulated(arch or "gb10")
    rules = hostfacts.load_gpu_rules().get(arch, {})
    gpu = float(facts.get("gpu_mem_gib", 0.0) or 0.0)
    if "unified" in str(rules.get("memory_kind", "")) or (gpu <= 0 and facts.get("gpu_name")):
        return DeviceMemory(
            kind="unified",
            total_gib=float(facts.get("mem_total_gib", 0.0) or 0.0),
            free_gib=float(facts.get("mem_available_gib", -1.0)),
            source="the host's MemTotal and MemAvailable",
        )
    if gpu > 0:
        return DeviceMemory(kind="discrete", total_gib=gpu, free_gib=gpu, source="nvidia-smi memory.total")
    return DeviceMemory(kind="unknown", total_gib=0.0, free_gib=-1.0, source="")


def model_memory(cell: Cell, facts: Facts) -> ModelMemory | None:
    """What provisioning read on the host; on a simulated host without a folder, the simulator's checkpoint (what
    it will log); None when nothing says."""
    if cell.model_memory is not None or not facts.get("simulated"):
        return cell.model_memory
    from agent.sim import calibration
    from agent.sim.plan import model_memory as simulated

    key = calibration.resolve_checkpoint(cell.config.model)
    if key is None:
        return None
    ckpt = calibration.load()["checkpoints"][key]
    return simulated(cell.config.model, ckpt, ckpt["quant"])


def local_model_memory(cell: Cell) -> ModelMemory | None:
    """A checkpoint folder on this machine (`env --host` without an inventory), read here; None if it is not one."""
    try:
        return memplan.model_memory(cell.config.model)
    except (CheckpointError, OSError):
        return None


def plan_cell(cell: Cell, facts: Facts) -> MemoryPlan:
    """The cell's plan on its host, from the ModelMemory provisioning read there (None: no folder to read)."""
    s = cell.config.server
    return memplan.plan(
        model_memory(cell, facts),
        device_memory(facts),
        gpu_memory_utilization=s.gpu_memory_utilization,
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        kv_cache_dtype=s.kv_cache_dtype,
        speculative=bool(s.speculative),
        world_size=s.tensor_parallel_size * s.pipeline_parallel_size,
        moe_backend=cell.config.moe_backend,
    )


def refuse(cells: Mapping[str, list[Cell]], facts: Mapping[str, Facts]) -> tuple[dict[str, list[Cell]], list[str]]:
    """Each cell's plan set on it; the cells vLLM would refuse to start are taken out, one line each with the
    numbers and what to change. No cell left anywhere: UserError (exit 2), before any server starts."""
    kept: dict[str, list[Cell]] = {}
    refused: dict[str, list[str]] = {}  # the line (hosts of a group plan the same cells) -> the hosts it is about
    for host, cs in cells.items():
        kept[host] = []
        for cell in cs:
            cell.memory_plan = plan_cell(cell, facts[host])
            if cell.memory_plan["fits"] == "no":
                refused.setdefault(refusal_line(cell), []).append(host)
            else:
                kept[host].append(cell)
    lines = [f"host {', '.join(hosts)}: {line}" for line, hosts in refused.items()]
    if lines and not any(kept.values()):
        raise UserError("no cell fits in memory, nothing was started: " + " | ".join(lines))
    return kept, lines


def refusal_line(cell: Cell) -> str:
    p = cell.memory_plan
    assert p is not None
    change = "; ".join(p["advice"])
    return f"cell {cell.id} ({cell.label}) does not fit: {p['problem']}" + (f"; change: {change}" if change else "")


def summary_line(p: MemoryPlan) -> str:
    """One line of the plan for people: weights, KV cache, the rest, against the budget."""
    if p["fits"] == "unknown":
        return f"memory plan: unknown ({p['problem']})"
    parts = ", ".join(f"{k} {v:.2f}" for k, v in p["weight_parts_gib"].items())
    return (
        f"memory plan ({p['device']}, {p['total_gib']:.1f} GiB"
        + (f", {p['free_gib']:.1f} free" if p["free_gib"] >= 0 and p["device"] == "unified" else "")
        + f"): {p['gpu_memory_utilization']} x {p['total_gib']:.1f} = {p['budget_gib']:.1f} GiB = weights "
        f"{p['weights_gib']:.2f}"
        + (f" ({parts})" if parts else "")
        + f" [{p['weights_source']}] + reserve {p['reserve_gib']} + KV {p['kv_gib']:.2f} GiB = "
        f"{p['kv_tokens']:,} tokens at {p['kv_bytes_per_token']:,} B/token ({p['kv_dtype']}); "
        f"{p['max_num_seqs']} x {p['max_model_len']} tokens need {p['batch_gib']:.2f} GiB: {p['fits']}"
    )


# ---------------------------------------------------------------- after the run: the plan beside the log


def record(p: MemoryPlan, attestation: Mapping[str, Any]) -> MemoryRecord:
    """[memory] of cell.toml: the plan, what the log said, the misses in percent (-1.0: nothing to compare)."""
    logged = MemoryLogged(
        weights_gib=float(attestation.get("model_load_gib", -1.0)),
        kv_gib=float(attestation.get("kv_cache_gib", -1.0)),
        kv_tokens=int(attestation.get("kv_cache_tokens", -1)),
    )
    return MemoryRecord(
        plan=p,
        logged=logged,
        weights_miss_pct=miss(p["weights_gib"], logged["weights_gib"]),
        kv_tokens_miss_pct=miss(p["kv_tokens"], logged["kv_tokens"]),
    )


def miss(planned: float, logged: float) -> float:
    return round(abs(planned - logged) / logged * 100, 2) if planned >= 0 and logged > 0 else -1.0


# The goal (issue 50): the plan within these of what vLLM logged; a larger miss is shown.
WEIGHTS_GOAL_PCT = 2.0
KV_TOKENS_GOAL_PCT = 10.0


def report_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown for the report: each cell's plan against the log, the misses past the goal marked. `cells` are
    cell.toml tables (tree.load_cells); cells without a [memory] table are left out."""
    rows = [c for c in cells if isinstance(c.get("memory"), Mapping) and c["memory"].get("plan")]
    if not rows:
        return []
    out = [
        "## Memory: planned before the start, logged by vLLM",
        "",
        f"Goal: weights within {WEIGHTS_GOAL_PCT:g}%, KV cache tokens within {KV_TOKENS_GOAL_PCT:g}% of the log.",
        "",
        "| host | cell | fits | weights planned / logged GiB | KV GiB planned / logged | KV tokens planned / logged | miss |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        m = c["memory"]
        p, lg = m["plan"], m.get("logged", {})
        misses = []
        for what, pct, goal in (
            ("weights", m.get("weights_miss_pct", -1.0), WEIGHTS_GOAL_PCT),
            ("KV tokens", m.get("kv_tokens_miss_pct", -1.0), KV_TOKENS_GOAL_PCT),
        ):
            if pct is not None and pct > goal:
                misses.append(f"**{what} {pct:.1f}%**")
        cells_md = [
            md(str(c.get("host", ""))),
            md(str(c.get("cell_id", ""))),
            md(str(p.get("fits", ""))),
            f"{_num(p.get('weights_gib'))} / {_num(lg.get('weights_gib'))}",
            f"{_num(p.get('kv_gib'))} / {_num(lg.get('kv_gib'))}",
            f"{_int(p.get('kv_tokens'))} / {_int(lg.get('kv_tokens'))}",
            ", ".join(misses) or "within the goal" if lg.get("weights_gib", -1) >= 0 else "not logged",
        ]
        out.append("| " + " | ".join(cells_md) + " |")
    out.append("")
    for c in rows:  # what the plan said of a cell that only queues (one that cannot start never ran)
        p = c["memory"]["plan"]
        if p.get("problem") and p.get("fits") == "queues":
            change = "; ".join(str(a) for a in p.get("advice", []))
            out.append(
                f"- {md(str(c.get('host', '')))} {md(str(c.get('cell_id', '')))}: {md(str(p['problem']))}; {md(change)}"
            )
    return out + ([""] if out[-1] else [])


def _num(v: object) -> str:
    return f"{v:.2f}" if isinstance(v, int | float) and v >= 0 else "-"


def _int(v: object) -> str:
    return f"{int(v):,}" if isinstance(v, int | float) and v >= 0 else "-"


# ---------------------------------------------------------------- windows under pressure (vLLM's own /metrics)

KV_HIGH = 0.9  # a window whose KV cache usage went above this is flagged
PRESSURE_WORDS = {
    "saturated": "requests waited for a slot (vllm:num_requests_waiting > 0)",
    "preempted": "the server preempted requests (vllm:num_preemptions_total rose)",
    "kv_above_90": "KV cache usage above 90% (vllm:kv_cache_usage_perc)",
}


def window_flags(window: Mapping[str, Any]) -> list[str]:
    """What the server's own gauges (sampled every 0.5 s) and counters say of one window: saturated, preempted,
    kv_above_90 ([] when none, or when /metrics was not scraped). Recorded as the window's `pressure`."""
    server = window.get("server")
    if not isinstance(server, Mapping) or not server.get("scraped"):
        return []
    gauges, deltas = server.get("gauges") or {}, server.get("deltas") or {}

    def peak(name: str) -> float:
        value = (gauges.get(name) or {}).get("max", -1.0)
        return float(value) if isinstance(value, int | float) else -1.0

    flags = []
    if peak("vllm:num_requests_waiting") > 0:
        flags.append("saturated")
    if float(deltas.get("vllm:num_preemptions_total", 0.0) or 0.0) > 0:
        flags.append("preempted")
    if peak("vllm:kv_cache_usage_perc") > KV_HIGH:
        flags.append("kv_above_90")
    return flags


def pressure_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown for the report: every window that saturated, preempted or ran with its KV cache above 90%, with
    the gauges' peaks. `cells` as tree.load_cells gives them (with 'runs'); [] when no window was flagged."""
    rows = []
    for c in cells:
        for run in c.get("runs", []) or []:
            flags = run.get("pressure") or window_flags(run)
            if not flags:
                continue
            gauges = (run.get("server") or {}).get("gauges") or {}
            peaks = {
                k: (gauges.get(f"vllm:{k}") or {}).get("max", -1.0)
                for k in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
            }
            preempted = ((run.get("server") or {}).get("deltas") or {}).get("vllm:num_preemptions_total", 0.0)
            rows.append(
                "| "
                + " | ".join(
                    [
                        md(str(c.get("host", ""))),
                        md(str(c.get("cell_id", ""))),
                        f"c={run.get('concurrency', '?')} r{run.get('repeat', '?')}",
                        ", ".join(md(f) for f in flags),
                        _int(peaks["num_requests_running"]),
                        _int(peaks["num_requests_waiting"]),
                        f"{peaks['kv_cache_usage_perc'] * 100:.0f}%" if peaks["kv_cache_usage_perc"] >= 0 else "-",
                        _int(preempted),
                    ]
                )
                + " |"
            )
    if not rows:
        return []
    legend = "; ".join(f"{k}: {v}" for k, v in PRESSURE_WORDS.items())
    return [
        "## Windows under pressure (the server's /metrics, every 0.5 s)",
        "",
        f"{legend}.",
        "",
        "| host | cell | window | flags | running max | waiting max | KV usage max | preemptions |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
