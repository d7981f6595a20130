"""Issue 39: a crash while serving is no failed start, candidates passed over are no failure, the older wordings of
what loaded (read from vLLM's release sources), exceptions in a paste's prose, kernels' own failure classes, and
lint on what people paste (guides, benchmark entry points, `LLM(...)`, host variables docker never passes, the quant
read from a model's name)."""

from __future__ import annotations

import pytest

from agent.hostside.logparse import Follower, clean, parse, split_header
from agent.judging import lint as checks
from agent.judging.verdict import attest
from agent.planning.launch import extract

pytestmark = pytest.mark.unit

H = "INFO 02-01 10:00:00 [x.py:1] "
D = "DEBUG 02-01 10:00:00 [nvfp4.py:1] "
E = "ERROR 02-01 10:00:00 [core.py:1] "
REJECTED = (
    D + "NvFp4 MoE backend 'FLASHINFER_TRTLLM' does not support the deployment configuration since kernel does not "
)
REJECTED += "support current device."
DIED = [E + "EngineCore failed to start.", "RuntimeError: Engine core initialization failed. See root cause above."]


def body_only(line: str) -> str:
    """The line as pasted without vLLM's `LEVEL MM-DD hh:mm:ss [file.py:N]` prefix."""
    return split_header(clean(line))[1]


# --- a crash while serving ---------------------------------------------------------------------------------------


def test_an_engine_that_served_and_then_died_is_a_runtime_failure_not_a_failed_start():
    text = "\n".join(
        [
            'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            E + "EngineCore encountered a fatal error.",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 9, in run_busy_loop',
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]
    )
    facts = parse(text)
    assert facts["failure"] == {} and facts["startup_complete"]
    assert facts["runtime_failure"]["class"] == "cuda_error"
    verdict = attest(text)["verdict"]
    assert verdict["verdict"] == "failed" and verdict["reasons"][0].startswith("died while serving")


def test_an_error_status_is_no_proof_of_serving():
    text = 'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 400 Bad Request\n' + "\n".join(DIED)
    assert parse(text)["failure"]["class"] in ("engine_init_failed", "root_cause_not_in_excerpt")


def test_the_step_dump_is_read_as_facts():
    line = (
        E + "Dumping input data for V1 LLM engine (v0.12.0) with config: model='org/M-AWQ', speculative_config=None, "
        "quantization=awq_marlin, enforce_eager=False"
    )
    facts = parse(line)
    assert (facts["vllm_version"], facts["served_model"], facts["quantization"]) == (
        "0.12.0",
        "org/M-AWQ",
        "awq_marlin",
    )
    assert facts["failure"] == {} and facts["runtime_failure"]["class"] == "root_cause_not_in_excerpt"


def test_a_failure_declared_before_the_serving_line_moves_to_the_runtime_failure():
    follower = Follower()
    follower.feed(E + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    assert follower.fatal is None  # EngineDeadError itself says the engine had been serving


# --- candidates passed over --------------------------------------------------------------------------------------


def test_a_candidate_passed_over_is_no_failure_when_another_is_selected():
    selected = H + "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM', 'MARLIN']."
    follower = Follower()
    follower.feed(REJECTED + "\n" + selected + "\n" + H + "Application startup complete.")
    assert follower.fatal is None
    facts = follower.facts()
    assert facts["failure"] == {} and facts["moe_backend"] == "marlin"
    assert "passed_over:flashinfer_trtllm" in facts["evidence"]


def test_the_candidate_that_was_asked_for_fails_the_start():
    args = H + "non-default args: {'model': 'm', 'moe_backend': 'flashinfer_trtllm'}"
    follower = Follower()
    follower.feed(args + "\n" + REJECTED)
    assert follower.fatal is not None and follower.fatal["backend"] == "flashinfer_trtllm"


def test_a_candidate_passed_over_explains_a_start_where_nothing_was_selected():
    failure = parse("\n".join([REJECTED, *DIED]))["failure"]
    assert failure["class"] == "unsupported_backend" and failure["backend"] == "flashinfer_trtllm"


def test_a_candidate_passed_over_does_not_explain_a_start_that_selected_its_part():
    selected = H + "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM', 'MARLIN']."
    failure = parse("\n".join([REJECTED, selected, *DIED]))["failure"]
    assert failure["class"] != "unsupported_backend"


def test_a_candidate_pasted_without_its_level_is_read_as_selection_going_on():
    refused, selected = body_only(REJECTED), body_only(H + "Using 'MARLIN' NvFp4 MoE backend out of potential ")
    assert parse("\n".join([refused, selected + "backends: ['MARLIN'].", *DIED]))["failure"]["class"] != (
        "unsupported_backend"
    )
    alone = parse(refused)["failure"]  # nothing else in the paste: the refusal is what it shows
    assert (alone["class"], alone["backend"]) == ("unsupported_backend", "flashinfer_trtllm")


def test_a_refusal_without_a_reason_still_names_its_backend():
    # oracle/nvfp4.py words it without "since ..." when the kernel gave no reason
    raised = "ValueError: NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration."
    failure = parse("\n".join([raised, *DIED]))["failure"]
    assert (failure["class"], failure["backend"]) == ("unsupported_backend", "cutlass")


# --- what loaded, as older releases said it (vLLM's own source at each release; docs/vllm-notes.md) -------------

WORDINGS = [  # (line, moe_backend, moe_quant, linear_backend, quantization)
    ("Using Cutlass for ModelOptNvFp4FusedMoE.", "cutlass", "nvfp4", "", ""),
    ("Using Marlin for ModelOptNvFp4FusedMoE.", "marlin", "nvfp4", "", ""),
    ("Using FlashInfer CUTLASS kernels for ModelOptNvFp4FusedMoE.", "flashinfer_cutlass", "nvfp4", "", ""),
    ("Using FlashInfer TensorRT-LLM kernels for ModelOptNvFp4FusedMoE.", "flashinfer_trtllm", "nvfp4", "", ""),
    ("Using FlashInfer kernels for ModelOptNvFp4FusedMoE.", "flashinfer", "nvfp4", "", ""),
    ("Using Cutlass for CompressedTensorsW4A4Nvfp4MoEMethod.", "cutlass", "nvfp4", "", ""),
    (
        "Using FlashInfer CUTLASS kernels for CompressedTensorsW4A4Nvfp4MoEMethod.",
        "flashinfer_cutlass",
        "nvfp4",
        "",
        "",
    ),
    ("Using FlashInfer kernels for NVFP4 path.", "flashinfer", "nvfp4", "", ""),
    ("Using FlashInfer CUTLASS kernels", "flashinfer_cutlass", "fp8", "", ""),
    ("Using FlashInfer TensorRT-LLM kernels", "flashinfer_trtllm", "fp8", "", ""),
    ("Using vLLM CUTASS backend for NvFp4 MoE", "cutlass", "nvfp4", "", ""),
    ("Using vLLM MARLIN backend for NvFp4 MoE", "marlin", "nvfp4", "", ""),
    ("Using FlashInfer TRTLLM backend for NvFp4 MoE", "flashinfer_trtllm", "nvfp4", "", ""),
    ("Using vLLM CUTLASS backend for FP8 MoE", "cutlass", "fp8", "", ""),
    ("Using DeepGemm kernels for Fp8MoEMethod.", "deep_gemm", "fp8", "", ""),
    ("Using CutlassBlockScaledGroupedGemm kernels for Fp8MoEMethod.", "cutlass", "fp8", "", ""),
    ("Using Cutlass BlockScaled GroupedGemm backend for FP8 MoE", "cutlass", "fp8", "", ""),
    ("Using FlashInfer FP8 MoE CUTLASS backend for SM90/SM100", "flashinfer_cutlass", "fp8", "", ""),
    ("Using FlashInfer MXFP4 BF16 backend for SM90", "flashinfer", "mxfp4", "", "mxfp4"),
    ("Using Marlin backend", "marlin", "mxfp4", "", "mxfp4"),
    ("[get_mxfp4_backend_with_lora] Using Triton backend", "triton", "mxfp4", "", "mxfp4"),
    ("Using Marlin backend for mxfp4 lora", "marlin", "mxfp4", "", "mxfp4"),
    ("Using MarlinExperts for MXFP4 MoE", "marlin", "mxfp4", "", "mxfp4"),
    ("Using flashinfer-cutlass for NVFP4 GEMM", "", "", "flashinfer_cutlass", ""),
    ("Using flashinfer-trtllm for FP4", "", "", "flashinfer_trtllm", ""),
    ("Using MarlinLinearKernel for GPTQMarlinLinearMethod", "", "", "marlin", "gptq_marlin"),
    ("Using MacheteLinearKernel for AWQMarlinLinearMethod", "", "", "machete", "awq_marlin"),
    ("Selected MarlinLinearKernel for CompressedTensorsWNA16", "", "", "marlin", "compressed-tensors"),
]


@pytest.mark.parametrize(("message", "moe", "quant", "linear", "method"), WORDINGS, ids=[w[0][:48] for w in WORDINGS])
def test_older_wordings_of_what_loaded(message, moe, quant, linear, method):
    facts = parse(H + message)
    got = (facts["moe_backend"], facts["moe_quant"], facts["linear_backend"], facts["quantization"])
    assert got == (moe, quant, linear, method)


def test_triton_with_a_period_is_still_xpu_attention():
    facts = parse(H + "Using Triton backend.")
    assert facts["attention_backend"] == "triton" and facts["moe_backend"] == ""


def test_the_engine_config_names_the_method_before_any_line_does():
    config = H + "Initializing a V1 LLM engine (v0.11.0) with config: model='m', quantization=gptq, enforce_eager=False"
    assert parse(config + "\n" + H + "Using MarlinLinearKernel for GPTQMarlinLinearMethod")["quantization"] == "gptq"


# --- an exception inside prose -------------------------------------------------------------------------------------

FRAME = '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 9, in __init__'


def test_an_exception_in_prose_beside_vllm_frames_is_the_cause_at_low_confidence():
    text = "\n".join(["Traceback (most recent call last):", FRAME, "and then it dies with KeyError: 'model.embed'"])
    facts = parse(text)
    assert facts["failure"]["root_cause"] == "KeyError: 'model.embed'"
    assert facts["confidence"] == "low" and any("prose" in r for r in facts["repairs"])


def test_an_exception_in_prose_without_vllm_frames_is_not_taken():
    facts = parse("I once saw KeyError: 'x' in another program\nnothing else here")
    assert facts["confidence"] == ""


# --- kernels' own failure classes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "cls", "backend", "requires"),
    [
        (
            "RuntimeError: No supported CUDA architectures found for major versions [10].",
            "flashinfer_jit_arch",
            "flashinfer",
            "compute capability 10.x (FlashInfer's JIT targets)",
        ),
        (
            "ValueError: vLLM CUTLASS FP8 MoE backend is disabled for this configuration.",
            "cutlass_disabled",
            "cutlass",
            "",
        ),
        (
            "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: 65536.",
            "triton_shared_memory",
            "triton",
            "98304 bytes of shared memory per block (this GPU has 65536)",
        ),
        (
            "RuntimeError: No compiled cutlass_scaled_mm for CUDA device capability: 120. Required capability: 90 or 100",
            "unsupported_backend",
            "cutlass",
            "compute capability 90 or 100",
        ),
        (
            "RuntimeError: Assertion error (csrc/apis/hyperconnection.hpp:56): Unsupported architecture",
            "deep_gemm_assert",
            "deep_gemm",
            "",
        ),
        (  # DG_HOST_ASSERT prints its condition: every major it names is accepted
            "RuntimeError: Assertion error (csrc/apis/attention.hpp:88): arch_major == 10 or (arch_major == 12 and is_fp4)",
            "deep_gemm_assert",
            "deep_gemm",
            "compute capability 10.x or 12.x (DeepGEMM)",
        ),
        (
            "RuntimeError: Assertion error (csrc/jit_kernels/impls/sm90.hpp:45): device_runtime->get_arch_major() == 9",
            "deep_gemm_assert",
            "deep_gemm",
            "compute capability 9.x (DeepGEMM)",
        ),
    ],
)
def test_kernel_errors_name_their_family_and_what_the_chip_must_have(line, cls, backend, requires):
    failure = parse(line)["failure"]
    assert (failure["class"], failure["backend"], failure["requires"]) == (cls, backend, requires)


def test_a_cutlass_disabled_warning_explains_a_start_that_fails_without_a_cause():
    warning = "WARNING 02-01 10:00:00 [fp8.py:1] vLLM CUTLASS FP8 MoE backend is disabled for this configuration."
    failure = parse("\n".join([warning, *DIED]))["failure"]
    assert failure["class"] == "cutlass_disabled" and failure["backend"] == "cutlass"


# --- lint on what people paste --------------------------------------------------------------------------------------

GB10 = checks.target_for("gb10", "0.24.0")


def _findings(text: str, name: str = "paste.sh") -> list[checks.Finding]:
    return [f for one in extract(text, name) for f in checks.lint(one, GB10).findings]


def test_a_variable_the_host_exports_but_docker_never_passes_is_flagged():
    text = "export VLLM_USE_DEEP_GEMM=0\ndocker run --gpus all vllm/vllm-openai:v0.24.0 org/M-FP8\n"
    found = [f for f in _findings(text) if f.rule == "host-env-not-passed"]
    assert [(f.line, f.message.split(" ")[0]) for f in found] == [(1, "VLLM_USE_DEEP_GEMM")]
    passed = "export VLLM_USE_DEEP_GEMM=0\ndocker run -e VLLM_USE_DEEP_GEMM vllm/vllm-openai:v0.24.0 org/M-FP8\n"
    assert not [f for f in _findings(passed) if f.rule == "host-env-not-passed"]
    env_file = "export VLLM_USE_DEEP_GEMM=0\ndocker run --env-file .env vllm/vllm-openai:v0.24.0 org/M-FP8\n"
    assert not [f for f in _findings(env_file) if f.rule == "host-env-not-passed"]


def test_the_quant_read_from_a_model_name_is_said_to_be_a_guess():
    result = checks.lint(extract("vllm serve org/Qwen3-30B-A3B-FP8\n", "x.sh")[0], GB10)
    assert (result.quant, result.quant_source) == ("fp8", "name")
    deep_gemm = [f for f in result.findings if f.rule == "gb10-fp8-no-deep-gemm"]
    assert deep_gemm and "model's name" in deep_gemm[0].message
    given = checks.lint(
        extract("vllm serve org/Qwen3-30B-A3B-FP8\n", "x.sh")[0], checks.target_for("gb10", "0.24.0", "fp8")
    )
    assert given.quant_source == "given" and "model's name" not in " ".join(f.message for f in given.findings)


@pytest.mark.parametrize(
    ("text", "model"),
    [
        ("python benchmarks/benchmark_throughput.py --model org/M-FP8 --input-len 8\n", "org/M-FP8"),
        ("python3 benchmarks/benchmark_latency.py --model org/M-NVFP4\n", "org/M-NVFP4"),
        ("vllm bench throughput --model org/M-AWQ --num-prompts 4\n", "org/M-AWQ"),
        ("```python\nfrom vllm import LLM\nllm = LLM(model='org/M-GPTQ', tensor_parallel_size=2)\n```\n", "org/M-GPTQ"),
    ],
)
def test_engine_launches_that_never_say_vllm_serve(text, model):
    assert [one.model for one in extract(text, "x.md")] == [model]


def test_llm_api_keywords_and_environment_become_flags_and_variables():
    text = (
        "import os\nfrom vllm import LLM\nos.environ['VLLM_ATTENTION_BACKEND'] = 'FLASHINFER'\n"
        "name = 'org/M'\nllm = LLM(model=name, quantization='fp8', enforce_eager=True)\n"
    )
    (one,) = extract(text, "x.py")
    assert (one.kind, one.model, one.flag("--quantization"), one.flag("--enforce-eager")) == (
        "python",
        "org/M",
        "fp8",
        "",
    )
    assert one.env == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"} and one.env_lines["VLLM_ATTENTION_BACKEND"] == 3


def test_a_guide_section_without_a_command_line_gets_its_findings_where_it_says_them():
    text = (
        "# On vLLM\nServe the model `org/Qwen3-30B-A3B-FP8` with:\n\n- `VLLM_ATTENTION_BACKEND=FLASHINFER`\n"
        "- and pass `--moe-backend deep_gemm`\n"
    )
    found = _findings(text, "guide.md")
    dead = [f for f in found if f.rule == "dead-vllm-attention-backend"]
    assert dead and dead[0].line == 4
    wrong_backend = [f for f in found if f.rule == "gb10-fp8-moe-deep-gemm"]
    assert wrong_backend and wrong_backend[0].line == 5
    assert any(f.rule == "gb10-fp8-no-deep-gemm" for f in found)  # the quant from the model it names


def test_a_model_cards_table_of_settings_is_read_where_it_says_them():
    text = (
        "# vLLM\nServe `org/Qwen3-30B-A3B-FP8` with\n\n| variable | value |\n|---|---|\n"
        "| `VLLM_ATTENTION_BACKEND` | `FLASHINFER` |\n| VLLM_USE_V1 | whether to use the V1 engine |\n"
    )
    (guide,) = extract(text, "card.md")
    assert guide.env == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}  # a row that describes is no setting
    dead = [f for f in _findings(text, "card.md") if f.rule == "dead-vllm-attention-backend"]
    assert dead and dead[0].line == 6


def test_text_without_any_vllm_setting_gives_no_guide_launch():
    assert extract("# Notes\nWe use vLLM sometimes. Nothing to set.\n", "notes.md") == []
