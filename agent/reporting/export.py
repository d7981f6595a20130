"""Exports: CSV and JSON Lines, one row per measurement.

Keys that mean the same as in `vllm bench serve` result JSON carry its name (output_throughput, median_ttft_ms,
p99_itl_ms, max_concurrency, model_id, ...); the rest say where the row comes from (cell, host, verdict).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any

from agent.escape import csv_cell
from agent.hostside import loadpoints
from agent.judging.summary import cell_verdict, hardware_label
from agent.planning.matrix import backend_label

CELL_COLUMNS = [
    "sweep",
    "host",
    "cell_id",
    "hardware",
    "fingerprint",
    "image",
    "vllm_version",
    "checkpoint",
    "model_id",
    "quant",
    "backend",
    "moe_backend",
    "linear_backend",
    "attention_backend",
    "speculative",
    "profile",
    "verdict",
    "loaded_moe_backend",
    # the other server-side axes a [matrix] can vary (left empty where [config] leaves them at their default)
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "kv_cache_dtype",
    "enable_prefix_caching",
    "extra_args",
    "env_variant",
]
# Measurement keys in `vllm bench serve` order, then ours; `concurrency` is renamed to bench's max_concurrency.
RUN_COLUMNS = [
    "max_concurrency",
    "repeat",
    "ok",
    "error",
    "started_at",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "max_concurrent_requests",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
    "spec_decode_acceptance_rate",
    "errors",
    # the load point (issue 15: rate and depth vary inside a cell) and the tails; a window from before them reads
    # as a closed loop at depth 0, with its percentiles left empty
    "window",
    "request_rate",
    "context_depth",
    "request_goodput",
    *(f"{q}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for q in ("p50", "p90", "p95")),
    "mean_e2el_ms",
]
RENAMED = {"concurrency": "max_concurrency"}
SKIPPED = {"schema", "cell_id", "metrics_delta", "telemetry", "warmup_telemetry", "server", "warmup"}


def cell_fields(cell: dict[str, Any]) -> dict[str, Any]:
    config, facts, att = cell.get("config", {}), cell.get("facts", {}), cell.get("attestation", {})
    return {
        "sweep": cell.get("sweep", ""),
        "host": cell.get("host", ""),
        "cell_id": cell.get("cell_id", ""),
        "hardware": hardware_label(cell),
        "fingerprint": facts.get("fingerprint", ""),
        "image": config.get("image", ""),
        "vllm_version": att.get("vllm_version", ""),
        "checkpoint": config.get("checkpoint", ""),
        "model_id": config.get("model", ""),
        "quant": config.get("quant", ""),
        "backend": backend_label(config),
        "moe_backend": config.get("moe_backend", ""),
        "linear_backend": config.get("linear_backend", ""),
        "attention_backend": config.get("attention_backend", ""),
        "speculative": config.get("speculative", ""),
        "profile": config.get("profile", ""),
        "verdict": cell_verdict(cell),
        "loaded_moe_backend": att.get("moe_backend", ""),
        **{k: _flat(config.get(k, "")) for k in CELL_COLUMNS[CELL_COLUMNS.index("loaded_moe_backend") + 1 :]},
        **_correctness_fields(cell),
    }


CORRECTNESS_KEYS = (
    *("score", "degenerate", "errors", "agreement", "first_divergence", "reference_cell", "seconds", "not_judged"),
    *("consensus", "suspicious", "batch_score", "batch_concurrency", "long_seconds", "broke_first"),
)


def _correctness_fields(cell: dict[str, Any]) -> dict[str, Any]:
    """The probe's figures beside the speed (judging/correctness.py), for a probed cell only; outputs stay in the
    tree."""
    c = cell.get("correctness") or {}
    if not c.get("probed"):
        return {}
    return {f"correctness.{k}": c[k] for k in CORRECTNESS_KEYS if k in c}


def _flat(value: Any) -> Any:
    """A list (extra_args) as one shell-like string: a CSV cell holds one value."""
    return " ".join(str(v) for v in value) if isinstance(value, list) else value


def run_fields(run: dict[str, Any]) -> dict[str, Any]:
    point = loadpoints.of_window(run)
    out = {RENAMED.get(k, k): v for k, v in run.items() if k not in SKIPPED}
    out.update(window=point.window(int(run.get("repeat", 0))), request_rate=point.rate, context_depth=point.depth)
    for k, v in run.get("metrics_delta", {}).items():
        out[f"metrics_delta.{k}"] = v
    for table in ("telemetry", "warmup_telemetry"):  # hostside WindowTelemetry; the timeline stays in the tree
        for k, v in (run.get(table) or {}).items():
            if k != "timeline":
                out[f"{table}.{k}"] = v
    for k, v in (run.get("warmup") or {}).items():  # hostside WarmupRecord: the point's warmup until steady
        out[f"warmup.{k}"] = _flat(v)
    server = run.get("server") or {}  # hostside ServerView, under vLLM's metric names
    for k, v in server.items():
        if k == "deltas":
            out.update({f"server.{name}": x for name, x in v.items()})
        elif k == "gauges":
            out.update({f"server.{name}.{stat}": x for name, g in v.items() for stat, x in g.items()})
        else:
            out[f"server.{k}"] = v
    return out


def rows(cells: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat dict per measurement, ordered by cell then load point (rate, depth, concurrency) then repeat."""
    return [{**cell_fields(cell), **run_fields(run)} for cell in cells for run in cell.get("runs", [])]


def columns(table: Sequence[dict[str, Any]]) -> list[str]:
    known = CELL_COLUMNS + RUN_COLUMNS
    extra = sorted({k for row in table for k in row} - set(known))
    return known + extra


def to_jsonl(table: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, sort_keys=False) + "\n" for row in table)


def to_csv(table: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns(table), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in table:
        flat = {k: "; ".join(map(str, v)) if isinstance(v, list) else v for k, v in row.items()}
        writer.writerow({k: csv_cell(v) for k, v in flat.items()})  # host text must not become a formula
    return buf.getvalue()


FORMATS = {"csv": to_csv, "jsonl": to_jsonl}
