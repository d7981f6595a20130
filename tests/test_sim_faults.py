"""Startup failures and injected faults, seen the way a user sees them: exit code, log lines, /health, streams."""

from __future__ import annotations

import http.client
import socket
import time

import pytest

from agent.hostside import logparse

from .test_sim_support import HOST, SimServer, sse_events

pytestmark = pytest.mark.integration

GB10_ENV = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1"}


def _fails(*args, env=None) -> tuple[int, str]:
    """Run a server that must not start: (exit code, log); it never listened."""
    sim = SimServer(*args, env=env).start()
    try:
        code = sim.wait_exit()
        log = sim.log()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((HOST, sim.port), timeout=1).close()
        return code, log
    finally:
        sim.stop()


def _starts(*args, env=None) -> str:
    with SimServer(*args, env=env) as sim:
        sim.wait_ready()
        assert sim.get("/health")[0] == 200
        return sim.log()


def test_fp8_default_dies_on_the_deep_gemm_assert_until_deep_gemm_is_off():
    code, log = _fails("fp8")
    assert code == 1 and "Application startup complete." not in log
    assert "AssertionError: DeepGemmQuantScaleFMT oracle cache not initialized" in log
    assert "Using DEEPGEMM Fp8 MoE backend" in log  # vLLM picked it (it thinks SM12x can), then it faulted
    assert logparse.classify_failure(log)["class"] == "deep_gemm_assert"
    log = _starts("fp8", env={"VLLM_USE_DEEP_GEMM": "0"})
    assert "Using TRITON Fp8 MoE backend out of potential backends" in log


def test_fp8_auto_before_0_24_never_tries_deep_gemm_on_gb10():
    assert "Using Triton backend for FP8 MoE" in _starts("fp8", "--sim-vllm-version", "0.14")


@pytest.mark.parametrize(
    "backend,klass",
    [
        ("deep_gemm", "deep_gemm_assert"),
        ("cutlass", "unsupported_backend"),
        ("flashinfer_cutlass", "unsupported_backend"),
        ("flashinfer_trtllm", "unsupported_backend"),
    ],
)
def test_four_of_six_fp8_backends_fail_with_vllms_error(backend, klass):
    code, log = _fails("fp8", "--moe-backend", backend, env={**GB10_ENV, "VLLM_USE_DEEP_GEMM": "0"})
    assert code == 1 and "RuntimeError: Engine core initialization failed" in log
    assert logparse.classify_failure(log)["class"] == klass


@pytest.mark.parametrize("backend,enum", [("triton", "TRITON"), ("marlin", "MARLIN")])
def test_two_fp8_backends_start(backend, enum):
    assert f"Using {enum} Fp8 MoE backend" in _starts("fp8", "--moe-backend", backend)


def test_b12x_needs_both_gb10_variables_marlin_needs_neither():
    code, log = _fails("uns-fast", "--moe-backend", "flashinfer_b12x", env={"CUTE_DSL_ARCH": "sm_121a"})
    assert code == 1 and logparse.classify_failure(log)["class"] == "flashinfer_version"
    code, log = _fails("uns-fast", "--moe-backend", "flashinfer_b12x", env={"FLASHINFER_DISABLE_VERSION_CHECK": "1"})
    assert code == 1 and "ptxas" in log and logparse.classify_failure(log)["class"] == "ptxas_arch"
    assert "Using 'FLASHINFER_B12X' NvFp4 MoE backend" in _starts(
        "uns-fast", "--moe-backend", "flashinfer_b12x", env=GB10_ENV
    )
    assert "Using 'MARLIN' NvFp4 MoE backend" in _starts("uns-fast", "--moe-backend", "marlin")


def test_nvfp4_mtp_without_triton_for_the_draft_fails_without_naming_the_draft():
    spec = '{"method":"mtp","num_speculative_tokens":2}'
    code, log = _fails("nv", "--moe-backend", "marlin", "--speculative-config", spec, env=GB10_ENV)
    error = [line for line in log.splitlines() if line.startswith("ValueError")]
    assert code == 1 and error and "draft" not in error[0].lower() and "mtp" not in error[0].lower()
    assert logparse.classify_failure(log)["draft_model"]  # only the position in the log (after the drafter line) tells
    spec = '{"method":"mtp","num_speculative_tokens":2,"moe_backend":"triton"}'
    assert "Application startup complete." in _starts(
        "nv", "--moe-backend", "marlin", "--speculative-config", spec, env=GB10_ENV
    )


def test_memory_failures_oom_fault_and_gb10_free_memory_check():
    code, log = _fails("uns", "--moe-backend", "marlin", "--sim-oom", "1")
    assert code == 1 and logparse.classify_failure(log)["class"] == "oom"
    code, log = _fails("uns", "--moe-backend", "marlin", "--gpu-memory-utilization", "0.98")
    assert code == 1 and logparse.classify_failure(log)["class"] == "free_memory_check"
    code, log = _fails("fp8", "--gpu-memory-utilization", "0.3", env={"VLLM_USE_DEEP_GEMM": "0"})
    assert code == 1 and "No available memory for the cache blocks" in log


def test_unknown_model_and_bad_sim_settings():
    code, log = _fails("some/other-model")
    assert code == 1 and "OSError: some/other-model is not a local folder" in log
    code, log = _fails("nv", "--sim-vllm-version", "0.40")
    assert code == 2 and "--sim-vllm-version 0.40: choose a version from 0.12 to 0.33" in log


def test_crash_after_n_seconds_breaks_streams_and_exits_1():
    sim = SimServer("uns-fast", "--moe-backend", "marlin", "--sim-crash-after", "1.0").start()
    try:
        sim.wait_ready()
        assert sim.get("/health")[0] == 200
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            sim.post(
                "/v1/completions",
                {"model": "uns-fast", "prompt": "x", "max_tokens": 5000, "stream": True, "ignore_eos": True},
            )
        assert sim.wait_exit() == 1
        log = sim.log()
        assert "EngineCore encountered a fatal error" in log and "EngineDeadError" in log
    finally:
        sim.stop()


def test_slow_start_keeps_the_port_closed_until_ready():
    sim = SimServer("uns-fast", "--moe-backend", "marlin", env={"SPARK_SIM_SLOW_START": "2"}).start()
    try:
        time.sleep(0.8)
        assert "Application startup complete." not in sim.log()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((HOST, sim.port), timeout=1).close()
        sim.wait_ready()
        assert sim.get("/health")[0] == 200
    finally:
        sim.stop()


def test_health_hangs_while_the_api_answers():
    with SimServer("uns-fast", "--moe-backend", "marlin", "--sim-health-hang", "1") as sim:
        sim.wait_ready()
        with pytest.raises(TimeoutError):
            sim.get("/health", timeout=0.5)
        assert sim.get("/v1/models")[0] == 200


def test_dropped_stream_ends_without_done():
    with SimServer("uns-fast", "--moe-backend", "marlin", "--sim-drop-streams", "1", "--sim-rate", "unlimited") as sim:
        sim.wait_ready()
        conn = http.client.HTTPConnection(HOST, sim.port, timeout=10)
        conn.request(
            "POST",
            "/v1/completions",
            '{"model":"uns-fast","prompt":"x","max_tokens":100,"stream":true,'
            '"ignore_eos":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}',
        )
        resp = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead) as broken:
            resp.read()
        conn.close()
        events = sse_events(broken.value.partial)
        assert events and "[DONE]" not in events and events[-1]["usage"]["completion_tokens"] < 100


def test_silent_fallback_logs_what_really_loaded():
    log = _starts("uns-fast", "--moe-backend", "marlin", "--sim-silent-fallback", "flashinfer_b12x", env=GB10_ENV)
    facts = logparse.parse(log)
    assert facts["non_default_args"]["moe_backend"] == "marlin"
    assert facts["moe_backend"] == "flashinfer_b12x"
