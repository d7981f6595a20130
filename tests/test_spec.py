"""Spec validation: every bad input names the file and line, and says how to fix it."""

from pathlib import Path

import pytest

from agent.errors import UserError
from agent.planning.spec import load_spec, pin_command

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
GOOD = (REPO / "examples" / "quick.toml").read_text()


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


def error_of(tmp_path, text: str) -> str:
    with pytest.raises(UserError) as exc:
        load_spec(write(tmp_path, text))
    assert exc.value.exit_code == 2
    return exc.value.message


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_example_loads():
    spec = load_spec(REPO / "examples" / "quick.toml")
    assert spec.name == "quick" and spec.moe_backends == ["marlin", "flashinfer_b12x"]
    assert spec.concurrency == [1, 4] and spec.repeats == 3 and spec.warmup == 1
    assert spec.server["speculative"] == ""


def test_tag_is_refused_with_the_pin_command(tmp_path):
    text = GOOD.replace(GOOD.split('ref = "')[1].split('"')[0], "nvcr.io/nvidia/vllm:25.11-py3")
    msg = error_of(tmp_path, text)
    assert f"spec.toml:{line_of(text, 'ref =')}:" in msg
    assert "spark-agent pin nvcr.io/nvidia/vllm:25.11-py3 --host" in msg


def test_unknown_key_names_line_and_known_keys(tmp_path):
    text = GOOD.replace("max_num_seqs = 16", "max_num_seqs = 16\nmax_num_seq = 8")
    msg = error_of(tmp_path, text)
    assert f":{line_of(text, 'max_num_seq = 8')}:" in msg and "unknown key 'max_num_seq'" in msg
    assert "known keys" in msg


def test_wrong_type(tmp_path):
    text = GOOD.replace("duration_s = 4", 'duration_s = "four"')
    msg = error_of(tmp_path, text)
    assert f":{line_of(text, 'duration_s')}:" in msg and "must be int or float" in msg


def test_empty_matrix(tmp_path):
    text = GOOD.replace('moe_backend = ["marlin", "flashinfer_b12x"]', "moe_backend = []")
    msg = error_of(tmp_path, text)
    assert f":{line_of(text, 'moe_backend = []')}:" in msg and "is empty" in msg


def test_duplicate_checkpoint_name(tmp_path):
    text = GOOD + '\n[[checkpoints]]\nname = "uns-fast"\nmodel = "nv"\nquant = "nvfp4"\n'
    msg = error_of(tmp_path, text)
    assert "duplicate checkpoint name 'uns-fast'" in msg
    assert f":{len(text.splitlines()) - 2}:" in msg


def test_concurrency_zero(tmp_path):
    text = GOOD.replace("concurrency = [1, 4]", "concurrency = [0, 4]")
    msg = error_of(tmp_path, text)
    assert f":{line_of(text, 'concurrency =')}:" in msg and ">= 1" in msg


def test_bad_quant_and_bad_toml(tmp_path):
    assert "quant 'int4'" in error_of(tmp_path, GOOD.replace('quant = "nvfp4"', 'quant = "int4"'))
    assert "not valid TOML" in error_of(tmp_path, GOOD + "\n[matrix\n")


def test_speculative_is_canonical_json(tmp_path):
    text = GOOD.replace('speculative = "off"', 'speculative = \'{"num_speculative_tokens": 2, "method": "mtp"}\'')
    spec = load_spec(write(tmp_path, text))
    assert spec.server["speculative"] == '{"method":"mtp","num_speculative_tokens":2}'
    bad = GOOD.replace('speculative = "off"', 'speculative = "{mtp"')
    assert "speculative must be JSON" in error_of(tmp_path, bad)


def test_pin_command_is_a_runnable_shell_line():
    assert pin_command("nvcr.io/nvidia/vllm:25.09-py3", "spark-1") == (
        "spark-agent pin nvcr.io/nvidia/vllm:25.09-py3 --host spark-1"
    )
    assert pin_command("x:1", "spark 2", inventory="inv/fleet.yml", write="my spec.toml") == (
        "spark-agent pin x:1 --host 'spark 2' -i inv/fleet.yml --write 'my spec.toml'"
    )
