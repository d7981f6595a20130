"""`spark-agent lint`'s two halves: launches read from what people paste, and the findings the rules give them.

The launches are real public ones (tests/data/launches/SOURCES.md). Findings come from agent/rules/env.toml through
planning/envrules (the rules `env` and the planner use): a test that changes a rule changes what lint says.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.judging import lint as checks
from agent.planning import envrules
from agent.planning.launch import extract, read_text
from tests.test_inspect_build import write_safetensors

pytestmark = pytest.mark.unit

LAUNCHES = Path(__file__).parent / "data" / "launches"


def one(name: str):
    found = extract((LAUNCHES / name).read_text(), name)
    assert len(found) == 1, found
    return found[0]


def rules_of(result) -> set[str]:
    return {f.rule for f in result.findings}


def lint(launch, version="0.24.0", arch="gb10", quant=""):
    return checks.lint(launch, checks.target_for(arch, version, quant))


# --- extraction -------------------------------------------------------------------------------------


def test_compose_service_with_a_vllm_entrypoint_image():
    launch = one("spark-vllm-compose.docker-compose.yml")
    assert (launch.kind, launch.image, launch.model) == ("compose", "spark-vllm:latest", "Qwen/Qwen3-Coder-Next-FP8")
    assert launch.flag("--gpu-memory-utilization") == "0.95" and launch.env["VLLM_ATTENTION_BACKEND"] == "FLASHINFER"
    assert launch.env_lines["VLLM_ATTENTION_BACKEND"] == 30  # the line a code host shows the finding on


def test_script_with_positional_default_and_docker_compose_run():
    launch = one("spark-vllm-compose.run-nvfp4.sh")
    assert launch.model == "GadflyII/Qwen3-Coder-Next-NVFP4"  # ${1:-...} then MODEL_PATH="$MODEL"
    assert launch.env == {"VLLM_ENABLE_NVFP4": "1", "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": "1"}
    assert launch.image == "" and launch.flag("--quantization") == "mxfp4"
    assert "2>&1" not in launch.args


def test_docker_run_with_vllm_serve_after_the_image():
    launch = one("scitrera-docker-run.sh")
    assert launch.image == "scitrera/dgx-spark-vllm:0.13.0-t4" and launch.line == 7
    assert launch.model == "GAlex535/Qwen3-Coder-30B-A3B-Instruct-NVFP4"


def test_docker_run_of_the_openai_image_takes_its_arguments():
    launch = one("chandra-docker-run.sh")
    assert launch.image == "vllm/vllm-openai:nightly" and launch.model == "datalab-to/chandra"
    assert launch.env == {"VLLM_ATTENTION_BACKEND": "TORCH_SDPA"}
    assert launch.flag("--max-num-batched-tokens") == "65536"  # written --max_num_batched_tokens


def test_yaml_recipe_command_block():
    launch = one("nemotron-cascade-recipe.yaml")
    assert launch.model == "chankhavu/Nemotron-Cascade-2-30B-A3B-NVFP4" and launch.args[-1] == "fastsafetensors"


def test_kubernetes_deployment_with_sh_c():
    launch = one("vllm-docs-k8s-deployment.yaml")
    assert (launch.kind, launch.image, launch.model) == (
        "kubernetes",
        "vllm/vllm-openai:latest",
        "meta-llama/Llama-3.2-1B-Instruct",
    )
    assert "HUGGING_FACE_HUB_TOKEN" in launch.env


def test_markdown_reads_only_its_code_blocks_with_exported_env():
    launch = one("gb10-gpt-oss-issue.md")
    assert launch.env["VLLM_ATTENTION_BACKEND"] == "XFORMERS" and launch.env_lines["VLLM_ATTENTION_BACKEND"] == 8
    assert launch.model == "openai/gpt-oss-120b"


def test_vendor_guide_prefix_assignments():
    launch = one("nemotron-super-advanced-guide.md")
    assert set(launch.env) == {
        "VLLM_FLASHINFER_MOE_BACKEND",
        "VLLM_USE_FLASHINFER_MOE_FP4",
        "VLLM_USE_FLASHINFER_MOE_FP8",
    }


@pytest.mark.parametrize(
    "data,words",
    [
        (b"", "empty"),
        (b"  \n\t\n", "empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00", "binary"),
        (b"\xff\xfe v\x00l\x00", "binary"),
        ("vllm serve é".encode("latin-1"), "not UTF-8"),
    ],
)
def test_bad_input_is_one_line(data, words):
    with pytest.raises(UserError) as err:
        read_text(data, "x.sh")
    assert words in err.value.message and "\n" not in err.value.message


def test_text_without_vllm_serve_has_no_launch():
    assert extract("# notes\n```bash\npip install vllm\nvllm bench serve --help\n```\n", "README.md") == []


# --- findings ---------------------------------------------------------------------------------------


def test_compose_findings_name_their_rules():
    result = lint(one("spark-vllm-compose.docker-compose.yml"))
    assert result.quant == "fp8"
    assert rules_of(result) == {
        "dead-vllm-attention-backend",
        "gb10-cute-dsl-arch",
        "gb10-flashinfer-version-check",
        "gb10-fp8-no-deep-gemm",
        "gb10-gpu-memory-utilization",
        "image-digest",
        "unknown-env",  # VLLM_USE_V1, VLLM_ENABLE_NVFP4, VLLM_PREFIX_CACHING, ...: vLLM 0.24 reads none of them
        "version-line",
    }
    assert result.fixed is not None
    assert "VLLM_ATTENTION_BACKEND" not in result.fixed.env and result.fixed.env["VLLM_USE_DEEP_GEMM"] == "0"
    assert result.fixed.flag("--gpu-memory-utilization") == "0.85"


def test_the_same_rules_as_env_and_the_planner():
    """Every variable the planner would set for this chip × quant × version is one lint asks for."""
    launch = one("vllm-docs-k8s-deployment.yaml")
    planned = envrules.resolve_env(checks._facts(checks.target_for("gb10", "0.24.0")), "fp8", "0.24.0", {}).env
    fixed = lint(launch, quant="fp8").fixed
    assert fixed is not None and {k: fixed.env[k] for k in planned} == planned


def test_dead_variable_depends_on_the_version():
    launch = one("nemotron-super-advanced-guide.md")
    assert {"dead-vllm-use-flashinfer-moe-fp4", "dead-vllm-flashinfer-moe-backend"} <= rules_of(lint(launch, "0.24.0"))
    old = lint(launch, "0.17.1")  # what the guide pins: no longer dead there
    assert not rules_of(old) & {"dead-vllm-use-flashinfer-moe-fp4", "dead-vllm-flashinfer-moe-backend"}
    deprecated = lint(launch, "0.22.0")
    assert any(f.severity == "warning" and "deprecated" in f.message for f in deprecated.findings)


def test_version_from_the_image_tag():
    result = lint(one("scitrera-docker-run.sh"), version="")
    assert result.vllm_version == "0.13.0"


def test_backend_that_fails_on_the_chip_with_its_class_and_fix():
    (launch,) = extract("vllm serve Qwen/Qwen3.6-35B-A3B-FP8 --moe-backend deep_gemm\n", "cmd")
    result = lint(launch)
    failing = [f for f in result.findings if f.rule == "gb10-fp8-moe-deep-gemm"]
    assert failing and failing[0].severity == "error" and "deep_gemm_assert" in failing[0].message
    assert result.fixed is not None and result.fixed.flag("--moe-backend") == "triton"
    assert "gb10-fp8-moe-deep-gemm" not in rules_of(lint(launch, arch="h100"))  # the chip decides


def test_conflicting_settings():
    (launch,) = extract("VLLM_USE_DEEP_GEMM=0 vllm serve x/y-FP8 --moe-backend=deep_gemm\n", "cmd")
    assert "deep-gemm-off-but-requested" in rules_of(lint(launch))


def test_mtp_without_the_draft_moe_backend_and_its_fix():
    cmd = """vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 --moe-backend marlin --speculative-config '{"method":"mtp","num_speculative_tokens":2}'\n"""
    (launch,) = extract(cmd, "cmd")
    result = lint(launch)
    assert "nvfp4-mtp-draft-triton" in rules_of(result)
    assert result.fixed is not None
    assert json.loads(result.fixed.flag("--speculative-config") or "{}")["moe_backend"] == "triton"
    dotted = extract("vllm serve nvidia/Q-NVFP4 --speculative-config.method mtp\n", "cmd")[0]
    assert "nvfp4-mtp-draft-triton" in rules_of(lint(dotted))


def test_flags_the_version_does_not_know():
    (launch,) = extract("vllm serve m/x-NVFP4 --moe-backend b12x --linear-backend cutlass\n", "cmd")
    assert {"flag-moe-backend-b12x", "flag-linear-backend"} <= rules_of(lint(launch, "0.21.0"))
    assert not rules_of(lint(launch, "0.29.0")) & {"flag-moe-backend-b12x", "flag-linear-backend"}
    assert "vllm-version-unknown" in rules_of(lint(launch, ""))


def test_weights_that_cannot_fit_one_chip(tmp_path):
    ckpt = tmp_path / "big-ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    write_safetensors(str(ckpt / "model.safetensors"), {"w": ("BF16", (70_000, 1_000_000))})  # 140 GB, sparse
    (launch,) = extract(f"vllm serve {ckpt} --gpu-memory-utilization 0.8\n", "cmd")
    result = lint(launch)
    assert "checkpoint-memory" in rules_of(result)
    assert "checkpoint-memory" not in rules_of(lint(launch, arch="b300"))  # 288 GB holds it
    assert os.path.getsize(ckpt / "model.safetensors") > 100e9  # the header says so; the file is sparse


def test_a_clean_launch_has_no_findings():
    clean = (
        "docker run -e CUTE_DSL_ARCH=sm_121a -e FLASHINFER_DISABLE_VERSION_CHECK=1 -e VLLM_DISABLE_LOG_LOGO=1 "
        "nvcr.io/nvidia/vllm@sha256:" + "a" * 64 + " vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 "
        "--moe-backend marlin --gpu-memory-utilization 0.85 "
        """--speculative-config '{"method":"mtp","num_speculative_tokens":2,"moe_backend":"triton"}'\n"""
    )
    (launch,) = extract(clean, "cmd")
    result = lint(launch)
    assert result.findings == [] and result.fixed is None


def test_bad_speculative_json_is_a_finding_not_a_stop():
    (launch,) = extract("vllm serve m/x-NVFP4 --speculative-config '{method: mtp'\n", "cmd")
    assert "speculative-config" in rules_of(lint(launch))


def test_a_command_given_inline_in_a_model_card():
    card = "# Model\n\n```python\nfrom vllm import LLM\n```\n\nServe it with `vllm serve org/m-FP8 --moe-backend deep_gemm`.\n"
    (launch,) = extract(card, "README.md")
    assert launch.line == 7 and launch.flag("--moe-backend") == "deep_gemm"


# --- unknown variables: the names each vLLM release reads (agent/rules/vllm_env.toml) ---------------------


def unknown(result) -> list[str]:
    return [f.message for f in result.findings if f.rule == "unknown-env"]


def test_misspelt_variable_is_unknown_with_a_suggestion():
    (launch,) = extract("VLLM_USE_DEEPGEMM=0 vllm serve m/x-FP8\n", "cmd")
    (message,) = unknown(lint(launch))
    assert "VLLM_USE_DEEPGEMM" in message and "did you mean VLLM_USE_DEEP_GEMM?" in message
    assert next(f for f in lint(launch).findings if f.rule == "unknown-env").severity == "warning"
    (typo,) = extract("VLLM_ATTENTON_BACKEND=FLASHINFER vllm serve m/x\n", "cmd")
    assert "did you mean VLLM_ATTENTION_BACKEND?" in unknown(lint(typo, "0.13.0"))[0]
    assert "did you mean VLLM_ATTENTION_BACKEND?" in unknown(lint(typo, ""))[0]  # unknown version: any release


def test_a_real_variable_of_the_version_is_not_flagged():
    (launch,) = extract("VLLM_LOGGING_LEVEL=DEBUG VLLM_USE_DEEP_GEMM=0 vllm serve m/x\n", "cmd")
    for version in ("0.13.0", "0.24.0", "0.23.0", ""):
        assert unknown(lint(launch, version)) == []


def test_a_dead_variable_has_only_its_dead_finding():
    (launch,) = extract("VLLM_FP8_MOE_BACKEND=triton VLLM_USE_FLASHINFER_MOE_FP4=1 vllm serve m/x\n", "cmd")
    result = lint(launch, "0.24.0")
    assert {"dead-vllm-fp8-moe-backend", "dead-vllm-use-flashinfer-moe-fp4"} <= rules_of(result)
    assert unknown(result) == []


def test_a_variable_added_later_is_unknown_to_an_older_version():
    (launch,) = extract("VLLM_ENGINE_READY_TIMEOUT_S=1200 vllm serve m/x\n", "cmd")
    assert unknown(lint(launch, "0.24.0")) == []
    (message,) = unknown(lint(launch, "0.13.0"))  # first in vllm/envs.py of a later listed release
    assert message.startswith("vLLM 0.13.0 does not read VLLM_ENGINE_READY_TIMEOUT_S")
    assert "releases that read it: 0.15.1-" in message


def test_a_removed_variable_names_the_releases_that_read_it():
    (launch,) = extract("VLLM_USE_V1=1 vllm serve m/x\n", "cmd")
    assert unknown(lint(launch, "0.9.2")) == []
    (message,) = unknown(lint(launch, "0.24.0"))
    assert "listed releases that read it: 0.7.0-0.10.2" in message


def test_every_listed_release_names_its_source():
    versions = envrules.vllm_env_rules()
    assert len(versions) >= 3 and versions[0]["vllm"].startswith("0.7")
    for entry in versions:
        assert entry["source"].startswith("vllm-project/vllm vllm/envs.py @ v") and len(entry["sha256"]) == 64
        assert entry["names"] and all(name.startswith("VLLM_") for name in entry["names"])


def test_hopper_fp8_block_moe_cutlass_fails_from_the_real_h200_run():
    """agent/rules/env.toml h200-fp8-block-moe-cutlass, from docs/runs/h200-fp8-moe: cutlass is refused on an H200
    with vLLM 0.24.0; triton, deep_gemm and marlin started there, so no rule fires for them."""
    rule = "h200-fp8-block-moe-cutlass"
    (launch,) = extract("vllm serve Qwen/Qwen3-30B-A3B-FP8 --moe-backend cutlass\n", "cmd")
    result = lint(launch, "0.24.0", arch="h200")
    failing = [f for f in result.findings if f.rule == rule]
    assert failing and "cutlass_disabled" in failing[0].message and "disabled for this" in failing[0].message
    assert result.fixed is not None and result.fixed.flag("--moe-backend") == "triton"
    assert rule not in rules_of(lint(launch, "0.24.0", arch="gb10"))  # the chip decides
    assert rule not in rules_of(lint(launch, "0.25.0", arch="h200"))  # measured on 0.24 only
    for started in ("triton", "deep_gemm", "marlin"):
        (other,) = extract(f"vllm serve Qwen/Qwen3-30B-A3B-FP8 --moe-backend {started}\n", "cmd")
        assert not [f for f in lint(other, "0.24.0", arch="h200").findings if f.severity == "error"]
