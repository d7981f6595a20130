"""`spark-agent lint FILE|-`: text, JSON and SARIF (validated against the SARIF 2.1.0 schema), exit 0 clean,
1 findings at or above --fail-on, 2 bad input (one line, never a traceback)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from agent.cli import main

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data"
LAUNCHES = DATA / "launches"
COMPOSE = str(LAUNCHES / "spark-vllm-compose.docker-compose.yml")
SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text())
CLEAN = (
    "docker run -e CUTE_DSL_ARCH=sm_121a -e FLASHINFER_DISABLE_VERSION_CHECK=1 -e VLLM_DISABLE_LOG_LOGO=1 "
    "nvcr.io/nvidia/vllm@sha256:" + "b" * 64 + " vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 --gpu-memory-utilization 0.8\n"
)


def test_text_output_names_file_line_rule_and_exits_1(capsys):
    assert main(["lint", COMPOSE, "--vllm-version", "0.24.0"]) == 1
    out = capsys.readouterr().out
    assert f"{COMPOSE}:30: error [dead-vllm-attention-backend] VLLM_ATTENTION_BACKEND is dead" in out
    assert "fix: set VLLM_USE_DEEP_GEMM=0" in out


def test_fail_on_threshold(tmp_path, capsys):
    warn_only = tmp_path / "k8s.yaml"
    warn_only.write_text((LAUNCHES / "vllm-docs-k8s-deployment.yaml").read_text())
    assert main(["lint", str(warn_only)]) == 0  # warnings and notes only; default --fail-on error
    assert main(["lint", str(warn_only), "--fail-on", "warning"]) == 1
    clean = tmp_path / "clean.sh"
    clean.write_text(CLEAN)
    assert main(["lint", str(clean), "--fail-on", "note"]) == 0
    assert "no findings" in capsys.readouterr().out


def test_fix_prints_the_corrected_command(capsys):
    main(["lint", str(LAUNCHES / "gb10-gpt-oss-issue.md"), "--vllm-version", "0.24.0", "--fix"])
    out = capsys.readouterr().out
    fixed = out.split("fixed:")[1].strip().splitlines()[0]
    assert "VLLM_ATTENTION_BACKEND" not in fixed and "CUTE_DSL_ARCH=sm_121a" in fixed
    assert "vllm serve openai/gpt-oss-120b" in fixed and "--gpu-memory-utilization 0.85" in fixed


def test_json_output(capsys):
    assert main(["lint", COMPOSE, "--format", "json", "--vllm-version", "0.24.0"]) == 1
    out = json.loads(capsys.readouterr().out)
    (launch,) = out["launches"]
    assert launch["model"] == "Qwen/Qwen3-Coder-Next-FP8" and launch["quant"] == "fp8"
    assert {f["rule"] for f in launch["findings"]} >= {"dead-vllm-attention-backend", "image-digest"}


@pytest.mark.parametrize(
    "name", sorted(p.name for p in LAUNCHES.iterdir() if p.name not in ("SOURCES.md", "EXPECTED.json"))
)
def test_sarif_output_is_valid_sarif_2_1_0(name, capsys):
    main(["lint", str(LAUNCHES / name), "--format", "sarif", "--vllm-version", "0.24.0"])
    log = json.loads(capsys.readouterr().out)
    jsonschema.validate(log, SCHEMA)
    results = log["runs"][0]["results"]
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert results and all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    assert all(r["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1 for r in results)


def test_sarif_schema_rejects_what_is_not_sarif():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": "2.1.0", "runs": [{"results": []}]}, SCHEMA)  # a run needs its tool


@pytest.mark.parametrize(
    "content,words",
    [
        (b"", "empty"),
        (b"\x00\x01\x02binary", "binary"),
        (b"# how to install\npip install vllm\n", "no `vllm serve`"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, content, words):
    bad = tmp_path / "launch.sh"
    bad.write_bytes(content)
    assert main(["lint", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and str(bad) in err[0]


@pytest.mark.parametrize(
    "argv,words",
    [
        (["/no/such/file.sh"], "no such file"),
        ([str(LAUNCHES), "--gpu", "gb10"], "is a folder"),
        ([COMPOSE, "--gpu", "gb11"], "not an arch"),
        ([COMPOSE, "--vllm-version", "latest"], "write a version"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(capsys, argv, words):
    assert main(["lint", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_stdin_in_a_real_process():
    cmd = "VLLM_FP8_MOE_BACKEND=triton vllm serve Qwen/Qwen3.6-35B-A3B-FP8 --moe-backend deep_gemm\n"
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "lint", "-", "--format", "json"], input=cmd, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stderr
    rules = {f["rule"] for f in json.loads(proc.stdout)["launches"][0]["findings"]}
    assert {"dead-vllm-fp8-moe-backend", "gb10-fp8-moe-deep-gemm"} <= rules
    empty = subprocess.run([sys.executable, "-m", "agent.cli", "lint", "-"], input="", capture_output=True, text=True)
    assert empty.returncode == 2 and "Traceback" not in empty.stderr and len(empty.stderr.strip().splitlines()) == 1


def test_secrets_never_shown(tmp_path, capsys):
    script = tmp_path / "run.sh"
    script.write_text(
        "docker run -e HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789 vllm/vllm-openai:v0.24.0 --model m\n"
    )
    main(["lint", str(script), "--fix"])
    main(["lint", str(script), "--format", "json"])
    out = capsys.readouterr().out
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in out and "%REDACTED%" in out


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU: its arch is read instead")
def test_host_without_a_known_gpu_is_bad_input(capsys):
    assert main(["lint", COMPOSE, "--host", "localhost"]) == 2  # this machine's facts (no -i): no GPU here
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no arch we know" in err[0]
