"""Lint, round four (issue 49): the "Marlin fix" rewritten into flags, --quantization against the checkpoint, a flag
abbreviated as argparse allows, a launch in a diff hunk or a Markdown quote. Each through the CLI, as a user runs it."""

from __future__ import annotations

import pytest

from agent.cli import main
from agent.planning import launch as launches

pytestmark = pytest.mark.unit

MARLIN_FIX = (
    "export VLLM_USE_FLASHINFER_MOE_FP4=0\n"
    "export VLLM_NVFP4_GEMM_BACKEND=marlin\n"
    "export VLLM_TEST_FORCE_FP8_MARLIN=1\n"
    "vllm serve nvidia/Qwen3-30B-A3B-NVFP4 --max-model-len 8192 --gpu-memory-utilization 0.8\n"
)


def _fixed_text(out: str) -> str:
    return out.split("--- fixed text", 1)[1].split("---\n", 1)[1]


@pytest.mark.parametrize("version", ["0.24.0", "0.30.0"])
def test_fix_rewrites_the_marlin_fix_into_flags(tmp_path, capsys, version):
    script = tmp_path / "launch.sh"
    script.write_text(MARLIN_FIX)
    assert main(["lint", str(script), "--vllm-version", version, "--fix"]) == 0
    out = capsys.readouterr().out
    assert "[marlin-fix-to-flags]" in out
    fixed = _fixed_text(out)
    assert "--moe-backend marlin" in fixed and "--linear-backend marlin" in fixed
    assert not any(name in fixed for name in ("VLLM_USE_FLASHINFER_MOE_FP4", "VLLM_NVFP4_GEMM", "FORCE_FP8_MARLIN"))


def test_the_marlin_fix_keeps_a_backend_the_launch_chose_and_waits_for_a_version(tmp_path, capsys):
    script = tmp_path / "launch.sh"
    script.write_text(MARLIN_FIX.replace("--max-model-len", "--moe-backend flashinfer_b12x --max-model-len"))
    main(["lint", str(script), "--vllm-version", "0.24.0", "--fix"])
    fixed = _fixed_text(capsys.readouterr().out)
    assert "--moe-backend flashinfer_b12x" in fixed and "--moe-backend marlin" not in fixed
    assert "--linear-backend marlin" in fixed
    main(["lint", str(script)])  # no version: said, not rewritten (the flags may not exist)
    assert "note [marlin-fix-to-flags]" in capsys.readouterr().out


def test_quantization_that_contradicts_the_checkpoint(tmp_path, capsys):
    script = tmp_path / "run.sh"
    script.write_text("vllm serve nvidia/Qwen3-30B-A3B-NVFP4 --quantization fp8\n")
    main(["lint", str(script), "--vllm-version", "0.24.0"])
    out = capsys.readouterr().out
    assert "warning [quantization-contradicts-checkpoint] --quantization fp8 asks for fp8" in out  # a name: a guess
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}')
    script.write_text(f"vllm serve {ckpt} --quantization=fp8\n")
    assert main(["lint", str(script), "--vllm-version", "0.24.0"]) == 1
    assert "error [quantization-contradicts-checkpoint]" in capsys.readouterr().out
    script.write_text(f"vllm serve {ckpt} --quantization modelopt_fp4\n")  # agrees: nothing said
    main(["lint", str(script), "--vllm-version", "0.24.0"])
    assert "quantization-contradicts" not in capsys.readouterr().out


def test_an_abbreviated_flag_is_the_flag_argparse_takes_it_for(tmp_path, capsys):
    script = tmp_path / "run.sh"
    script.write_text("vllm serve nvidia/Qwen3-30B-A3B-NVFP4 --gpu-memory-util=0.9\n")
    main(["lint", str(script), "--vllm-version", "0.24.0"])
    out = capsys.readouterr().out
    assert "--gpu-memory-utilization 0.9 > 0.85" in out and "vLLM's default" not in out
    (one,) = launches.extract("vllm serve m --gpu-memory-util 0.7 --max-model 4096", "x")
    assert one.flag("--gpu-memory-utilization") == "0.7" and one.flag("--max-model-len") == "4096"
    assert one.flag("--max-num-seqs") is None  # a prefix of another flag is not this one


def test_a_launch_in_a_diff_hunk_keeps_its_model_and_one_in_a_markdown_quote_is_found():
    hunk = "@@ -1,3 +1,4 @@\n vllm serve \\\n-  nvidia/Old-NVFP4 \\\n+  nvidia/New-NVFP4 \\\n   --max-model-len 8192\n"
    (one,) = launches.extract(hunk, "x.diff")
    assert one.model == "nvidia/New-NVFP4" and one.flag("--max-model-len") == "8192"
    quoted = (
        "Quoting the README:\n\n> ./launch.sh && vllm serve nvidia/Qwen3-30B-A3B-NVFP4 \\\n>   --moe-backend marlin\n"
    )
    (two,) = launches.extract(quoted, "x.md")
    assert two.model == "nvidia/Qwen3-30B-A3B-NVFP4" and two.flag("--moe-backend") == "marlin"
