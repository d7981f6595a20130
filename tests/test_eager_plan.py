"""The eager start's plan ([correctness] eager_start): after each cell with CUDA graphs, a probe-only start of the same
configuration with --enforce-eager, its own id, no load points; none where the matrix already runs it eager; the
cells before it keep their ids; with the checks off it is refused at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import UserError
from agent.planning.matrix import EAGER, plan_cells
from agent.planning.spec import load_spec

pytestmark = pytest.mark.unit

SPEC = """
[sweep]
name = "eager"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:{digest}"
vllm_version = "0.24.0"
[[checkpoints]]
name = "nv"
model = "nv"
quant = "nvfp4"
[matrix]
moe_backend = ["marlin", "flashinfer_b12x"]
concurrency = [1, 4]
{extra}
[correctness]
{correctness}
"""


def _plan(tmp_path: Path, correctness: str, extra: str = "") -> list:
    path = tmp_path / "eager.toml"
    path.write_text(SPEC.format(digest="ab" * 32, extra=extra, correctness=correctness))
    return plan_cells(load_spec(path), "spark-a", {"simulated": True}, {})


def test_each_graphs_cell_gets_a_checks_only_eager_start_after_it(tmp_path):
    plain = _plan(tmp_path, "")
    cells = _plan(tmp_path, "eager_start = true")
    assert [c.id for c in cells[::2]] == [c.id for c in plain]  # the measured cells keep their ids
    for graphs, eager in zip(cells[::2], cells[1::2], strict=True):
        assert not graphs.config.probe_only and EAGER not in graphs.argv
        assert eager.config.probe_only and EAGER in eager.argv and eager.id != graphs.id
        assert eager.config.moe_backend == graphs.config.moe_backend
        assert eager.playbook_vars()["points"] == [] and eager.playbook_vars()["probe_only"] is True
        assert graphs.playbook_vars()["points"] and eager.label.endswith("(eager, checks only)")


def test_a_matrix_that_runs_eager_already_gets_no_eager_start(tmp_path):
    cells = _plan(tmp_path, "eager_start = true", 'extra_args = [[], ["--enforce-eager"]]')
    assert len(cells) == 4 and not any(c.config.probe_only for c in cells)


def test_an_eager_start_with_the_checks_off_is_refused_at_its_line(tmp_path):
    with pytest.raises(UserError) as err:
        _plan(tmp_path, "enabled = false\neager_start = true")
    assert "eager.toml:" in str(err.value) and "eager_start" in str(err.value)
