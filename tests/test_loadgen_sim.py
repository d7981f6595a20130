"""agent.hostside.loadgen: the closed loop against the simulated vLLM server (agent.sim), and the CLI."""

import json
import os
import subprocess
import sys
import time

import pytest

from agent.hostside import loadgen
from tests.test_sim_support import SimServer, free_port  # one implementation of "start the sim"

pytestmark = pytest.mark.integration

# ------------------------------------------------------------------ the closed loop against the simulated Spark


GB10_ENV = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1"}
MODEL = "uns-fast"


def _sim(*flags):
    return SimServer(MODEL, "--moe-backend", "marlin", "--max-model-len", "8192", *flags, env=GB10_ENV)


@pytest.fixture(scope="module")
def sim():
    """The simulated Spark at its calibrated GB10 rate (tens of tokens/s per stream)."""
    server = _sim().start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_run_level_measures_the_simulator(sim):
    res = loadgen.run_level(sim.url, MODEL, 2, 2.0, 0.3, 64, 16)
    assert res["ok"] is True, res
    assert res["failed"] == 0 and res["errors"] == []
    assert res["duration"] == 2.0 and res["max_concurrent_requests"] == 2
    assert res["completed"] >= 1
    assert res["total_input_tokens"] == 64 * res["completed"]  # the server's usage.prompt_tokens
    assert res["total_output_tokens"] >= 16 * res["completed"]  # plus the partial ones at the close
    assert res["output_throughput"] == res["total_output_tokens"] / 2.0
    assert res["request_throughput"] == res["completed"] / 2.0
    assert 0 < res["median_ttft_ms"] <= res["median_e2el_ms"]
    assert res["median_tpot_ms"] > 0 and res["median_itl_ms"] > 0
    assert res["p99_itl_ms"] >= res["median_itl_ms"]


def test_request_in_flight_at_close_counts_only_in_window_tokens(sim):
    # outputs far longer than the window: nothing completes, yet every token received inside counts
    [res] = loadgen.run_levels(sim.url, MODEL, [2], 1.5, 0.0, 1, prompt_len=16, output_len=5000)
    assert res["ok"] is True, res
    assert res["completed"] == 0 and res["failed"] == 0
    assert 0 < res["total_output_tokens"] < 2 * 5000
    assert res["mean_ttft_ms"] > 0 and res["median_e2el_ms"] == 0.0 and res["mean_tpot_ms"] == 0.0
    # the server generated at least what arrived (a little more: the cut requests' last steps)
    assert res["metrics_delta"]["generation_tokens"] >= res["total_output_tokens"]
    assert res["metrics_delta"]["prompt_tokens"] == 2 * 16


def test_injected_clock_defines_the_window(sim):
    fast = lambda: 10.0 * time.monotonic()  # noqa: E731  ten clock seconds per real second
    began = time.monotonic()
    res = loadgen.run_level(sim.url, MODEL, 1, 10.0, 0.0, 8, 8, clock=fast)
    assert time.monotonic() - began < 10.0  # the window was 10 clock seconds
    assert res["ok"] is True and res["duration"] == 10.0
    assert res["output_throughput"] == res["total_output_tokens"] / 10.0


def test_mixed_profile_varies_lengths(sim):
    res = loadgen.run_level(sim.url, MODEL, 2, 2.0, 0.0, 40, 4, profile="mixed", seed=3)
    assert res["ok"] is True and res["completed"] >= 4
    assert res["total_input_tokens"] != 40 * res["completed"]
    assert 20 * res["completed"] <= res["total_input_tokens"] <= 60 * res["completed"]


def test_unknown_model_is_a_failed_level_not_an_exception(sim):
    res = loadgen.run_level(sim.url, "no-such-model", 2, 5.0, 0.0, 8, 8)
    assert res["ok"] is False
    assert "HTTP 404: The model `no-such-model` does not exist." in res["error"]


def test_dead_server_aborts_the_level_quickly():
    began = time.monotonic()
    res = loadgen.run_level(f"http://127.0.0.1:{free_port():d}", MODEL, 4, 30.0, 5.0, 8, 8)
    assert res["ok"] is False and "ConnectionRefusedError" in res["error"]
    assert time.monotonic() - began < 30.0  # it gave up instead of hammering a closed port for 35 s
    assert all(v is not None for v in res.values())


def test_speculative_decoding_multi_token_chunks_and_acceptance():
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": 3, "moe_backend": "triton"})  # bf16 draft
    with _sim("--speculative-config", spec) as server:
        server.wait_ready()
        [res] = loadgen.run_levels(server.url, MODEL, [1], 2.0, 0.0, 1, prompt_len=16, output_len=64)
    assert res["ok"] is True, res
    delta = res["metrics_delta"]
    assert delta["spec_decode_num_draft_tokens"] > 0
    assert (
        res["spec_decode_acceptance_rate"]
        == delta["spec_decode_num_accepted_tokens"] / delta["spec_decode_num_draft_tokens"]
    )
    assert 0.5 < res["spec_decode_acceptance_rate"] < 0.95  # calibrated ~0.75 for uns-fast
    # chunks carry several tokens: the time per token is below the gap between chunks
    assert res["mean_tpot_ms"] < res["mean_itl_ms"]


def test_dropped_streams_are_counted_as_failures():
    with _sim("--sim-rate", "unlimited", "--sim-drop-streams", "0.3", "--sim-seed", "1") as server:
        server.wait_ready()
        res = loadgen.run_level(server.url, MODEL, 4, 1.5, 0.0, 8, 32)
    assert res["ok"] is True and res["completed"] > 0 and res["failed"] > 0
    assert any(
        "closed inside a chunked body" in e or "without [DONE]" in e or "IncompleteRead" in e for e in res["errors"]
    ), res["errors"]


def test_cli_writes_one_file_per_window_and_a_summary_line(sim, tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.hostside.loadgen",
            "--url",
            sim.url,
            "--model",
            MODEL,
            "--levels",
            "1,2",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--repeats",
            "2",
            "--prompt-len",
            "16",
            "--output-len",
            "8",
            "--out-dir",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    names = sorted(os.listdir(out))
    assert names == ["c001-r1.json", "c001-r2.json", "c002-r1.json", "c002-r2.json"]  # no temp files left
    for name in names:
        data = json.loads((out / name).read_text())
        assert data["concurrency"] == int(name[1:4]) and data["repeat"] == int(name[-6])
        assert data["ok"] is True and data["spec_decode_acceptance_rate"] == -1.0
        assert data["metrics_delta"]["generation_tokens"] >= data["total_output_tokens"] > 0
    assert [w["repeat"] for w in summary["windows"]] == [1, 2, 1, 2]
    assert summary["files"] == [str(out / name) for name in names]
    assert [r["total_output_tokens"] for r in summary["results"]] == [
        json.loads((out / name).read_text())["total_output_tokens"] for name in names
    ]


def test_cli_rejects_bad_levels():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.hostside.loadgen",
            "--url",
            "http://127.0.0.1:1",
            "--model",
            "m",
            "--levels",
            "1,x",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--levels takes comma-separated integers" in proc.stderr
