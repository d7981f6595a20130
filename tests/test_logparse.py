"""logparse: facts from vLLM logs of every version family, through the noise users' tools add."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.hostside.logparse import Follower, linear_backend_of, normalise_backend, parse

pytestmark = pytest.mark.unit

LOGS = Path(__file__).parent / "data" / "logs" / "synthetic"


def read(name: str) -> str:
    return (LOGS / name).read_text()


def line(msg: str, level: str = "INFO", proc: str = "(EngineCore_DP0 pid=9) ", where: str = "x.py:1") -> str:
    return f"{proc}{level} 11-29 18:31:07 [{where}] {msg}"


# Whole logs (synthetic and captured from a real vLLM) are log + expected-facts pairs: test_logs_golden.py.


# --- version families, from the documented format strings ----------------------------------------

MOE_LINES = [
    (
        "Using 'FLASHINFER_B12X' NvFp4 MoE backend out of potential backends: ['FLASHINFER_B12X', 'MARLIN']",
        "flashinfer_b12x",
        "nvfp4",
    ),
    ("Using 'B12X' NvFp4 MoE backend out of potential backends: ['B12X']", "b12x", "nvfp4"),
    ("Using TRITON Fp8 MoE backend out of potential backends: [DEEPGEMM, TRITON, MARLIN]", "triton", "fp8"),
    ("Using BATCHED_DEEPGEMM Fp8 MoE backend out of potential backends: [BATCHED_DEEPGEMM]", "deep_gemm", "fp8"),
    ("Using VLLM_CUTLASS Fp8 MoE backend out of potential backends: [VLLM_CUTLASS]", "cutlass", "fp8"),
    ("Using 'MARLIN' MxFp8 MoE backend.", "marlin", "mxfp8"),
    ("Using CPU Unquantized MoE backend out of potential backends: [CPU]", "cpu", "unquantized"),
    ("Using FlashInfer TRTLLM backend for FP8 MoE", "flashinfer_trtllm", "fp8"),  # 0.14
    ("Using vLLM CUTLASS backend for FP8 MoE", "cutlass", "fp8"),
    ("Using MARLIN backend for NvFp4 MoE", "marlin", "nvfp4"),
    ("Using Marlin backend for FP8 MoE", "marlin", "fp8"),  # 0.12-0.13
    ("Using DeepGEMM backend for FP8 MoE", "deep_gemm", "fp8"),
    ("Using FlashInfer FP8 MoE TRTLLM backend for SM100", "flashinfer_trtllm", "fp8"),
    ("Using Marlin for ModelOptNvFp4FusedMoE.", "marlin", "nvfp4"),
    ("Using FlashInfer TensorRT-LLM kernels for ModelOptNvFp4FusedMoE.", "flashinfer_trtllm", "nvfp4"),
    ("Using FlashInfer CUTEDSL kernels for ModelOptNvFp4FusedMoE.", "flashinfer_cutedsl", "nvfp4"),
]


@pytest.mark.parametrize("msg,backend,quant", MOE_LINES)
@pytest.mark.parametrize("proc", ["(EngineCore_DP0 pid=9) ", ""])
def test_moe_line_forms(msg, backend, quant, proc):
    f = parse(line(msg, proc=proc))
    assert (f["moe_backend"], f["moe_quant"]) == (backend, quant)
    assert f["evidence"]["moe"].endswith(msg)


ATTENTION_LINES = [
    ("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN'].", "flashinfer"),
    ("Using TRITON_ATTN attention backend out of potential backends: ['TRITON_ATTN']", "triton_attn"),  # 0.12
    ("Using AttentionBackendEnum.FLASH_ATTN backend.", "flash_attn"),
    ("Using FLASHINFER attention backend.", "flashinfer"),
    ("Using Flash Attention backend on V1 engine.", "flash_attn"),
]


@pytest.mark.parametrize("msg,backend", ATTENTION_LINES)
def test_attention_line_forms(msg, backend):
    assert parse(line(msg))["attention_backend"] == backend


@pytest.mark.parametrize(
    "msg,kernel,backend",
    [
        ("Using CutlassNvFp4LinearKernel for NVFP4 GEMM", "CutlassNvFp4LinearKernel", "cutlass"),
        ("Using FlashInferB12xNvFp4LinearKernel for NVFP4 GEMM", "FlashInferB12xNvFp4LinearKernel", "flashinfer_b12x"),
        (
            "Using NvFp4LinearBackend.FLASHINFER_CUTLASS for NVFP4 GEMM",
            "NvFp4LinearBackend.FLASHINFER_CUTLASS",
            "flashinfer_cutlass",
        ),
        (
            "Selected FlashInferFP8ScaledMMLinearKernel for ModelOptFp8LinearMethod",
            "FlashInferFP8ScaledMMLinearKernel",
            "flashinfer",
        ),
        ("Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod", "CutlassFP8ScaledMMLinearKernel", "cutlass"),
    ],
)
def test_linear_kernel_forms(msg, kernel, backend):
    f = parse(line(msg))
    assert f["linear_kernels"] == [kernel] and f["linear_backend"] == backend


def test_linear_fallbacks_and_mixed_kernels():
    text = "\n".join(
        [
            line("Using FlashInferB12xNvFp4LinearKernel for NVFP4 GEMM"),
            line(
                "--linear-backend=flashinfer_b12x has no kernel for this linear layer type; using automatic selection "
                "for that layer type.",
                "WARNING",
            ),
            line("Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod"),
            line("NVFP4 linear falling back to the slow and unoptimized emulation backend for this layer.", "WARNING"),
        ]
    )
    f = parse(text)
    assert f["linear_backend"] == "mixed"
    assert len(f["linear_fallbacks"]) == 2 and "emulation" in f["linear_fallbacks"][1]


@pytest.mark.parametrize(
    "text,version,model",
    [
        ("INFO 11-29 17:00:01 [api_server.py:1046] vLLM API server version 0.12.0", "0.12.0", ""),
        (
            "(APIServer pid=3) INFO 11-29 17:00:01 [utils.py:299] vLLM server version 0.22.1, serving model /m/x",
            "0.22.1",
            "/m/x",
        ),
        (
            "(APIServer pid=3) INFO 11-29 17:00:01 [api_utils.py:339]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0rc1.dev9+g1\n"
            "(APIServer pid=3) INFO 11-29 17:00:01 [api_utils.py:339]   █▄█▀ █     █     █     █  model   /m/y",
            "0.33.0rc1.dev9+g1",
            "/m/y",
        ),
        (
            "INFO 11-29 17:00:09 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: model='/m/z', "
            "speculative_config=None",
            "0.32.0",
            "/m/z",
        ),
        (
            "INFO 08-01 10:00:00 llm_engine.py:176] Initializing an LLM engine (v0.6.3) with config: model='/m/o'",
            "0.6.3",
            "/m/o",
        ),
    ],
)
def test_version_forms(text, version, model):
    f = parse(text)
    assert (f["vllm_version"], f["served_model"]) == (version, model)


def test_non_default_args_are_literals_never_code(tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"{{'model': __import__('os').system('touch {marker}')}}"
    assert parse(line("non-default args: " + hostile))["non_default_args"] == {}
    assert not marker.exists()
    cut = parse(line("non-default args: {'model': '/m', 'max_num_s"))  # cut off mid-line: the whole pairs count
    assert cut["non_default_args"] == {"model": "/m"} and cut["confidence"] == "low"
    assert any("pair by pair" in r for r in cut["repairs"])


def test_speculative_from_engine_config_and_json_string():
    f = parse(
        line(
            "Initializing a V1 LLM engine (v0.24.0) with config: model='/m', speculative_config="
            "SpeculativeConfig(method='mtp', model='/m', num_spec_tokens=3), quantization=fp8"
        )
    )
    assert (f["speculative"]["method"], f["speculative"]["num_speculative_tokens"]) == ("mtp", 3)
    g = parse(
        line(
            """non-default args: {'speculative_config': '{"method":"mtp","num_speculative_tokens":2,"moe_backend":"TRITON"}'}"""
        )
    )
    assert g["speculative"]["requested_moe_backend"] == "triton"


def test_acceptance_rate_forms():
    text = "\n".join(
        [
            line(
                "SpecDecoding metrics: Mean acceptance length: 2.86, Accepted: 52 tokens, Drafted: 56 tokens, "
                "Per-position acceptance rate: 0.964, 0.893, Avg Draft acceptance rate: 92.9%",
                proc="(APIServer pid=1) ",
            ),
            "INFO 08-01 10:00:00 metrics.py:396] Speculative metrics: Draft acceptance rate: 0.651, System efficiency: 0.5",
        ]
    )
    assert parse(text)["spec_acceptance_rates"] == [0.929, 0.651]


# --- traps: lines that look like the answer but are about another model ----------------------------


def test_draft_vision_and_allreduce_lines_never_become_the_main_answer():
    text = "\n".join(
        [
            line("Using backend AttentionBackendEnum.TORCH_SDPA for vit attention"),
            line("Using TRITON_ATTN attention backend for the vision encoder"),
            line("Using FlashInfer all-reduce backend."),
            line("Using CUSTOM_ALLREDUCE backend."),
            line("Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN']"),
            line("Using 'FLASHINFER_B12X' NvFp4 MoE backend out of potential backends: ['FLASHINFER_B12X']"),
            line("Loading drafter model..."),
            line("Using TRITON Unquantized MoE backend out of potential backends: ['TRITON']"),
            line("Using TRITON_ATTN attention backend out of potential backends: ['TRITON_ATTN']"),
            line("Model loading took 20.57 GiB memory and 139.645153 seconds"),
            line("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER']"),
        ]
    )
    f = parse(text)
    assert f["moe_backend"] == "marlin"  # the first line of the main model wins
    assert f["speculative"]["draft_moe_backend"] == "triton"
    assert f["speculative"]["draft_attention_backend"] == "triton_attn"
    assert f["attention_backend"] == "flashinfer"
    assert len(f["other_model_lines"]) == 4


# --- noise ----------------------------------------------------------------------------------------


def _compose(t):
    return "\n".join(f"vllm-spark-1  | {x}" for x in t.split("\n"))


def _docker_ts(t):
    return "\n".join(f"2026-11-29T18:31:07.{i:09d}Z {x}" for i, x in enumerate(t.split("\n")))


def _journald(t):
    return "\n".join(f"Nov 29 18:31:07 spark-1 vllm[1234]: {x}" for x in t.split("\n"))


def _kubernetes(t):
    return "\n".join(f"2026-11-29T18:31:07.123456789Z stdout F {x}" for x in t.split("\n"))


def _compose_ts(t):
    return _compose(_docker_ts(t))


def _ansi(t):
    return "\n".join(
        x.replace("INFO", "\x1b[32mINFO\x1b[0m").replace("WARNING", "\x1b[1;33mWARNING\x1b[0m") for x in t.split("\n")
    )


def _nested_tags(t):
    return t.replace("(EngineCore pid=182) ", "(EngineCore_DP0 pid=9) (Worker pid=10) ")


def _crlf_and_bars(t):
    bar = "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]\r"
    return "\r\n".join(bar + x if "Loading weights" in x else x for x in t.split("\n"))


def _interleaved_traceback(t):
    tb = (
        'Traceback (most recent call last):\n  File "/x/y.py", line 3, in <module>\n    import triton_kernels\n'
        "ModuleNotFoundError: No module named 'triton_kernels'\n"
    )
    out = t.split("\n")
    out.insert(12, tb.rstrip("\n"))
    return "\n".join(out)


NOISE = [
    _compose,
    _docker_ts,
    _journald,
    _kubernetes,
    _compose_ts,
    _ansi,
    _nested_tags,
    _crlf_and_bars,
    _interleaved_traceback,
]
KEY_FACTS = (
    "vllm_version",
    "served_model",
    "moe_backend",
    "moe_quant",
    "attention_backend",
    "linear_backend",
    "unknown_env",
    "speculative",
    "spec_acceptance_rates",
    "kv_cache_tokens",
    "model_load_gib",
    "startup_complete",
    "failure",
    "non_default_args",
)


@pytest.mark.parametrize("noise", NOISE, ids=lambda n: n.__name__)
def test_noise_does_not_change_the_facts(noise):
    text = read("v0.24-nvfp4-marlin-mtp.log")
    clean, noisy = parse(text), parse(noise(text))
    assert {k: noisy[k] for k in KEY_FACTS} == {k: clean[k] for k in KEY_FACTS}


@pytest.mark.parametrize("noise", NOISE, ids=lambda n: n.__name__)
def test_noise_does_not_change_the_failure_class(noise):
    text = read("v0.24-fp8-deep-gemm-assert.log")
    assert parse(noise(text))["failure"]["class"] == "deep_gemm_assert"


def test_cut_off_anywhere_never_raises_and_keeps_what_came_before():
    text = read("v0.24-nvfp4-marlin-mtp.log")
    moe_end = text.index("'MARLIN']\n") + len("'MARLIN']")
    for cut in range(0, len(text), 37):
        f = parse(text[:cut])
        if cut > moe_end:
            assert f["moe_backend"] == "marlin"
        if not f["startup_complete"]:
            assert f["failure"]["class"] == "ended_before_ready"  # never reached readiness: says so, not a crash


def test_offline_llm_api_log_is_ready_without_a_server():
    text = "\n".join(
        [
            "INFO 11-29 10:00:00 [llm.py:343] Supported tasks: ['generate']",
            "INFO 11-29 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.28.0) with config: model='/m'",
            "INFO 11-29 10:00:02 [fp8.py:301] Using TRITON Fp8 MoE backend out of potential backends: [TRITON]",
            "INFO 11-29 10:00:40 [core.py:210] init engine (profile, create kv cache, warmup model) took 30.1 seconds",
        ]
    )
    f = parse(text)
    assert f["startup_complete"] and f["failure"] == {} and f["moe_backend"] == "triton"
    server = parse(text.replace("[llm.py:343] Supported tasks", "[api_server.py:1] Starting vLLM API server"))
    assert not server["startup_complete"]  # a server is ready only when it says so


def test_non_fatal_error_before_startup_is_not_a_failure():
    text = "\n".join(
        [
            line("Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'vllm._C'\")", "ERROR"),
            line(
                "Cannot use FA version 2 is not supported due to FA2 is only supported on devices with compute "
                "capability >= 8",
                "ERROR",
            ),
            line("Using TRITON Fp8 MoE backend out of potential backends: [TRITON]"),
            "(APIServer pid=1) INFO:     Application startup complete.",
        ]
    )
    follower = Follower()
    for x in text.split("\n"):
        follower.feed(x)
        assert follower.fatal is None
    assert follower.ready and follower.facts()["failure"] == {}


def test_periodic_lines_are_cheap_but_acceptance_is_kept():
    stats = line(
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 20.6 tokens/s, "
        "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%",
        proc="(APIServer pid=1) ",
    )
    spec = line(
        "SpecDecoding metrics: Mean acceptance length: 2.42, Avg Draft acceptance rate: 71.2%",
        proc="(APIServer pid=1) ",
    )
    f = parse(read("v0.24-nvfp4-marlin-mtp.log") + "\n".join([stats, spec] * 50))
    assert f["spec_acceptance_rates"][-50:] == [0.712] * 50 and len(f["spec_acceptance_rates"]) == 52


# --- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b",
    [
        ("marlin", "MARLIN"),
        ("flashinfer_b12x", "FLASHINFER_B12X"),
        ("flashinfer", "AttentionBackendEnum.FLASHINFER"),
        ("flashinfer_b12x", "'FLASHINFER_B12X'"),
        ("deep_gemm", "DEEPGEMM"),
        ("deep_gemm", "BATCHED_DEEPGEMM"),
        ("cutlass", "VLLM_CUTLASS"),
        ("flashinfer_trtllm", "FlashInfer TRTLLM"),
        ("flash_attn", "FLASH_ATTN"),
        ("flashinfer_cutedsl", "FLASHINFER_CUTEDSL_BATCHED"),
        ("triton", "BATCHED_TRITON"),
    ],
)
def test_names_normalise_to_the_flag_value(a, b):
    assert normalise_backend(a) == normalise_backend(b) == a


def test_auto_is_no_claim_and_kernels_map_to_flags():
    assert normalise_backend("auto") == normalise_backend("") == ""
    assert normalise_backend("marlin") != normalise_backend("flashinfer_b12x")
    assert linear_backend_of("MarlinNvFp4LinearKernel") == "marlin"
    assert linear_backend_of("FlashInferCutlassNvFp4LinearKernel") == "flashinfer_cutlass"
