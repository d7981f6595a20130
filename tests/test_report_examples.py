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
    assert spec.server["max_model_len"] == 262144 and spec.server["gpu_memory_utilization"] == 0.85
    assert not spec.server["speculative"]
    assert "@sha256:" in spec.image


def test_fp8_example_has_six_moe_backends():
    spec = load_spec(EXAMPLES / "gb10-fp8.toml")
    assert [(c.name, c.quant) for c in spec.checkpoints] == [("fp8", "fp8")]
    assert sorted(spec.moe_backends) == sorted(
        ["triton", "marlin", "deep_gemm", "cutlass", "flashinfer_cutlass", "flashinfer_trtllm"]
    )
    assert (spec.concurrency, spec.duration_s, spec.warmup, spec.repeats) == ([1, 2, 4, 8, 16], 60.0, 1, 3)
