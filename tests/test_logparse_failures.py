"""Failure classes, and the incremental Follower the host uses to stop a doomed start early."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent.hostside.logparse import Follower, classify_failure, parse

pytestmark = pytest.mark.unit

LOGS = Path(__file__).parent / "data" / "logs" / "synthetic"
ENGINE = "(EngineCore_DP0 pid=90) "
STARTING = [
    "(APIServer pid=7) INFO 11-29 19:02:10 [api_utils.py:273] non-default args: {'model': '/m'}",
    ENGINE + "INFO 11-29 19:02:20 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: model='/m'",
]
DIED = (
    "(APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)


def engine_traceback(*tail: str) -> list[str]:
    """What vLLM prints when the engine core dies during startup: a log line, then a bare traceback."""
    return [
        ENGINE + "ERROR 11-29 19:03:52 [core.py:1012] EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 1003, in run_engine_core',
        "    engine_core = EngineCoreProc(*args, **kwargs)",
        *tail,
    ]


CASES = {
    "deep_gemm_assert": [
        "Assertion error (/workspace/DeepGEMM/csrc/jit_kernels/impls/hyperconnection.hpp:56): Unsupported architecture",
        "AssertionError: DeepGemmQuantScaleFMT oracle cache not initialized",
    ],
    "no_moe_backend": ["NotImplementedError: No NvFp4 MoE backend supports the deployment configuration."],
    "unsupported_moe_backend": [
        "ValueError: moe_backend='b12x' is not supported for FP8 MoE. Expected one of ['triton', 'deep_gemm']"
    ],
    "unsupported_backend": [
        "ValueError: VLLM_CUTLASS NvFp4 MoE backend does not support the deployment "
        "configuration since the current device capability 12.1 is not supported.",
        "AssertionError: FusedMoE flashinfer kernels are only supported for Llama4",
        "RuntimeError: FlashInfer TRTLLM MoE is disabled for this configuration",
    ],
    "invalid_args": [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
    ],
    "attention_backend_invalid": [
        "ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this "
        "configuration. Reason: ['compute capability not supported']"
    ],
    "oom": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "119.70 GiB of which 1.12 GiB is free."
    ],
    "free_memory_check": [
        "ValueError: Free memory on device cuda:0 (40.1/119.7 GiB) on startup is less than desired "
        "GPU memory utilization (0.85, 101.7 GiB)."
    ],
    "ptxas_arch": [
        "ptxas /tmp/x.ptx, line 1874; error   : Feature '.kind::mxf4nvf4' requires .target sm_121a",
        "ptxas fatal   : Ptx assembly aborted due to errors",
        "cutlass.base_dsl.common.DSLRuntimeError: Error during runtime code generation: ptxas failed",
    ],
    "flashinfer_version": [
        "RuntimeError: flashinfer-cubin version (0.6.8) does not match flashinfer version (0.6.9). "
        "Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check."
    ],
    "cute_dsl_arch": [
        "cutlass.base_dsl.common.DSLRuntimeError: OpError: expects arch to be one of ['sm_100a', "
        "'sm_121a'], but got sm_121"
    ],
}


@pytest.mark.parametrize("cls", sorted(CASES))
def test_each_failure_class(cls):
    text = "\n".join(STARTING + engine_traceback(*CASES[cls]) + [DIED])
    failure = classify_failure(text)
    assert failure["class"] == cls
    assert failure["root_cause"] in CASES[cls]
    assert set(failure["evidence"]) & {c for c in CASES[cls]}
    assert failure["draft_model"] is False
    if cls == "unsupported_backend":  # the backend is named, whichever way the message says it
        assert failure["backend"] in ("cutlass", "flashinfer", "flashinfer_trtllm")


def test_nv_err_no_memory_is_oom():
    text = "\n".join(STARTING + ["NVRM: Xid 31 ... NV_ERR_NO_MEMORY while mapping", DIED])
    assert classify_failure(text)["class"] == "oom"


def test_engine_init_failed_names_the_root_cause():
    text = "\n".join(
        STARTING
        + engine_traceback(
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`."
        )
        + [DIED]
    )
    failure = classify_failure(text)
    assert failure["class"] == "engine_init_failed"
    assert failure["root_cause"].startswith("ValueError: No available memory for the cache blocks")
    assert any("EngineCore failed to start" in x for x in failure["evidence"])


def test_engine_death_with_the_cause_printed_after_the_api_server_gave_up():
    # stderr and stdout interleave: the API server's final word can come before the engine's traceback
    text = "\n".join(STARTING + [DIED] + engine_traceback(*CASES["no_moe_backend"]))
    assert classify_failure(text)["class"] == "no_moe_backend"


def test_other_keeps_the_last_exception():
    text = "\n".join(
        STARTING
        + [
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/vllm", line 10',
            "OSError: /m is not a local folder and is not a valid model identifier",
        ]
    )
    failure = classify_failure(text)
    assert failure["class"] == "other"
    assert failure["root_cause"] == "OSError: /m is not a local folder and is not a valid model identifier"


def test_a_ready_server_has_no_failure_even_with_errors_later():
    text = (LOGS / "v0.24-nvfp4-marlin-mtp.log").read_text() + "\n" + "\n".join(engine_traceback(*CASES["oom"]))
    assert classify_failure(text) == {}


# --- the Follower: fatal as soon as the decisive line arrives -------------------------------------


@pytest.mark.parametrize("cls", sorted(CASES))
def test_follower_turns_fatal_on_the_decisive_line_and_not_before(cls):
    lines = STARTING + engine_traceback(*CASES[cls])
    follower = Follower()
    decisive = None
    for i, x in enumerate(lines):
        follower.feed(x + "\n")
        if follower.fatal is not None and decisive is None:
            decisive = i
    # nothing before the first line of the cause may stop the wait, and the class is final at once
    first_cause = len(lines) - len(CASES[cls])
    assert decisive == first_cause
    assert follower.fatal["class"] == cls and not follower.ready


def test_follower_generic_death_waits_for_the_traceback():
    follower = Follower()
    lines = STARTING + engine_traceback("KeyError: 'model.layers.0.mlp.experts.w13_weight_scale'")
    for x in lines[:-1]:
        follower.feed(x)
        assert follower.fatal is None  # "EngineCore failed to start." alone does not say why
    follower.feed(lines[-1])
    assert follower.fatal["class"] == "engine_init_failed"
    assert follower.fatal["root_cause"] == "KeyError: 'model.layers.0.mlp.experts.w13_weight_scale'"


def test_follower_ready_and_facts_match_parse():
    text = (LOGS / "v0.24-nvfp4-marlin-mtp.log").read_text()
    follower = Follower()
    for x in text.splitlines(keepends=True):
        follower.feed(x)
    assert follower.ready and follower.fatal is None
    assert follower.facts() == parse(text)


@pytest.mark.parametrize("seed", range(5))
def test_follower_chunks_at_any_boundary_give_the_same_facts(seed):
    text = "\n".join(p.read_text() for p in sorted(LOGS.glob("*.log")))
    rng = random.Random(seed)
    follower = Follower()
    pos = 0
    while pos < len(text):
        step = rng.randint(1, 400)
        follower.feed_chunk(text[pos : pos + step])
        pos += step
    follower.flush()
    assert follower.facts() == parse(text)


def test_unquantized_moe_error_with_a_quantized_main_model_points_at_the_draft():
    spec_args = (
        "(APIServer pid=7) INFO 11-29 19:02:10 [api_utils.py:273] non-default args: {'model': '/m', "
        "'moe_backend': 'marlin', 'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 2}}"
    )
    main_moe = ENGINE + (
        "INFO 11-29 19:02:22 [nvfp4_moe.py:180] Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN']"
    )
    error = "ValueError: moe_backend='marlin' is not supported for Unquantized MoE. Expected one of ['triton']"
    failure = classify_failure("\n".join([spec_args, main_moe] + engine_traceback(error) + [DIED]))
    assert failure["class"] == "unsupported_moe_backend" and failure["draft_model"] is False
    assert failure["root_cause"].startswith("probably the draft model") and failure["root_cause"].endswith(error)
    without_spec = classify_failure("\n".join([STARTING[0], main_moe] + engine_traceback(error) + [DIED]))
    assert without_spec["root_cause"] == error  # no speculative decoding: no guess
