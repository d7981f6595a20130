"""Names a person reads: [matrix.extra_args] variants are named as [matrix.env] variants are, and an unnamed
argument list reads as what differs between the sides, never the whole argv twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside import facts
from agent.judging import stats, summary
from agent.judging.correctness import judged_cells
from agent.planning import matrix
from agent.planning.spec import load_spec
from agent.reporting import markdown as report
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

SPEC = """
[sweep]
name = "names"
[image]
ref = "nvcr.io/nvidia/vllm@sha256:0f9c2b1e4d5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e"
[[checkpoints]]
name = "fp8"
model = "Qwen/Qwen3-30B-A3B-FP8"
quant = "fp8"
[matrix]
moe_backend = ["auto"]
concurrency = [1, 16]
[matrix.extra_args]
graphs = ["--load-format", "dummy"]
eager = ["--load-format", "dummy", "--enforce-eager"]
"""
GB10 = facts.classify_gpu({"gpu_name": "NVIDIA GB10", "compute_capability": "12.1"}, facts.load_gpu_rules())


def test_named_extra_args_variants_plan_with_their_names(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SPEC)
    cells = matrix.plan_cells(load_spec(path), "spark-1", GB10, {"spark_runtime": "docker"})
    names = {c.config.extra_args_name: c.config.server.extra_args for c in cells}
    assert names == {"graphs": ["--load-format", "dummy"], "eager": ["--load-format", "dummy", "--enforce-eager"]}
    assert all(c.config.to_dict()["extra_args_name"] for c in cells)  # in [config]: the report reads it back


def test_a_bad_variant_name_is_one_line_naming_the_file_and_line(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SPEC.replace("eager = [", '"bad name" = ['))
    with pytest.raises(UserError) as err:
        load_spec(path)
    assert f"{path}:" in err.value.message and "variant names must be" in err.value.message


def _two(root: Path, named: bool) -> None:
    base = ["--load-format", "dummy", "--max-cudagraph-capture-size", "512"]
    for name, args, v in (("graphs", base, 800.0), ("eager", [*base, "--enforce-eager"], 100.0)):
        config = {"extra_args": args, **({"extra_args_name": name} if named else {})}
        write_cell(
            root, backend="auto", checkpoint="fp8", quant="fp8", values={1: [v, v * 1.01, v * 0.99]}, config=config
        )


def test_the_answer_names_the_variant(tmp_path):
    _two(tmp_path, named=True)
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner == "extra_args=graphs", rec.reason
    assert [q.candidates for q in rec.questions] == [["eager", "graphs"]]


def test_unnamed_lists_read_as_what_differs(tmp_path):
    _two(tmp_path, named=False)
    [rec] = stats.recommend(summary.summarize_cells(judged_cells(tmp_path)))
    assert rec.winner == "extra_args=without --enforce-eager", rec.reason
    assert rec.questions[0].candidates == ["--enforce-eager", "without --enforce-eager"]
    text = report.render_markdown(report.build(judged_cells(tmp_path)))
    assert "**Run extra_args=without --enforce-eager.**" in text
    assert "extra_args=--load-format" not in text and "extra_args=[" not in text  # the shared argv: never a label
