"""verdict: a cell is valid only if what loaded is what was asked for, and no variable it set was dead."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.hostside.logparse import parse
from agent.judging.verdict import attest, judge, requested_from_args

pytestmark = pytest.mark.unit

LOGS = Path(__file__).parent / "data" / "logs" / "synthetic"
MARLIN_LOG = parse((LOGS / "v0.24-nvfp4-marlin-mtp.log").read_text())


def ask(**axes) -> dict:
    base = {"moe_backend": "", "linear_backend": "", "attention_backend": "", "draft_moe_backend": ""}
    base.update(axes)
    return base


def test_valid_when_everything_asked_for_loaded():
    v = judge(
        ask(
            moe_backend="marlin",
            attention_backend="AttentionBackendEnum.FLASHINFER",
            draft_moe_backend="TRITON",
            linear_backend="cutlass",
        ),
        MARLIN_LOG,
        ["CUTE_DSL_ARCH"],
    )
    assert v["verdict"] == "valid" and v["reasons"] == []
    assert any("'MARLIN' NvFp4" in x for x in v["evidence"])


def test_auto_is_no_claim():
    assert judge(ask(), MARLIN_LOG, [])["verdict"] == "valid"
    assert judge(ask(moe_backend="auto"), MARLIN_LOG, [])["verdict"] == "valid"


@pytest.mark.parametrize(
    "axis,want,reason",
    [
        ("moe_backend", "flashinfer_b12x", "moe: requested flashinfer_b12x, loaded MARLIN"),
        ("attention_backend", "TRITON_ATTN", "attention: requested triton_attn, loaded flashinfer"),
        ("draft_moe_backend", "marlin", "draft moe: requested marlin, loaded TRITON"),
        ("linear_backend", "flashinfer_b12x", "linear: requested flashinfer_b12x, loaded CutlassNvFp4LinearKernel"),
    ],
)
def test_another_backend_makes_the_cell_invalid(axis, want, reason):
    v = judge(ask(**{axis: want}), MARLIN_LOG, [])
    assert v["verdict"] == "invalid" and v["reasons"] == [reason]
    assert v["evidence"]


def test_dead_variable_is_invalid_and_unset_unknowns_are_only_notes():
    v = judge(ask(moe_backend="marlin"), MARLIN_LOG, ["VLLM_FP8_MOE_BACKEND", "CUTE_DSL_ARCH"])
    assert v["verdict"] == "invalid"
    assert v["reasons"] == ["dead variable: VLLM_FP8_MOE_BACKEND (vLLM 0.24.0 does not know it)"]
    assert any("Unknown vLLM environment variable detected: VLLM_FP8_MOE_BACKEND" in x for x in v["evidence"])
    assert any("VLLM_USE_FLASHINFER_MOE_FP4" in n for n in v["notes"])


def test_failed_start_is_failed_with_the_evidence():
    facts = parse((LOGS / "v0.24-fp8-deep-gemm-assert.log").read_text())
    v = judge(ask(moe_backend="deep_gemm"), facts, [])
    assert v["verdict"] == "failed"
    assert v["reasons"] == [
        "failed: deep_gemm_assert: AssertionError: DeepGemmQuantScaleFMT oracle cache not initialized"
    ]
    assert v["evidence"] == facts["failure"]["evidence"]


def test_a_claim_the_log_cannot_confirm_is_invalid():
    facts = parse((LOGS / "v0.13-nvfp4-ansi.log").read_text())  # no linear kernel line, no draft
    v = judge(ask(linear_backend="cutlass", draft_moe_backend="triton"), facts, [])
    assert v["verdict"] == "invalid"
    assert any("does not say" in r for r in v["reasons"]) and len(v["reasons"]) == 2


def test_linear_fallback_and_marlin_weight_only_are_invalid_for_a_linear_claim():
    lines = [
        "INFO 11-29 18:31:07 [nvfp4.py:1] Using FlashInferB12xNvFp4LinearKernel for NVFP4 GEMM",
        "WARNING 11-29 18:31:07 [linear.py:88] --linear-backend=flashinfer_b12x has no kernel for this linear layer "
        "type; using automatic selection for that layer type.",
        "INFO:     Application startup complete.",
    ]
    v = judge(ask(linear_backend="flashinfer_b12x"), parse("\n".join(lines)), [])
    assert v["verdict"] == "invalid" and "fell back" in v["reasons"][0]
    assert (
        judge(ask(linear_backend="flashinfer_b12x"), parse("\n".join([lines[0], lines[2]])), [])["verdict"] == "valid"
    )
    marlin = "WARNING 11-29 18:31:07 [marlin_utils_fp4.py:1] Your GPU does not have native support for FP4 computation"
    v = judge(ask(linear_backend="flashinfer_b12x"), parse("\n".join([lines[0], marlin, lines[2]])), [])
    assert v["reasons"] == ["linear: requested flashinfer_b12x, vLLM used Marlin weight-only FP4"]


def test_requested_from_the_logs_own_args():
    assert requested_from_args(MARLIN_LOG) == ask(moe_backend="marlin", draft_moe_backend="triton")
    result = attest((LOGS / "v0.24-nvfp4-marlin-mtp.log").read_text(), {"moe_backend": "flashinfer_b12x"})
    assert (
        result["requested"]["moe_backend"] == "flashinfer_b12x" and result["requested"]["draft_moe_backend"] == "triton"
    )
    assert result["verdict"]["verdict"] == "invalid"
