"""Environment rules: GB10 × quant × vLLM version, dead variables, overrides, speculative defaults."""

from __future__ import annotations

import argparse
import json
import tomllib

import pytest
import tomli_w

from agent import logs
from agent.commands import env as env_cmd
from agent.errors import UserError
from agent.hostside import facts
from agent.planning import envrules

pytestmark = pytest.mark.unit

GB10 = facts.classify_gpu({"gpu_name": "NVIDIA GB10", "compute_capability": "12.1"}, facts.load_gpu_rules())
H200 = {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "arch": "h200", "sm": "sm_90a"}
UNKNOWN = {"gpu_name": "NVIDIA H800", "compute_capability": "9.0", "arch": "", "sm": ""}
PROVENANCE_KEYS = {"name", "value", "action", "rule", "reason"}


def row(result: envrules.EnvResult, name: str) -> dict:
    (found,) = [entry for entry in result.provenance if entry["name"] == name]
    return found


# --- what the rules set -------------------------------------------------------------------------


def test_gb10_nvfp4():
    result = envrules.resolve_env(GB10, "nvfp4", "0.24.0", {})
    assert result.env == {
        "VLLM_DISABLE_LOG_LOGO": "1",
        "CUTE_DSL_ARCH": "sm_121a",
        "FLASHINFER_DISABLE_VERSION_CHECK": "1",
    }
    assert row(result, "CUTE_DSL_ARCH")["rule"] == "gb10-cute-dsl-arch"
    assert all(entry["action"] == "set" and entry["reason"] for entry in result.provenance)
    assert result.warnings == []


def test_gb10_fp8_turns_deep_gemm_off():
    result = envrules.resolve_env(GB10, "fp8", "0.24.0", {})
    assert result.env["VLLM_USE_DEEP_GEMM"] == "0"
    assert row(result, "VLLM_USE_DEEP_GEMM")["rule"] == "gb10-fp8-no-deep-gemm"
    assert result.env["CUTE_DSL_ARCH"] == "sm_121a"


def test_h200_gets_no_gb10_rules():
    result = envrules.resolve_env(H200, "fp8", "0.24.0", {})
    assert result.env == {"VLLM_DISABLE_LOG_LOGO": "1"}


def test_facts_without_arch_are_classified_on_the_controller():
    host_without_rules = {"gpu_name": "NVIDIA GB10", "compute_capability": "12.1", "arch": "", "sm": ""}
    assert envrules.resolve_env(host_without_rules, "nvfp4", "0.24.0", {}).env["CUTE_DSL_ARCH"] == "sm_121a"


def test_unknown_arch_applies_no_gpu_rules_and_says_so():
    result = envrules.resolve_env(UNKNOWN, "fp8", "0.24.0", {})
    assert result.env == {"VLLM_DISABLE_LOG_LOGO": "1"}
    assert any("NVIDIA H800" in warning and "no GPU rules apply" in warning for warning in result.warnings)


def test_no_gpu_facts_at_all():
    result = envrules.resolve_env({"gpu_name": ""}, "nvfp4", "0.24.0", {})
    assert any("no GPU rules apply" in warning for warning in result.warnings)


def test_simulated_gb10_host_gets_the_gb10_rules():
    result = envrules.resolve_env(facts.gather(simulate_gpu="gb10"), "nvfp4", "0.24.0", {})
    assert result.env["CUTE_DSL_ARCH"] == "sm_121a"


# --- dead variables and version ranges ----------------------------------------------------------


def test_dead_variables_from_a_model_card_are_dropped_naming_the_flag():
    card = {"VLLM_FP8_MOE_BACKEND": "marlin", "VLLM_USE_FLASHINFER_MOE_FP4": "1"}
    result = envrules.resolve_env(GB10, "nvfp4", "0.24.0", card)
    assert not set(card) & set(result.env)
    for name in card:
        assert row(result, name)["action"] == "drop" and row(result, name)["value"] == card[name]
    assert row(result, "VLLM_FP8_MOE_BACKEND")["rule"] == "dead-vllm-fp8-moe-backend"
    assert sum("--moe-backend" in warning and "dropped" in warning for warning in result.warnings) == 2


@pytest.mark.parametrize("version, dropped", [("0.14.1", False), ("0.15.0", True), ("0.33.0", True)])
def test_attention_backend_variable_is_dead_only_from_0_15(version, dropped):
    result = envrules.resolve_env(GB10, "nvfp4", version, {"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    assert ("VLLM_ATTENTION_BACKEND" not in result.env) == dropped
    assert row(result, "VLLM_ATTENTION_BACKEND")["action"] == ("drop" if dropped else "set")
    assert any("--attention-backend" in warning for warning in result.warnings) == dropped


@pytest.mark.parametrize(
    "version, action, warns",
    [("0.21.0", "set", False), ("0.23.2", "set", True), ("0.24.0", "drop", True), ("v0.25.0rc1", "drop", True)],
)
def test_flashinfer_moe_backend_variable_deprecated_then_removed(version, action, warns):
    result = envrules.resolve_env(GB10, "nvfp4", version, {"VLLM_FLASHINFER_MOE_BACKEND": "latency"})
    assert row(result, "VLLM_FLASHINFER_MOE_BACKEND")["action"] == action
    assert any("VLLM_FLASHINFER_MOE_BACKEND" in warning for warning in result.warnings) == warns


def test_unknown_version_applies_version_independent_rules_and_says_so():
    result = envrules.resolve_env(GB10, "fp8", "", {"VLLM_FP8_MOE_BACKEND": "x", "VLLM_ATTENTION_BACKEND": "X"})
    assert result.env["CUTE_DSL_ARCH"] == "sm_121a" and result.env["VLLM_USE_DEEP_GEMM"] == "0"
    assert any("version unknown" in warning and "version-independent" in warning for warning in result.warnings)
    assert "VLLM_FP8_MOE_BACKEND" not in result.env  # dead in every version
    assert result.env["VLLM_ATTENTION_BACKEND"] == "X"  # dead only from 0.15: kept, with a warning
    assert any("VLLM_ATTENTION_BACKEND may be dead" in warning for warning in result.warnings)


def test_unreadable_version_is_treated_as_unknown():
    result = envrules.resolve_env(GB10, "nvfp4", "latest", {})
    assert any("cannot read vLLM version 'latest'" in warning for warning in result.warnings)


def test_version_parsing_and_ranges():
    assert envrules.parse_version("v0.24.1rc2") == (0, 24, 1)
    assert envrules.parse_version("0.11.1.dev3+gabc") == (0, 11, 1)
    assert envrules.parse_version("0.15") == (0, 15, 0)
    assert envrules.parse_version("") is None
    assert envrules.in_range((0, 23, 9), ">=0.22,<0.24") and not envrules.in_range((0, 24, 0), ">=0.22,<0.24")
    assert envrules.in_range((0, 1, 0), "")
    with pytest.raises(ValueError):
        envrules.in_range((0, 1, 0), "~0.2")


# --- overrides ----------------------------------------------------------------------------------


def test_override_is_recorded_with_the_rule_it_overrode():
    result = envrules.resolve_env(GB10, "nvfp4", "0.24.0", {"CUTE_DSL_ARCH": "sm_120a"})
    assert result.env["CUTE_DSL_ARCH"] == "sm_120a"
    entry = row(result, "CUTE_DSL_ARCH")
    assert (entry["action"], entry["rule"], entry["value"]) == ("override", "gb10-cute-dsl-arch", "sm_120a")
    assert "'sm_121a'" in entry["reason"]


def test_spec_variable_without_a_rule():
    result = envrules.resolve_env(GB10, "nvfp4", "0.24.0", {"VLLM_LOGGING_LEVEL": "DEBUG"})
    assert result.env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert (row(result, "VLLM_LOGGING_LEVEL")["action"], row(result, "VLLM_LOGGING_LEVEL")["rule"]) == ("set", "spec")


def test_provenance_rows_are_the_contract_and_round_trip_through_toml():
    result = envrules.resolve_env(GB10, "fp8", "0.24.0", {"CUTE_DSL_ARCH": "x", "VLLM_FP8_MOE_BACKEND": "y", "A": "1"})
    assert all(set(entry) == PROVENANCE_KEYS for entry in result.provenance)
    assert {entry["action"] for entry in result.provenance} == {"set", "override", "drop"}
    # every variable of the final env has exactly one row, and every dropped one too
    names = [entry["name"] for entry in result.provenance]
    assert len(names) == len(set(names)) and set(result.env) <= set(names)
    doc = {"env": result.env, "env_provenance": result.provenance}
    assert tomllib.loads(tomli_w.dumps(doc)) == doc


def test_resolve_is_pure():
    overrides = {"CUTE_DSL_ARCH": "x"}
    first = envrules.resolve_env(GB10, "fp8", "0.24.0", overrides)
    second = envrules.resolve_env(GB10, "fp8", "0.24.0", overrides)
    assert first == second and overrides == {"CUTE_DSL_ARCH": "x"}


# --- speculative decoding -----------------------------------------------------------------------

MTP = '{"method":"mtp","num_speculative_tokens":2}'


def test_nvfp4_mtp_draft_defaults_to_triton_with_a_note():
    new, notes = envrules.speculative_defaults("nvfp4", MTP)
    assert new == '{"method":"mtp","moe_backend":"triton","num_speculative_tokens":2}'  # canonical, as spec.py
    assert len(notes) == 1 and "BF16" in notes[0] and "nvfp4-mtp-draft-triton" in notes[0]


def test_speculative_defaults_keep_what_the_spec_set():
    explicit = '{"method": "mtp", "moe_backend": "flashinfer_cutlass"}'
    assert envrules.speculative_defaults("nvfp4", explicit) == (explicit, [])
    assert envrules.speculative_defaults("fp8", MTP) == (MTP, [])
    assert envrules.speculative_defaults("nvfp4", "") == ("", [])


def test_speculative_warnings_before_any_host_is_touched():
    (missing,) = envrules.speculative_warnings("nvfp4", MTP)
    assert "moe_backend" in missing and "triton" in missing
    (quantized_only,) = envrules.speculative_warnings("nvfp4", '{"method":"mtp","moe_backend":"marlin"}')
    assert "'marlin'" in quantized_only and "will not start" in quantized_only
    assert envrules.speculative_warnings("nvfp4", '{"method":"mtp","moe_backend":"triton"}') == []
    assert envrules.speculative_warnings("fp8", MTP) == []


@pytest.mark.parametrize("bad", ['{"method": mtp}', '["mtp"]'])
def test_bad_speculative_json_is_a_user_error(bad):
    with pytest.raises(UserError, match="speculative config"):
        envrules.speculative_defaults("nvfp4", bad)


# --- the rule files themselves ------------------------------------------------------------------


def test_rule_files_are_consistent():
    rules = envrules.env_rules()
    entries = rules["rule"] + rules["dead"] + rules["speculative"]
    ids = [entry["id"] for entry in entries]
    assert len(ids) == len(set(ids)) and all(entry["reason"] for entry in entries)
    known_arches = set(facts.load_gpu_rules())
    for entry in entries:
        assert set(entry.get("arch", [])) <= known_arches, entry["id"]
        if entry.get("vllm"):
            envrules.in_range((0, 24, 0), entry["vllm"])  # parses
    assert all(entry["replacement"].startswith("--") for entry in rules["dead"])


def test_dead_variables_agree_with_the_wheels():
    """A variable is dead only in releases whose vllm/envs.py (rules/vllm_env.toml, read from the wheels) lacks it,
    deprecated only in releases that still list it, and a variable dead everywhere is in no listed release."""
    releases = [(envrules.parse_version(r["vllm"]), set(r["names"])) for r in envrules.vllm_env_rules()]
    for entry in envrules.env_rules()["dead"]:
        name = entry["name"]
        for version, names in releases:
            assert version is not None
            if not entry.get("vllm") or envrules.in_range(version, entry["vllm"]):
                assert name not in names, f"{entry['id']}: vLLM {version} still lists {name}"
            if entry.get("deprecated") and envrules.in_range(version, entry["deprecated"]):
                assert name in names, f"{entry['id']}: deprecated in {version}, which no longer lists {name}"


def test_a_recipe_names_flags_and_dead_or_deprecated_variables():
    rules = envrules.env_rules()
    dead = {e["name"] for e in rules["dead"]}
    for recipe in rules.get("recipe", []):
        assert recipe["flags"] and all(flag.startswith("--") for flag in recipe["flags"])
        assert set(recipe["env"]) <= dead and 1 <= recipe["min"] <= len(recipe["env"])


def test_with_arch_fills_arch_only_when_the_host_could_not():
    assert envrules.with_arch({"gpu_name": "NVIDIA GB10", "compute_capability": "12.1", "arch": ""})["sm"] == "sm_121a"
    reported = {"gpu_name": "NVIDIA GB10", "compute_capability": "12.1", "arch": "gb10", "sm": "sm_121a"}
    assert envrules.with_arch(reported) is reported


# --- `spark-agent env` ----------------------------------------------------------------------------

SPEC = """
[sweep]
name = "env-test"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
vllm_version = "0.24.0"
[[checkpoints]]
name = "uns-fast"
model = "unsloth/Qwen3.6-35B-A3B-NVFP4-fast"
quant = "nvfp4"
[[checkpoints]]
name = "fp8"
model = "Qwen/Qwen3.6-35B-A3B-FP8"
quant = "fp8"
[server]
speculative = '{"method":"mtp","num_speculative_tokens":2}'
[matrix]
moe_backend = ["marlin", "auto"]
concurrency = [1, 8]
[env]
VLLM_FP8_MOE_BACKEND = "marlin"
CUTE_DSL_ARCH = "sm_120a"
"""


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return path


def env_command(*argv: str) -> int:
    """`spark-agent env ...` through its own parser (the other commands are not needed)."""
    logs.configure()  # structlog to stderr, as the CLI sets it up: stdout stays the command's
    parser = argparse.ArgumentParser()
    env_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["env", *argv])
    return args.func(args)


def env_json(capsys, *argv: str) -> dict:
    assert env_command(*argv, "--json") == 0
    return json.loads(capsys.readouterr().out)


def test_env_command_on_a_simulated_gb10(spec_file, capsys):
    out = env_json(capsys, str(spec_file), "--host", "spark-1", "--simulate-gpu", "gb10")
    assert len(out["cells"]) == 4 and {cell["host"] for cell in out["cells"]} == {"spark-1"}
    # the rule that fills in the draft's moe_backend is applied and noted on the cells, not a warning (issue 26 §9)
    assert not any("moe_backend" in warning for warning in out["warnings"])
    assert any("moe_backend=triton" in note for cell in out["cells"] for note in cell["notes"])
    for cell in out["cells"]:
        assert cell["env"]["CUTE_DSL_ARCH"] == "sm_120a" and "VLLM_FP8_MOE_BACKEND" not in cell["env"]
        actions = {row["name"]: (row["action"], row["rule"]) for row in cell["provenance"]}
        assert actions["CUTE_DSL_ARCH"] == ("override", "gb10-cute-dsl-arch")
        assert actions["VLLM_FP8_MOE_BACKEND"] == ("drop", "dead-vllm-fp8-moe-backend")
        nvfp4 = cell["label"].startswith("uns-fast")
        assert ("VLLM_USE_DEEP_GEMM" in cell["env"]) == (not nvfp4)
        assert ('"moe_backend":"triton"' in cell["speculative"]) == nvfp4


def test_env_command_prints_a_table_per_cell(spec_file, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert env_command(str(spec_file), "--host", "spark-1", "--simulate-gpu", "gb10") == 0
    out = capsys.readouterr().out
    assert out.count("spark-1 · ") == 4
    for text in ("gb10-fp8-no-deep-gemm", "dead-vllm-fp8-moe-backend", "override", "use --moe-backend instead"):
        assert text in out


def test_env_command_refuses_an_unknown_simulated_chip(spec_file):
    with pytest.raises(UserError, match=r"--simulate-gpu: .*gb99"):
        env_command(str(spec_file), "--host", "x", "--simulate-gpu", "gb99")
