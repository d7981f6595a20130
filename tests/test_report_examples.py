"""The example specs reproduce the article's two backend sweeps (checked through the real spec loader)."""

from pathlib import Path

import pytest

from agent.planning.spec import load_spec

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_nvfp4_example_is_the_articles_backend_sweep():
    spec = load_spec(EXAMPLES / "gb10-nvfp4.toml")
    assert [(c.name, c.quant) for c in spec.checkpoints] == [("nv", "nvfp4"), ("uns", "nvfp4"), ("uns-fast", "nvfp4")]
    assert spec.moe_backends == ["marlin", "flashinfer_b12x"]
    assert (spec.concurrency, spec.duration_s, spec.warmup, spec.repeats) == ([1, 2, 4, 8, 16], 60.0, 1, 3)
    assert spec.server.max_model_len == 262144 and spec.server.gpu_memory_utilization == 0.85
    assert not spec.server.speculative  # the backend sweep: speculative off (the first value of its axis)
    assert "@sha256:" in spec.image
    # the MTP round: MTP on for every checkpoint on marlin, never on b12x
    assert spec.design.server["speculative"] == ["", '{"method":"mtp","num_speculative_tokens":2}']
    assert spec.design.exclude == [
        {"moe_backend": "flashinfer_b12x", "speculative": '{"method":"mtp","num_speculative_tokens":2}'}
    ]


def test_fp8_example_has_six_moe_backends_and_the_default_with_and_without_the_deep_gemm_rule():
    spec = load_spec(EXAMPLES / "gb10-fp8.toml")
    assert [(c.name, c.quant) for c in spec.checkpoints] == [("fp8", "fp8")]
    assert sorted(spec.moe_backends) == sorted(
        ["triton", "marlin", "deep_gemm", "cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "auto"]
    )
    assert spec.design.env == {"rules": {}, "no-deep-gemm-rule": {"VLLM_USE_DEEP_GEMM": "1"}}
    assert spec.design.include == [{"env": "rules"}, {"moe_backend": "auto", "env": "no-deep-gemm-rule"}]
    assert (spec.concurrency, spec.duration_s, spec.warmup, spec.repeats) == ([1, 2, 4, 8, 16], 60.0, 1, 3)
