"""agent.reporting.export and `spark-agent export`: one row per measurement, `vllm bench serve` key names."""

import csv
import io
import json

import pytest

from agent.cli import main
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

BENCH_KEYS = [
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "p99_itl_ms",
    "median_tpot_ms",
    "total_output_tokens",
    "completed",
    "duration",
    "max_concurrency",
    "model_id",
]


def tree(root):
    write_cell(root, backend="marlin", values={1: [60.0, 61.0, 59.0], 8: [280.0, "server died", 276.0]})
    write_cell(root, checkpoint="fp8", quant="fp8", backend="triton", values={1: [55.0, 56.0]})
    write_cell(root, checkpoint="fp8", quant="fp8", backend="deep_gemm", values={}, status="failed", verdict="failed")
    return root


def test_csv_one_row_per_measurement_with_bench_names(tmp_path):
    out = tmp_path / "m.csv"
    assert main(["export", str(tree(tmp_path / "r")), "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 8  # 6 + 2; the failed cell has no measurement
    assert all(k in rows[0] for k in BENCH_KEYS)
    failed = [r for r in rows if r["ok"] == "False"]
    assert len(failed) == 1 and failed[0]["error"] == "server died" and failed[0]["max_concurrency"] == "8"
    marlin8 = sorted(
        float(r["output_throughput"]) for r in rows if r["backend"] == "marlin" and r["max_concurrency"] == "8"
    )
    assert marlin8 == [0.0, 276.0, 280.0]
    assert {r["model_id"] for r in rows} == {"unsloth/Qwen3.6-35B-A3B-NVFP4-fast", "Qwen/Qwen3.6-35B-A3B-FP8"}
    assert {r["verdict"] for r in rows} == {"valid"}


def test_jsonl_rows_parse_and_keep_types(tmp_path, capsys):
    assert main(["export", str(tree(tmp_path / "r")), "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 8
    triton = [r for r in rows if r["moe_backend"] == "triton"]
    assert [(r["max_concurrency"], r["repeat"], r["output_throughput"]) for r in triton] == [(1, 1, 55.0), (1, 2, 56.0)]
    assert triton[0]["metrics_delta.generation_tokens"] == 55.0 * 60
    assert triton[0]["vllm_version"] == "0.24.0" and triton[0]["fingerprint"] == "a1b2c3d4"
    assert "concurrency" not in triton[0] and "schema" not in triton[0]


def test_missing_folder_is_a_user_error(tmp_path):
    assert main(["export", str(tmp_path / "nope")]) == 2
