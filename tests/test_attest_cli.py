"""`spark-agent attest LOGFILE`: facts + verdict for a log a user already has. Exit 0 valid, 1 invalid, 3 failed, 2 bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main

pytestmark = pytest.mark.unit

LOGS = Path(__file__).parent / "data" / "logs" / "synthetic"
MARLIN = str(LOGS / "v0.24-nvfp4-marlin-mtp.log")


def run_json(capsys, *argv) -> tuple[int, dict]:
    rc = main(["attest", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_valid_log_exits_0_with_facts_and_verdict(capsys):
    rc, out = run_json(capsys, MARLIN, "--expect", "moe=marlin", "--expect", "attention=FLASHINFER")
    assert rc == 0 and out["verdict"]["verdict"] == "valid"
    assert out["facts"]["moe_backend"] == "marlin" and out["requested"]["attention_backend"] == "FLASHINFER"


def test_wrong_backend_and_dead_variable_exit_1(capsys):
    rc, out = run_json(
        capsys, MARLIN, "--expect", "moe=flashinfer_b12x", "--expect-env", "VLLM_FP8_MOE_BACKEND,CUTE_DSL_ARCH"
    )
    assert rc == 1
    assert out["verdict"]["reasons"] == [
        "moe: requested flashinfer_b12x, loaded MARLIN",
        "dead variable: VLLM_FP8_MOE_BACKEND (vLLM 0.24.0 does not know it)",
    ]


def test_failed_start_exits_3(capsys):
    rc, out = run_json(capsys, str(LOGS / "v0.24-nvfp4-draft-backend.log"))
    assert rc == 3 and out["facts"]["failure"]["class"] == "unsupported_moe_backend"


def test_table_output_names_the_mismatch(capsys):
    rc = main(["attest", MARLIN, "--expect", "draft_moe=marlin"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "INVALID" in out and "draft moe: requested marlin, loaded TRITON" in out and "MARLIN (nvfp4)" in out


@pytest.mark.parametrize(
    "argv,words",
    [
        (["/no/such/log"], "no such file"),
        ([MARLIN, "--expect", "moe"], "AXIS=BACKEND"),
        ([MARLIN, "--expect", "gpu=h200"], "AXIS=BACKEND"),
        ([MARLIN, "--expect-env", "A=1"], "name only"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, words):
    assert main(["attest", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_a_file_that_is_no_vllm_log_is_bad_input(tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("hello\nworld\n")
    assert main(["attest", str(other)]) == 2
    assert "no vLLM log line" in capsys.readouterr().err


def test_the_installed_command_in_a_real_process(tmp_path):
    wrapped = tmp_path / "compose.log"
    wrapped.write_text("".join(f"vllm-1  | {x}\n" for x in Path(MARLIN).read_text().splitlines()))
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "attest", str(wrapped), "--expect", "moe=b12x", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["facts"]["moe_backend_raw"] == "MARLIN"


FRAGMENTS = Path(__file__).parent / "data" / "logs" / "public-fragments"


def test_a_pasted_fragment_is_attested_with_low_confidence(capsys):
    rc, out = run_json(capsys, str(FRAGMENTS / "v0.24-rtx5090-prefixless-marlin.log"), "--expect", "moe=marlin")
    assert (
        rc == 3 and out["facts"]["confidence"] == "low" and out["facts"]["moe_backend"] == "marlin"
    )  # not ready: never valid
    assert any("lower confidence" in note for note in out["verdict"]["notes"])


def test_a_fragment_from_stdin_in_a_real_process():
    text = (FRAGMENTS / "v0.9-bare-traceback-root-cause-missing.log").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "attest", "-", "--json"], input=text, capture_output=True, text=True
    )
    out = json.loads(proc.stdout)
    assert proc.returncode == 3 and out["facts"]["failure"]["class"] == "root_cause_not_in_excerpt"


@pytest.mark.parametrize(
    "paste,key,value",
    [
        ("INFO ... Using Marlin backend\n", "moe_backend", "marlin"),
        (
            "Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598\n",
            "spec_acceptance_rates",
            [0.642],
        ),
        ("$ vllm serve m\nvllm: error: unrecognized arguments: --omni\n", "failure", None),
    ],
)
def test_a_paste_with_one_known_message_is_attested_never_refused(tmp_path, capsys, paste, key, value):
    log = tmp_path / "paste.log"
    log.write_text(paste)
    rc, out = run_json(capsys, str(log))
    assert rc in (1, 3) and out["facts"]["confidence"] == "low"  # never 2, never valid (it ends before ready)
    assert out["facts"][key] == value if value is not None else out["facts"]["failure"]["class"] == "invalid_args"


@pytest.mark.attack("attest: rich markup in a log (a model name, a backend) crashes the table or styles it")
def test_rich_markup_in_a_log_is_shown_as_text(tmp_path, capsys):
    hostile = "[/]x[bold red]owned[/bold red][link=https://evil.example]y[/link]"
    text = Path(MARLIN).read_text().replace("/models/uns-fast", hostile)
    assert hostile in text
    log = tmp_path / "server.log"
    log.write_text(text)
    rc = main(["attest", str(log)])
    out = capsys.readouterr().out
    assert rc in (0, 1) and "What loaded" in out
    assert "[/]x[bold" in out.replace("\n", "")  # shown as the log says it, not interpreted
