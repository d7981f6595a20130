"""Issue 18 §5: the report reads well. Every figure holds its labels, a point measured once shows no spread, the
page leads with the answer and the problems, and a cell whose server died shows its cause once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.judging.correctness import judged_cells
from agent.reporting import markdown as report
from agent.results.tree import atomic_write_toml, read_toml
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

LONG = "a-checkpoint-with-a-really-long-name-like-people-use-Qwen3.6-35B-A3B-NVFP4-fast"


@pytest.fixture
def cells(tmp_path: Path) -> list[dict]:
    root = tmp_path / "r"
    write_cell(root, backend="marlin", values={c: [60.0 * c, 61.0 * c, 59.0 * c] for c in (1, 8, 64)})
    write_cell(root, backend="flashinfer_b12x", checkpoint=LONG, values={1: [25.0]})  # measured once
    died = write_cell(
        root, backend="triton", values={1: [50.0, 51.0], 8: ["connection refused", "connection refused"]},
        status="done", verdict="failed", failure_class="engine_died",
    )  # fmt: skip
    table = read_toml(died / "cell.toml")
    table["died"] = {"at": "2026-11-29T19:12:00Z", "window": "c008-r1", "cause": "cuda_error",
                     "root_cause": "CUDA error: an illegal memory access was encountered"}  # fmt: skip
    atomic_write_toml(died / "cell.toml", table)
    return judged_cells(root)


@pytest.mark.parametrize("panels", [1, 2])
def test_every_figure_holds_its_labels(cells, panels):
    import matplotlib

    matplotlib.use("Agg")
    data = report.build(cells if panels == 2 else cells[:1])
    for title, ylabel, attr in report.PLOTS.values():
        fig = report.figure(data.summaries, title, ylabel, attr)
        fig.canvas.draw()
        box = fig.bbox
        renderer = fig.canvas.get_renderer()
        texts = [t for t in drawn_texts(fig) if t.get_text().strip()]
        assert any(t.get_text() == ylabel for t in texts)
        for t in texts:
            ext = t.get_window_extent(renderer)
            inside = ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1 and ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1
            assert inside, f"{title}: {t.get_text()!r} at {ext} outside {box}"


def drawn_texts(fig) -> list:
    """The suptitle, and per visible panel: title, axis labels, legend, and the tick labels inside the view."""
    out = [fig._suptitle] if fig._suptitle else []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        out += [ax.title, ax.xaxis.label, ax.yaxis.label]
        if ax.get_legend():
            out += ax.get_legend().get_texts()
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            out += [t.label1 for t in axis.get_major_ticks() if lo <= t.get_loc() <= hi and t.label1.get_visible()]
    return out


def test_one_repeat_shows_no_spread(cells):
    rows = report.median_rows(report.build(cells).summaries)
    once = next(r for r in rows if r[2] == "flashinfer_b12x")
    assert once[6] == "–" and once[7] == "–" and once[10] == "1"  # spread, min–max, n
    assert "0.0%" not in " ".join(once)


def test_page_leads_with_the_answer_then_the_problems(cells):
    text = report.render_markdown(report.build(cells))
    order = [text.index(h) for h in ("## What to run", "## Problems", "## Provenance", "## Plots", "## Medians")]
    assert order == sorted(order)
    problems = text.split("## Problems", 1)[1].split("##", 1)[0]
    assert "**1** failed cell(s)" in problems and "**2** failed run(s)" in problems


def test_a_died_cell_shows_its_cause_once_not_its_connection_errors(cells):
    text = report.render_markdown(report.build(cells))
    failed_runs = text.split("## Failed runs", 1)[1].split("##", 1)[0]
    assert "connection refused" not in failed_runs
    assert "2 run(s) failed" in failed_runs and "illegal memory access" in failed_runs and "cuda_error" in failed_runs
