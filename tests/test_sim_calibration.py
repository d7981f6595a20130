"""The simulator reproduces the article's GB10 findings: from the rate model, and measured over real HTTP
streaming with the agent's own load driver (agent/hostside/loadgen.py)."""

from __future__ import annotations

import random
import statistics

import pytest

from agent.hostside import loadgen
from agent.sim import options
from agent.sim.plan import make_plan
from agent.sim.ratemodel import RateModel

from .test_sim_support import SimServer

pytestmark = pytest.mark.integration

GB10_ENV = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1", "VLLM_USE_DEEP_GEMM": "0"}
MTP = '{"method":"mtp","num_speculative_tokens":2,"moe_backend":"triton"}'


def _model(*argv: str, hardware: str = "gb10", seed: int = 0) -> RateModel:
    opts = options.parse([*argv, "--sim-hardware", hardware], env={})
    plan = make_plan(opts, GB10_ENV)
    assert plan.failure is None, plan.failure
    return RateModel(plan, unlimited=False, rng=random.Random(seed))


def test_marlin_beats_b12x_about_2x_at_every_concurrency_without_crossover():
    marlin = _model("uns-fast", "--moe-backend", "marlin")
    b12x = _model("uns-fast", "--moe-backend", "flashinfer_b12x")
    ratios = [marlin.expected_tok_s(c) / b12x.expected_tok_s(c) for c in (1, 2, 4, 8, 16)]
    assert all(2.0 <= r <= 3.3 for r in ratios), ratios  # article: "a 2.0-3.3x slowdown", "twice as fast even at c=1"
    assert 276 <= marlin.expected_tok_s(8) <= 290  # article: 276 and 283 at c=8 (measured ~2% below: TTFT)


def test_fp8_triton_wins_marlin_loses_9_percent():
    triton, marlin = _model("fp8"), _model("fp8", "--moe-backend", "marlin")
    for c in (1, 2, 4, 8, 16):
        assert marlin.expected_tok_s(c) / triton.expected_tok_s(c) == pytest.approx(0.91, abs=0.01)


def test_nvfp4_with_mtp_beats_fp8_with_mtp_69_percent_single_stream_40_under_load():
    nvfp4 = _model("uns-fast", "--moe-backend", "marlin", "--speculative-config", MTP)
    fp8 = _model("fp8", "--speculative-config", MTP)
    assert nvfp4.expected_tok_s(1) / fp8.expected_tok_s(1) == pytest.approx(1.69, abs=0.02)
    for c in (4, 8, 16):
        assert nvfp4.expected_tok_s(c) / fp8.expected_tok_s(c) == pytest.approx(1.40, abs=0.02)


def test_the_three_nvfp4_variants():
    speed = {name: _model(name, "--moe-backend", "marlin").expected_tok_s(1) for name in ("nv", "uns-fast", "uns")}
    assert speed["nv"] / speed["uns-fast"] == pytest.approx(1.079, abs=0.002)  # article: 7.9% single-thread
    assert speed["uns"] / speed["uns-fast"] == pytest.approx(0.97, abs=0.002)  # article: -3.0%


def test_b200_has_other_winners():
    b12x = _model("uns-fast", "--moe-backend", "b12x", "--sim-vllm-version", "0.29", hardware="b200")
    marlin = _model("uns-fast", "--moe-backend", "marlin", "--sim-vllm-version", "0.29", hardware="b200")
    assert all(b12x.expected_tok_s(c) > marlin.expected_tok_s(c) for c in (1, 8, 16))
    trtllm = _model("fp8", "--moe-backend", "flashinfer_trtllm", hardware="b200")
    assert trtllm.expected_tok_s(8) > _model("fp8", "--moe-backend", "triton", hardware="b200").expected_tok_s(8)


def test_run_to_run_noise_b12x_wide_marlin_narrow_mixed_ten_percent():
    def draws(model, mixed=False, n=400):
        out = []
        for _ in range(n):
            model.new_phase()
            out.append(model.aggregate_tok_s(8, mixed))
        return out

    b12x = draws(_model("uns-fast", "--moe-backend", "flashinfer_b12x"))
    assert 1.7 <= max(b12x) / min(b12x) <= 1.81  # article: "a 2x spread on the same configuration"
    marlin = draws(_model("uns-fast", "--moe-backend", "marlin"))
    assert max(marlin) / min(marlin) <= 1.026  # article: 276 vs 283, "within 2.5%"
    mixed = draws(_model("uns-fast", "--moe-backend", "marlin"), mixed=True)
    mid = statistics.median(mixed)
    assert 0.08 <= (max(mixed) - mid) / mid <= 0.115  # article: mixed profile, "a +-10% spread"


def _windows(sim: SimServer, concurrency: int, duration_s: float, repeats: int, **kw) -> list[dict]:
    results = loadgen.run_levels(
        sim.url,
        kw.pop("model", "uns-fast"),
        [concurrency],
        duration_s,
        0.5,
        repeats,
        kw.pop("prompt_len", 1024),
        kw.pop("output_len", 256),
        **kw,
    )
    assert all(r["ok"] for r in results), results
    return results


def test_marlin_vs_b12x_at_c8_over_real_streaming():
    measured = {}
    for backend in ("marlin", "flashinfer_b12x"):
        with SimServer("uns-fast", "--moe-backend", backend, "--sim-seed", "3", env=GB10_ENV) as sim:
            sim.wait_ready()
            # Short prompts: a 3-s window must not spend a noticeable part of itself in prefill.
            measured[backend] = [r["output_throughput"] for r in _windows(sim, 8, 3.0, 2, prompt_len=64)]
    marlin, b12x = measured["marlin"], measured["flashinfer_b12x"]
    # article: 276 and 283. The low end leaves room for a starved 2-core box delaying the first tokens of a
    # 3-s window; the repeat spread itself is checked on the rate model above.
    assert all(240 <= m <= 295 for m in marlin), marlin
    ratio = statistics.mean(marlin) / statistics.mean(b12x)
    assert 1.8 <= ratio <= 3.5, measured


@pytest.mark.parametrize(
    "model,args,expected",
    [
        ("uns-fast", ["--moe-backend", "marlin"], 0.75),
        ("fp8", [], 0.71),
    ],
)
def test_speculative_acceptance_measured_by_the_load_driver(model, args, expected):
    with SimServer(
        model, *args, "--speculative-config", MTP, "--sim-rate", "unlimited", "--sim-seed", "5", env=GB10_ENV
    ) as sim:
        sim.wait_ready()
        result = _windows(sim, 4, 1.0, 1, model=model, prompt_len=16, output_len=512)[0]
    assert result["spec_decode_acceptance_rate"] == pytest.approx(expected, abs=0.02)
