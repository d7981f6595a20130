"""The correctness probe's parts without hosts: scoring a probe.json, the degenerate checks, agreement with a
reference cell, the spec's [correctness] table, a hostile probe.json refused, the simulated model's answers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agent.errors import UserError
from agent.hostside import probe
from agent.judging import correctness, summary
from agent.planning.settings import CorrectnessSettings
from agent.planning.spec import load_spec
from agent.running import hostdata
from agent.sim import answers

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


def _run(say=None) -> dict[str, Any]:
    """A probe.json as a host writes it; `say(prompt)` gives an output (default: the simulated healthy model)."""
    outputs = []
    for p in probe.prompts():
        text = say(p) if say else "".join(answers.reply(p["prompt"], p["max_tokens"], "marlin") or [])
        outputs.append({"id": p["id"], "text": text, "finish_reason": "stop", "error": "", "seconds": 0.01})
    return hostdata.probe_run({"set_version": probe.SET_VERSION, "outputs": outputs, "seconds": 0.2}, "probe.json")


def _cell(cell_id: str, backend: str, run: dict[str, Any] | None, settings=None, started="2026-12-01T00:00:00Z"):
    table = correctness.table(run, settings or CorrectnessSettings())
    return {
        "cell_id": cell_id,
        "sweep": "s",
        "status": "done",
        "verdict": "valid",
        "started_at": started,
        "config": {"checkpoint": "uns-fast", "image": "i", "moe_backend": backend},
        "correctness": table,
    }


def test_the_simulated_model_scores_every_answer_and_a_wrong_one_is_scored_zero():
    healthy = correctness.table(_run(), CorrectnessSettings())
    assert healthy["probed"] and healthy["score"] == 1.0 and healthy["exact"] == healthy["answered"] > 10
    assert healthy["degenerate"] == 0 and not correctness.own_reasons(healthy)
    noisy = correctness.table(_run(lambda p: answers.garbage(p["prompt"], 8)[0] * 8), CorrectnessSettings())
    assert noisy["score"] == 0.0 and noisy["degenerate"] == noisy["prompts"]
    assert "degenerate outputs" in correctness.own_reasons(noisy)[0]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        (" the the the the the the the the the", "repetition loop"),
        (" a b a b a b a b a b a b", "repetition loop"),
        ("\x01\x02\x03 abc \x04\x05", "non-printable"),
        ("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "repetition loop"),
        (" 1234567890123", ""),
        (" 42", ""),
        (" The server answers and the driver starts its windows, one after another.", ""),
    ],
)
def test_degenerate(text, why):
    assert probe.degenerate(text, 32) == why


def test_agreement_is_the_share_before_the_first_difference():
    assert probe.agreement("a b c d", "a b c d") == (1.0, -1)
    assert probe.agreement("a b c d", "a b x d") == (0.5, 2)
    assert probe.agreement("a b c d", "") == (0.0, 0)


def test_an_honest_backend_that_parts_late_is_valid_and_a_looping_one_is_wrong():
    ref = _cell("aaaaaaaaaaaa", "marlin", _run())
    honest = _cell("bbbbbbbbbbbb", "b12x", _run(lambda p: "".join(answers.reply(p["prompt"], p["max_tokens"], "b12x"))))
    looping = _cell("cccccccccccc", "cutlass", _run(lambda p: " the" * p["max_tokens"]), started="2026-11-30T00:00:00Z")
    cells = [looping, honest, ref]
    correctness.annotate(cells)
    # the looping cell started first, yet it is never the reference: its own outputs fail
    assert {c["correctness"]["reference_cell"] for c in cells} == {"aaaaaaaaaaaa"}  # same score, same start: the id
    assert ref["correctness"]["agreement"] == 1.0 and 0.9 <= honest["correctness"]["agreement"] < 1.0
    assert honest["correctness"]["first_divergence"] == int(probe.TEXT_TOKENS * answers.SHARED_SHARE)
    assert summary.cell_verdict(ref) == summary.cell_verdict(honest) == "valid"
    assert summary.cell_verdict(looping) == summary.WRONG_OUTPUT
    assert not summary.summarize_cell(looping).rankable


def test_the_spec_names_the_reference_and_a_score_drop_beyond_the_threshold_is_wrong():
    settings = CorrectnessSettings(reference={"moe_backend": "b12x"})
    good = _run()
    # four answers lost: a drop of 4/13 > 25%, though nothing loops
    lost = {p["id"] for p in probe.prompts() if p["answer"]}
    lost = set(sorted(lost)[:4])
    worse = _run(lambda p: " 7" if p["id"] in lost else "".join(answers.reply(p["prompt"], p["max_tokens"], "x")))
    first = _cell("aaaaaaaaaaaa", "marlin", worse, settings, started="2026-11-30T00:00:00Z")
    named = _cell("bbbbbbbbbbbb", "b12x", good, settings)
    correctness.annotate([first, named])
    assert first["correctness"]["reference_cell"] == "bbbbbbbbbbbb"
    reasons = correctness.wrong_reasons(first)
    assert any("below the reference" in r for r in reasons), reasons
    # with a looser threshold the same outputs pass
    loose = CorrectnessSettings(reference={"moe_backend": "b12x"}, max_score_drop=0.5)
    first, named = _cell("aaaaaaaaaaaa", "marlin", worse, loose), _cell("bbbbbbbbbbbb", "b12x", good, loose)
    correctness.annotate([first, named])
    assert summary.cell_verdict(first) == "valid"


def test_a_cell_without_a_probe_is_judged_as_before():
    cell = _cell("aaaaaaaaaaaa", "marlin", None)
    correctness.annotate([cell])
    assert not cell["correctness"]["probed"] and summary.cell_verdict(cell) == "valid"
    other_set = _run()
    other_set["set_version"] = probe.SET_VERSION + 1  # another version's prompts: nothing to score with
    assert not correctness.table(other_set, CorrectnessSettings())["probed"]


@pytest.mark.parametrize(
    "bad",
    [
        {"set_version": 1, "outputs": "x"},
        {"set_version": 1, "outputs": [{"id": "../../etc", "text": "a"}]},
        {"set_version": 1, "outputs": [{"id": "arithmetic-1", "text": "a" * 5000}]},
        {"set_version": 1, "outputs": [{"id": "arithmetic-1", "text": "a\x00b"}]},
        {"set_version": 1, "outputs": [{"id": "arithmetic-1"}] * 300},
        {"outputs": []},
    ],
)
def test_a_hostile_probe_json_is_refused(bad):
    with pytest.raises(hostdata.BadHostData):
        hostdata.probe_run(copy.deepcopy(bad), "probe.json")


SPEC = (REPO / "examples" / "quick.toml").read_text()


def test_the_spec_table_is_read_and_bad_values_name_their_line(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(SPEC + '\n[correctness]\nmin_agreement = 0.8\nreference = { moe_backend = "marlin" }\n')
    spec = load_spec(path)
    assert spec.correctness.min_agreement == 0.8 and spec.correctness.reference == {"moe_backend": "marlin"}
    assert load_spec(REPO / "examples" / "quick.toml").correctness == CorrectnessSettings()
    for text, said in [
        ("min_score = 2", "'min_score' is a share"),
        ('reference = { host = "x" }', "reference"),
        ("enabled = 1", "'enabled'"),
        ("speed = 1", "unknown key 'speed'"),
    ]:
        path.write_text(SPEC + f"\n[correctness]\n{text}\n")
        with pytest.raises(UserError) as exc:
            load_spec(path)
        line = len(SPEC.splitlines()) + 3
        assert exc.value.exit_code == 2 and said in exc.value.message and f":{line}:" in exc.value.message


def test_the_wrong_output_fault_is_checked():
    from agent.sim import options

    assert options.parse(["uns-fast", "--sim-wrong-output", "marlin:0.5"]).sim["wrong_output"] == "marlin:0.5"
    for bad in ("marlin", "marlin:2", ":0.5", "marlin:x"):
        with pytest.raises(options.UsageError):
            options.parse(["uns-fast", "--sim-wrong-output", bad])
    assert answers.wrong("p", 1.0) and not answers.wrong("p", 0.0)


def test_the_tree_reads_as_written_and_the_judged_read_marks_what_needs_the_other_cells(tmp_path):
    """results/tree.load_cells gives the files as they are (the results layer judges nothing); judged_cells adds
    the comparison with the reference, so a cell whose own checks pass and whose outputs part too early is WRONG OUTPUT
    only there, as every reader of an answer reads it."""
    from agent.results import tree

    # b12x's honest outputs part from marlin's late (~0.9 agree): below a strict spec's bar, never on their own
    strict = CorrectnessSettings(min_agreement=0.99, reference={"moe_backend": "marlin"})
    ref = _cell("aaaaaaaaaaaa", "marlin", _run(), strict)
    b12x = _run(lambda p: "".join(answers.reply(p["prompt"], p["max_tokens"], "b12x")))
    drifting = _cell("bbbbbbbbbbbb", "b12x", b12x, strict, started="2026-12-01T01:00:00Z")
    for cell in (ref, drifting):
        cell["host"] = "spark-a"
        tree.atomic_write_toml(tmp_path / "s" / "spark-a" / cell["cell_id"] / tree.CELL_FILE, cell)
    raw = {c["cell_id"]: c for c in tree.load_cells(tmp_path / "s")}
    assert not correctness.own_reasons(raw["bbbbbbbbbbbb"]["correctness"])
    assert all("wrong" not in c["correctness"] and "agreement" not in c["correctness"] for c in raw.values())
    judged = {c["cell_id"]: c for c in correctness.judged_cells(tmp_path / "s")}
    assert judged["aaaaaaaaaaaa"]["correctness"]["agreement"] == 1.0
    assert summary.cell_verdict(judged["aaaaaaaaaaaa"]) == "valid"
    assert summary.cell_verdict(judged["bbbbbbbbbbbb"]) == summary.WRONG_OUTPUT
    assert any("agreement with the reference" in r for r in judged["bbbbbbbbbbbb"]["correctness"]["wrong"])
