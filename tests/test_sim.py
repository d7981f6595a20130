"""The simulated Spark as a user sees it: startup log per vLLM version, HTTP API, SSE streaming, metrics."""

from __future__ import annotations

import ast
import contextlib
import re

import pytest

from agent.hostside import logparse
from agent.hostside.metrics import parse as parse_metrics

from .test_sim_support import SimServer, sse_events

pytestmark = pytest.mark.integration

GB10_ENV = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1"}
MTP_TRITON = '{"method":"mtp","num_speculative_tokens":2,"moe_backend":"triton"}'


def _metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_startup_log_0_24_reads_like_vllm_and_the_agent_attests_it():
    env = {**GB10_ENV, "VLLM_FP8_MOE_BACKEND": "marlin", "VLLM_USE_FLASHINFER_MOE_FP4": "0", "VLLM_USE_DEEP_GEMM": "0"}
    with SimServer(
        "unsloth/Qwen3.6-35B-A3B-NVFP4-fast",
        "--moe-backend",
        "marlin",
        "--attention-backend",
        "flashinfer",
        "--gpu-memory-utilization",
        "0.85",
        "--max-num-seqs",
        "16",
        "--enforce-eager",
        "--dtype",
        "bfloat16",
        env=env,
    ) as sim:
        sim.wait_ready()
        log = sim.log()
        assert sim.get("/health")[0] == 200
        assert sim.get("/version")[1] == b'{"version": "0.24.0"}'
    assert re.search(r"^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[\S+:\d+\] .*version 0\.24\.0$", log, re.M)
    args = ast.literal_eval(re.search(r"non-default args: (\{.*\})", log).group(1))
    assert args["moe_backend"] == "marlin" and args["enforce_eager"] is True and args["dtype"] == "bfloat16"
    assert args["gpu_memory_utilization"] == 0.85 and "sim_startup_s" not in args
    warned = re.findall(r"Unknown vLLM environment variable detected: (\w+)", log)
    assert sorted(warned) == ["VLLM_FP8_MOE_BACKEND", "VLLM_USE_FLASHINFER_MOE_FP4"]  # VLLM_USE_DEEP_GEMM is known
    assert "Using 'MARLIN' NvFp4 MoE backend out of potential backends" in log
    assert "Using AttentionBackendEnum.FLASHINFER backend." in log
    facts = logparse.parse(log)
    assert facts["moe_backend"] == "marlin" and facts["vllm_version"] == "0.24.0"
    assert facts["startup_complete"] and facts["marlin_fp4_weight_only"] and not facts["failure"]


@pytest.mark.parametrize(
    "version,prefixed,identity,moe_line",
    [
        ("0.12.0", False, "vLLM API server version 0.12.0", "Using Marlin for ModelOptNvFp4FusedMoE."),
        ("0.14.0", False, "vLLM API server version 0.14.0", "Using MARLIN backend for NvFp4 MoE"),
        ("0.33.0", True, "vLLM server version 0.33.0, serving model uns", "Using 'MARLIN' NvFp4 MoE backend"),
    ],
)
def test_log_layout_follows_the_chosen_version(version, prefixed, identity, moe_line):
    moe_flag = ["--moe-backend", "marlin"] if version >= "0.17" else []
    with SimServer(
        "uns",
        *moe_flag,
        "--sim-vllm-version",
        version,
        env={"VLLM_DISABLE_LOG_LOGO": "1", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"},
    ) as sim:
        sim.wait_ready()
        log = sim.log()
        assert sim.get("/version")[1].decode() == f'{{"version": "{version}"}}'
    assert identity in log and moe_line in log
    first = log.splitlines()[0]
    assert first.startswith("(APIServer pid=") == prefixed
    assert ("Unknown vLLM environment variable detected: VLLM_ATTENTION_BACKEND" in log) == (version >= "0.17")
    assert logparse.parse(log)["moe_backend"] == "marlin"


def test_moe_backend_flag_is_unknown_before_0_17():
    sim = SimServer("uns", "--moe-backend", "marlin", "--sim-vllm-version", "0.16").start()
    try:
        assert sim.wait_exit() == 2
        assert "unrecognized arguments: --moe-backend" in sim.log()
    finally:
        sim.stop()


def test_completions_stream_counts_every_token_and_ends_with_done():
    with SimServer("fp8", "--sim-rate", "unlimited", env={"VLLM_USE_DEEP_GEMM": "0"}) as sim:
        sim.wait_ready()
        body = {
            "model": "fp8",
            "prompt": "one two three four",
            "max_tokens": 50,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        status, raw = sim.post("/v1/completions", body)
        assert status == 200
        events = sse_events(raw)
        assert events[-1] == "[DONE]"
        chunks = [e for e in events[:-1] if e["choices"]]
        assert len(chunks) == 50 and chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert [c["usage"]["completion_tokens"] for c in chunks] == list(range(1, 51))
        assert events[-2]["usage"] == {"prompt_tokens": 4, "total_tokens": 54, "completion_tokens": 50}
        metrics = sim.get("/metrics")[1].decode()
        assert _metric(metrics, "vllm:generation_tokens_total") == 50.0
        assert _metric(metrics, "vllm:prompt_tokens_total") == 4.0
        assert _metric(metrics, "vllm:request_success_total", finished_reason="length") == 1.0
        assert parse_metrics(metrics)  # the agent's own scraper reads it


def test_chat_non_streaming_models_and_errors():
    with SimServer(
        "nv", "--served-model-name", "qwen", "--max-model-len", "4096", "--sim-rate", "unlimited", env=GB10_ENV
    ) as sim:
        sim.wait_ready()
        models = __import__("json").loads(sim.get("/v1/models")[1])
        assert models["data"][0]["id"] == "qwen" and models["data"][0]["max_model_len"] == 4096
        status, raw = sim.post(
            "/v1/chat/completions",
            {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7, "ignore_eos": True},
        )
        reply = __import__("json").loads(raw)
        assert (
            status == 200
            and reply["usage"]["completion_tokens"] == 7
            and reply["choices"][0]["finish_reason"] == "length"
        )
        status, raw = sim.post(
            "/v1/chat/completions",
            {
                "model": "qwen",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3,
                "stream": True,
                "ignore_eos": True,
            },
        )
        events = sse_events(raw)
        assert events[0]["choices"][0]["delta"]["role"] == "assistant" and events[-1] == "[DONE]"
        assert sim.post("/v1/completions", {"model": "other", "prompt": "x"})[0] == 404
        assert sim.post("/v1/completions", {"model": "qwen", "prompt": "x", "max_tokens": 5000})[0] == 400


def test_mtp_chunks_carry_accepted_drafts_and_metrics_count_them():
    with SimServer(
        "uns-fast",
        "--moe-backend",
        "marlin",
        "--speculative-config",
        MTP_TRITON,
        "--sim-rate",
        "unlimited",
        "--sim-seed",
        "7",
        env=GB10_ENV,
    ) as sim:
        sim.wait_ready()
        assert "speculative_config=SpeculativeConfig(method='mtp'" in sim.log()
        # the BF16 draft head says which MoE backend it loaded, as vLLM does: the attestation can check it
        assert logparse.parse(sim.log())["speculative"]["draft_moe_backend"] == "triton"
        body = {
            "model": "uns-fast",
            "prompt": "a b",
            "max_tokens": 3000,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        events = sse_events(sim.post("/v1/completions", body)[1])
        counts = [e["usage"]["completion_tokens"] for e in events[:-1] if e["choices"]]
        steps = {b - a for a, b in zip([0, *counts], counts, strict=False)}
        assert steps <= {1, 2, 3} and {1, 3} <= steps and counts[-1] == 3000
        metrics = sim.get("/metrics")[1].decode()
    drafted = _metric(metrics, "vllm:spec_decode_num_draft_tokens_total")
    accepted = _metric(metrics, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafted == 2 * _metric(metrics, "vllm:spec_decode_num_drafts_total")
    assert 0.72 <= accepted / drafted <= 0.78  # uns-fast: 75%
    assert accepted == _metric(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total")


def test_max_num_seqs_queues_the_rest():
    import threading

    with SimServer("uns-fast", "--moe-backend", "marlin", "--max-num-seqs", "2", env=GB10_ENV) as sim:
        sim.wait_ready()
        body = {"model": "uns-fast", "prompt": "x", "max_tokens": 200, "ignore_eos": True}

        def post_quietly():
            with contextlib.suppress(OSError):  # the server is stopped under it at the end
                sim.post("/v1/completions", body)

        threads = [threading.Thread(target=post_quietly) for _ in range(4)]
        for t in threads:
            t.start()
        deadline = __import__("time").monotonic() + 5
        while True:
            metrics = sim.get("/metrics")[1].decode()
            running = _metric(metrics, "vllm:num_requests_running")
            if running == 2 and _metric(metrics, "vllm:num_requests_waiting") == 2:
                break
            assert __import__("time").monotonic() < deadline, metrics
        assert 0 < _metric(metrics, "vllm:kv_cache_usage_perc") < 1
        sim.stop()  # ends the open requests too
        for t in threads:
            t.join(timeout=5)
