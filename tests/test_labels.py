"""A cell's backends are spelled one way everywhere: the progress bar and env table (Cell.label) and the report."""

from __future__ import annotations

import pytest

from agent.judging.summary import summarize_cell
from agent.planning.matrix import Cell, CellConfig, backend_label
from tests.test_cell_id_golden import GOLDEN_CONFIG

pytestmark = pytest.mark.unit

CONFIG = {
    "checkpoint": "uns-fast",
    "moe_backend": "marlin",
    "linear_backend": "cutlass",
    "attention_backend": "flashinfer",
    "speculative": '{"method":"mtp","num_speculative_tokens":2}',
}


def test_backend_label_names_each_forced_backend_by_its_axis():
    assert backend_label(CONFIG) == "marlin linear=cutlass attention=flashinfer"
    assert backend_label(dict(CONFIG, moe_backend="", linear_backend="", attention_backend="")) == "auto"


def test_the_cell_label_and_the_report_use_the_same_backend_label():
    cell = Cell(
        id="0123456789ab",
        sweep="s",
        host="h",
        config=CellConfig.from_dict({**GOLDEN_CONFIG, **CONFIG}),
        env={},
        provenance=[],
    )
    assert cell.label == "uns-fast marlin linear=cutlass attention=flashinfer spec=mtp"
    assert summarize_cell({"config": CONFIG, "runs": []}).backend in cell.label
