"""The steady-state settings of a spec ([matrix] warmup_max, warmup_tolerance) and dummy weights in the judgement:
bad values name the file and line, unset keys leave cell ids alone, and a dummy-weight cell from a real vLLM 0.24
log is never WRONG OUTPUT nor the reference, while the report says its ranking is speed-only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside import logparse
from agent.judging import correctness, summary
from agent.planning.matrix import CellConfig
from agent.planning.spec import load_spec
from agent.reporting import correctness as correctness_report

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
GOOD = (REPO / "examples" / "quick.toml").read_text()
LOGS = REPO / "tests" / "data" / "logs" / "vllm-0.24-h200"


def _spec(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(GOOD.replace("repeats = 3", "repeats = 3\n" + extra))
    return path


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("extra", "key", "said"),
    [
        ("warmup_tolerance = 1.5", "warmup_tolerance", "from 0 (fixed warmup) to below 1"),
        ("warmup_tolerance = -0.1", "warmup_tolerance", "from 0 (fixed warmup) to below 1"),
        ('warmup_tolerance = "5%"', "warmup_tolerance", "must be int or float"),
        ("warmup_max = 4", "warmup_max", "needs warmup_tolerance"),
        ("warmup_tolerance = 0.05\nwarmup_max = 0", "", ""),  # 0: the default cap
        ("warmup = 3\nwarmup_tolerance = 0.05\nwarmup_max = 2", "warmup_max", "at least warmup (3)"),
        ("warmup_tolerance = 0.05\nwarmup_max = 500", "warmup_max", "from 0 to 100"),
    ],
)
def test_bad_steady_state_settings_name_their_line(tmp_path, extra, key, said):
    path = _spec(tmp_path, extra.replace("warmup = 3\n", ""))
    if "warmup = 3" in extra:
        path.write_text(path.read_text().replace("warmup = 1", "warmup = 3"))
    if not key:
        assert load_spec(path).warmup_max == 6
        return
    with pytest.raises(UserError) as exc:
        load_spec(path)
    assert exc.value.exit_code == 2 and f"spec.toml:{_line(path, key + ' =')}:" in exc.value.message
    assert said in exc.value.message


def test_the_cli_refuses_a_bad_tolerance_with_exit_2(tmp_path):
    path = _spec(tmp_path, "warmup_tolerance = 2")
    done = subprocess.run(  # refused before the inventory is read, let alone a host touched
        [sys.executable, "-m", "agent.cli", "sweep", str(path), "-i", str(tmp_path / "no-such-inventory.yml")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"spec.toml:{_line(path, 'warmup_tolerance')}:" in done.stderr + done.stdout


def test_settings_reach_the_cell_config_and_only_then_its_id():
    base = {k: v for k, v in _config().items() if not k.startswith("warmup_")}
    assert "warmup_max" not in CellConfig.from_dict(base).to_dict()  # unset: the table (and id) of before
    steady = CellConfig.from_dict({**base, "warmup_max": 6, "warmup_tolerance": 0.05}).to_dict()
    assert steady["warmup_max"] == 6 and steady["warmup_tolerance"] == 0.05


def _config() -> dict:
    spec = load_spec(REPO / "examples" / "quick.toml")
    fields = {
        "image": spec.image,
        "runtime": "docker",
        "checkpoint": "x",
        "model": "x",
        "quant": "nvfp4",
        "moe_backend": "marlin",
        "linear_backend": "",
        "attention_backend": "",
        "concurrency": [1],
        "duration_s": 1.0,
        "warmup": 1,
        "repeats": 2,
    }
    return CellConfig.from_dict(fields).to_dict()


def _cell(log: str, cell_id: str, score: float, argv: list[str] | None = None) -> dict:
    attestation = logparse.parse((LOGS / log).read_text(errors="replace")) if log else {}
    return {
        "cell_id": cell_id,
        "sweep": "s",
        "verdict": "valid",
        "status": "done",
        "config": {"checkpoint": "moe-fp8", "image": "i", "moe_backend": cell_id},
        "attestation": attestation,
        "launch": {"argv": argv or [], "command": ""},
        "correctness": {
            "probed": True,
            "prompts": 10,
            "answered": 5,
            "score": score,
            "degenerate": 10 if score == 0 else 0,
            "errors": 0,
            "thresholds": {"min_score": 0.6, "max_score_drop": 0.25, "min_agreement": 0.6, "max_degenerate": 0.1},
            "outputs": [{"id": "qa-1", "kind": "qa", "text": "noise" if score == 0 else "42", "error": ""}],
        },
        "runs": [{"concurrency": 1, "repeat": k, "ok": True, "output_throughput": 100.0 + k} for k in (1, 2)],
    }


@pytest.mark.parametrize("log", sorted(p.name for p in LOGS.glob("*.log")))
def test_a_real_dummy_weight_log_is_recognised(log):
    facts = logparse.parse((LOGS / log).read_text(errors="replace"))
    assert facts["load_format"] == "dummy"
    assert correctness.not_judged({"attestation": facts}) == correctness.DUMMY


def test_dummy_weights_are_not_judged_never_the_reference_and_ranked_on_speed_only():
    noisy = _cell("h200-fp8-triton.log", "triton", 0.0)
    launched = _cell("", "marlin", 1.0, ["vllm", "serve", "m", "--load-format=dummy"])  # the launch alone says it
    honest = _cell("", "auto", 0.8)
    assert correctness.wrong_reasons(noisy) == [] and summary.cell_verdict(noisy) == "valid"
    correctness.annotate([noisy, launched, honest])
    assert noisy["correctness"]["not_judged"] == launched["correctness"]["not_judged"] == correctness.DUMMY
    assert honest["correctness"]["not_judged"] == "" and honest["correctness"]["reference_cell"] == "auto"
    assert noisy["correctness"]["wrong"] == [] and summary.cell_verdict(noisy) == "valid"
    correctness.annotate([noisy, launched])  # only dummy cells: no reference at all
    assert noisy["correctness"]["reference_cell"] == launched["correctness"]["reference_cell"] == ""
    summaries = summary.summarize_cells([noisy, launched])
    said = "\n".join(correctness_report.what_to_run_lines(summaries))
    assert "The ranking is speed-only" in said and "2 cell(s)" in said
    table = "\n".join(correctness_report.table_lines(summaries))
    assert table.count("quality not judged: dummy weights") == 2 and "WRONG OUTPUT" not in table
