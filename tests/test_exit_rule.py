"""The exit rule shared by sweep, collect and tune (README: exit codes): a planned cell without a valid measurement,
anywhere, is exit 1. Unit: summary.not_valid over cell dicts, detach.unmeasured over a results tree and a hand-out."""

from __future__ import annotations

import pytest

from agent.judging import summary
from agent.results import tree as results
from agent.running import detach

pytestmark = pytest.mark.unit

A, B, C, D = (f"{i:012x}" for i in range(4))
WRONG = {"probed": True, "wrong": ["degenerate outputs on 16 of 16 prompts"]}


def cell(host: str, cid: str, **fields: object) -> dict:
    return {"host": host, "cell_id": cid, "status": "done", "verdict": "valid", **fields}


def test_every_cell_without_a_valid_measurement_is_named_with_its_verdict():
    cells = [
        cell("spark-1", "a"),
        cell("spark-1", "b", status="failed", verdict="failed", failure_class="deep_gemm_assert"),
        cell("spark-2", "c", verdict="invalid"),
        cell("spark-2", "d", verdict="surprising"),  # an unknown verdict is not a valid one
    ]
    assert summary.not_valid(cells) == [
        "spark-1/b: failed (deep_gemm_assert)",
        "spark-2/c: invalid",
        "spark-2/d: invalid",
    ]
    assert summary.not_valid([cell("spark-1", "a")]) == []


def test_wrong_output_is_not_a_valid_measurement():
    assert summary.not_valid([cell("spark-1", "a", correctness=WRONG)]) == ["spark-1/a: wrong output"]


def test_a_handed_out_cell_counts_where_it_was_measured(tmp_path):
    def done(host: str, cid: str) -> None:
        folder = results.cell_dir(tmp_path, "s", host, cid)
        folder.mkdir(parents=True)
        (folder / results.CELL_FILE).write_text("")

    state = detach.FleetState(
        sweep="s", spec="", inventory="", replicas=1, started="", groups={"g": ["spark-1", "spark-2"]},
        assignment={"spark-1": [A, B, C], "spark-2": [D]}, facts={},
        requeued={f"spark-1/{B}": "spark-2", f"spark-1/{C}": "spark-2"},
    )  # fmt: skip
    done("spark-1", A)  # measured at home
    done("spark-2", B)  # its host was lost; the taker measured it
    done("spark-2", D)
    assert detach.unmeasured(state, tmp_path) == [f"spark-1/{C}: no result (requeued to spark-2)"]
    done("spark-1", C)  # a result on the lost host does not stand for the taker's
    assert detach.unmeasured(state, tmp_path) == [f"spark-1/{C}: no result (requeued to spark-2)"]
