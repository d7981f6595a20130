"""Builds results trees exactly per docs/results-tree.md (cell.toml + cNNN-rK.toml via atomic_write_toml).

Shared by the report/stats/compare/export tests and bench/bench_report.py. Holds no tests itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.results.tree import atomic_write_toml, cell_dir, run_name

pytestmark = pytest.mark.unit

DIGEST = "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32
GB10_FACTS = {
    "gpu_name": "NVIDIA GB10",
    "compute_capability": "12.1",
    "arch": "gb10",
    "sm": "sm_121a",
    "driver": "580.95.05",
    "cuda": "13.0",
    "mem_total_gib": 119.7,
    "python": "3.12.3",
    "docker": True,
    "nvidia_runtime": True,
    "simulated": False,
    "fingerprint": "a1b2c3d4",
}
MODELS = {
    "nv": "nvidia/Qwen3.6-35B-A3B-NVFP4",
    "uns": "unsloth/Qwen3.6-35B-A3B-NVFP4",
    "uns-fast": "unsloth/Qwen3.6-35B-A3B-NVFP4-fast",
    "fp8": "Qwen/Qwen3.6-35B-A3B-FP8",
}


def write_cell(
    root: Path,
    *,
    backend: str,
    values: dict[int, Sequence[float | str]],  # concurrency → output_throughput per repeat; a str = failed run
    checkpoint: str = "uns-fast",
    quant: str = "nvfp4",
    host: str = "spark-1",
    sweep: str = "test",
    verdict: str = "valid",
    status: str = "done",
    verdict_reasons: Sequence[str] = (),
    failure_class: str = "",
    failure_evidence: Sequence[str] = (),
    image: str = DIGEST,
    env: dict[str, str] | None = None,
    facts: dict[str, Any] | None = None,
    loaded: str | None = None,
    started_at: str = "2026-11-29T19:10:00Z",
    finished_at: str = "2026-11-29T19:14:00Z",
    elapsed_s: float = 240.0,
    checkpoint_info: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,  # more [config] keys (other axes: speculative, env_variant, ...)
) -> Path:
    """One finished cell; returns its folder. TTFT/TPOT are derived from the throughput so they move with it."""
    extra = config
    config = {
        "image": image,
        "runtime": "docker",
        "checkpoint": checkpoint,
        "model": MODELS.get(checkpoint, checkpoint),
        "quant": quant,
        "moe_backend": "" if backend == "auto" else backend,
        "linear_backend": "",
        "attention_backend": "",
        "speculative": "",
        "gpu_memory_utilization": 0.85,
        "max_model_len": 262144,
        "max_num_seqs": 16,
        "prompt_len": 1024,
        "output_len": 256,
        "profile": "uniform",
        "concurrency": sorted(values),
        "duration_s": 60.0,
        "warmup": 1,
        "repeats": max(map(len, values.values()), default=3),
        **(extra or {}),
    }
    env = {"CUTE_DSL_ARCH": "sm_121a"} if env is None else env
    cell_id = hashlib.sha256(json.dumps([config, env, image, host], sort_keys=True).encode()).hexdigest()[:12]
    folder = cell_dir(root, sweep, host, cell_id)
    for c, reps in values.items():
        for r, value in enumerate(reps, start=1):
            atomic_write_toml(folder / run_name(c, r), measurement(cell_id, c, r, value))
    argv = [
        "vllm",
        "serve",
        config["model"],
        "--gpu-memory-utilization",
        "0.85",
        "--max-model-len",
        "262144",
        "--max-num-seqs",
        "16",
    ] + (["--moe-backend", backend] if config["moe_backend"] else [])
    cell = {
        "schema": 1,
        "cell_id": cell_id,
        "sweep": sweep,
        "host": host,
        "status": status,
        "verdict": verdict,
        "verdict_reasons": list(verdict_reasons),
        "failure_class": failure_class,
        "failure_evidence": list(failure_evidence),
        "started_at": started_at,
        "finished_at": finished_at,
        "elapsed_s": elapsed_s,
        "config": config,
        "env": env,
        "env_provenance": [
            {"name": k, "value": v, "action": "set", "rule": "test", "reason": "test"} for k, v in env.items()
        ],
        "launch": {"argv": argv, "command": " ".join(argv)},
        "facts": dict(facts or GB10_FACTS),
        "attestation": {
            "vllm_version": "0.24.0",
            "moe_backend": loaded or backend,
            "moe_backend_raw": (loaded or backend).upper(),
            "moe_quant": quant,
        },
    }
    if checkpoint_info:
        cell["checkpoint_info"] = checkpoint_info
    atomic_write_toml(folder / "cell.toml", cell)
    return folder


def measurement(cell_id: str, concurrency: int, repeat: int, value: float | str) -> dict[str, Any]:
    ok = not isinstance(value, str)
    tput = float(value) if ok else 0.0
    tpot = 1000.0 * concurrency / tput if tput else 0.0
    return {
        "schema": 1,
        "cell_id": cell_id,
        "concurrency": concurrency,
        "repeat": repeat,
        "ok": ok,
        "error": "" if ok else value,
        "started_at": "2026-11-29T19:11:00Z",
        "duration": 60.0,
        "completed": int(tput * 60 / 256),
        "failed": 0,
        "errors": [] if ok else [value],
        "total_input_tokens": int(tput * 60 / 256) * 1024,
        "total_output_tokens": int(tput * 60),
        "output_throughput": tput,
        "request_throughput": tput / 256,
        "max_concurrent_requests": concurrency,
        "mean_ttft_ms": 50.0 * concurrency,
        "median_ttft_ms": 45.0 * concurrency,
        "p99_ttft_ms": 90.0 * concurrency,
        "mean_tpot_ms": tpot,
        "median_tpot_ms": tpot,
        "p99_tpot_ms": tpot * 1.5,
        "mean_itl_ms": tpot,
        "median_itl_ms": tpot,
        "p99_itl_ms": tpot * 2,
        "median_e2el_ms": tpot * 256,
        "p99_e2el_ms": tpot * 300,
        "spec_decode_acceptance_rate": -1.0,
        "metrics_delta": {
            "generation_tokens": tput * 60,
            "prompt_tokens": 0.0,
            "request_success": 0.0,
            "spec_decode_num_draft_tokens": 0.0,
            "spec_decode_num_accepted_tokens": 0.0,
        },
    }


def write_starts(root: Path, *, starts: int = 2, drift: float = 0.005, **kw: Any) -> list[Path]:
    """One config as `starts` interleaved server starts (planning/matrix.nth_start): start k has server_start = k
    in its [config], begins at hour 10 + k (every config's start 1 before any start 2) and measures `drift` x
    (k - 1) faster, a drift the interleaving cancels. Same keywords as write_cell."""
    values = kw.pop("values")
    config = kw.pop("config", None) or {}
    return [
        write_cell(
            root,
            values={c: [v * (1 + drift * (k - 1)) for v in vs] for c, vs in values.items()},
            config={**config, **({"server_start": k} if k > 1 else {})},
            started_at=f"2026-11-29T{10 + k:02d}:00:00Z",
            finished_at=f"2026-11-29T{10 + k:02d}:04:00Z",
            **kw,
        )
        for k in range(1, starts + 1)
    ]
