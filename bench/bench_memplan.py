"""The memory plan against every real vLLM log the repository holds: what hostside/memplan.py predicts before the
start beside what the server logged ("Model loading took X GiB", "Available KV cache memory: X GiB", "KV cache
size: N tokens"). Goal (issue 50): weights within 2 %, KV cache tokens within 10 %; every larger miss is printed.

    python bench/bench_memplan.py          # a row per log, then the misses; exit 1 when one misses the goal

Which logs: every server log under docs/runs/ and tests/data/ that states a loaded size or a KV cache size. Each
needs the model's config.json, which the repository has for the checkpoints it made: bench/gpu/make_checkpoint.py
(the H100/H200 runs, `--load-format dummy`: weights from config.json alone) and tests/engine/make_models.py (the
CPU build's tiny models). The device's memory is the run's own facts (cell.toml `gpu_mem_gib`; a log outside a
results tree takes its run folder's, a fixture its chip's from docs/runs). On the CPU build the KV cache is the
space VLLM_CPU_KVCACHE_SPACE gives (the log says it), so only the bytes per token are checked there. Logs of
models the repository has no config for (public fragments, synthetic logs) are counted as skipped.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "gpu"), str(ROOT / "tests" / "engine")]

import make_checkpoint  # noqa: E402  (bench/gpu: the GPU runs' checkpoints)
import make_models  # noqa: E402  (tests/engine: the CPU build's tiny models)

from agent.hostside import memplan  # noqa: E402
from agent.hostside.contracts import DeviceMemory  # noqa: E402
from agent.hostside.logparse import parse  # noqa: E402
from agent.planning.memory import KV_TOKENS_GOAL_PCT, WEIGHTS_GOAL_PCT, miss  # noqa: E402

CPU_SPACE = re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache")
CPU_TOKENS = re.compile(r"CPU KV cache size: ([\d,]+) tokens")


def configs() -> dict[str, dict]:
    out = {name: make_checkpoint.variant_config(name) for name in make_checkpoint.VARIANTS}
    for name, (model_type, extra) in make_models.MODELS.items():
        out[name] = {"model_type": model_type, "torch_dtype": "bfloat16", **make_models.TRUNK, **extra}
    return out


def gpu_memory() -> dict[Path, float]:
    """Each run folder's GPU memory from its cells' facts (every cell of a run ran on one machine)."""
    out: dict[Path, float] = {}
    for cell in sorted((ROOT / "docs" / "runs").glob("*/results/*/*/cell.toml")):
        facts = tomllib.loads(cell.read_text()).get("facts", {})
        if facts.get("gpu_mem_gib"):
            out[cell.parent] = float(facts["gpu_mem_gib"])
            out.setdefault(cell.parents[3], float(facts["gpu_mem_gib"]))
            chip = next((c for c in ("h200", "h100") if c in str(facts.get("gpu_name", "")).lower()), "")
            out.setdefault(Path(chip), float(facts["gpu_mem_gib"]))
    return out


def device_of(log: Path, memory: dict[Path, float]) -> float:
    for place in (log.parent, *log.parents):
        if place in memory:
            return memory[place]
    chip = next((c for c in ("h200", "h100") if c in str(log.relative_to(ROOT))), "")
    return memory.get(Path(chip), 0.0)


def row(log: Path, text: str, cfgs: dict[str, dict], memory: dict[Path, float]) -> dict | None:
    facts = parse(text)
    args = facts.get("non_default_args", {})
    name = Path(str(args.get("model") or facts.get("served_model") or "")).name
    if name not in cfgs:
        return None
    model = memplan.from_config(cfgs[name])
    space = CPU_SPACE.search(text)
    if space:  # the CPU build: the KV cache is the space given; only its bytes per token are planned
        per = memplan.kv_bytes(model, str(args.get("kv_cache_dtype", "")))
        planned = int(float(space.group(1)) * memplan.GIB // (per * 16)) * 16
        logged = int(CPU_TOKENS.search(text).group(1).replace(",", "")) if CPU_TOKENS.search(text) else -1
        return {"log": log, "model": name, "device": "cpu", "weights": (-1.0, -1.0), "kv_gib": (-1.0, -1.0)} | {
            "tokens": (planned, logged)
        }
    total = device_of(log, memory)
    plan = memplan.plan(
        model,
        DeviceMemory(kind="discrete", total_gib=total, free_gib=total, source="the run's facts"),
        gpu_memory_utilization=float(args.get("gpu_memory_utilization", 0.92)),
        max_model_len=int(args.get("max_model_len", model["max_position"])),
        max_num_seqs=int(args.get("max_num_seqs", 256)),
        kv_cache_dtype=str(args.get("kv_cache_dtype", "")),
        speculative=bool(args.get("speculative_config")),
        moe_backend=str(args.get("moe_backend", "")),
    )
    return {
        "log": log,
        "model": name,
        "device": f"{total:.1f} GiB",
        "weights": (plan["weights_gib"], facts["model_load_gib"]),
        "kv_gib": (plan["kv_gib"], facts.get("kv_cache_gib", -1.0)),
        "tokens": (plan["kv_tokens"], facts["kv_cache_tokens"]),
    }


def main() -> int:
    cfgs, memory = configs(), gpu_memory()
    logs = sorted({*ROOT.glob("docs/runs/**/*.log"), *ROOT.glob("tests/data/**/*.log")})
    rows, skipped = [], []
    for log in logs:
        text = log.read_text(errors="replace")
        if "Model loading took" not in text and "KV cache size" not in text:
            continue
        r = row(log, text, cfgs, memory)
        (rows.append(r) if r else skipped.append(log))
    print(f"{'log':<72} {'model':<20} {'device':<9} {'weights plan/log':>17} {'miss':>6} "
          f"{'KV GiB plan/log':>16} {'KV tokens plan/log':>22} {'miss':>6}")  # fmt: skip
    misses = []
    for r in rows:
        wm, tm = miss(*r["weights"]), miss(*r["tokens"])
        w = f"{r['weights'][0]:.2f}/{r['weights'][1]:.2f}" if r["weights"][1] >= 0 else "-"
        k = f"{r['kv_gib'][0]:.2f}/{r['kv_gib'][1]:.2f}" if r["kv_gib"][1] >= 0 else "-"
        t = f"{r['tokens'][0]:,}/{r['tokens'][1]:,}" if r["tokens"][1] >= 0 else "-"
        name = str(r["log"].relative_to(ROOT))
        print(f"{name:<72} {r['model']:<20} {r['device']:<9} {w:>17} {_pct(wm):>6} {k:>16} {t:>22} {_pct(tm):>6}")
        if wm > WEIGHTS_GOAL_PCT:
            misses.append(f"{name}: weights {r['weights'][0]:.2f} GiB planned, {r['weights'][1]:.2f} logged: {wm}%")
        if tm > KV_TOKENS_GOAL_PCT:
            misses.append(f"{name}: KV tokens {r['tokens'][0]:,} planned, {r['tokens'][1]:,} logged: {tm}%")
    worst_w = max((miss(*r["weights"]) for r in rows), default=-1.0)
    worst_t = max((miss(*r["tokens"]) for r in rows), default=-1.0)
    print(f"\n{len(rows)} logs checked ({sum(r['weights'][1] >= 0 for r in rows)} with weights), {len(skipped)} "
          f"skipped (no config.json in the repo for their model); worst miss: weights {worst_w}% "
          f"(goal {WEIGHTS_GOAL_PCT}%), KV tokens {worst_t}% (goal {KV_TOKENS_GOAL_PCT}%)")  # fmt: skip
    for log in skipped:
        print("skipped", log.relative_to(ROOT))
    for m in misses:
        print("MISS", m)
    return 1 if misses else 0


def _pct(value: float) -> str:
    return f"{value:.2f}" if value >= 0 else "-"


if __name__ == "__main__":
    sys.exit(main())
