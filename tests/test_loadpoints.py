"""The load axes inside a cell (issue 15): [load] request_rate and context_depth as lists, the points they make,
the window names (one grammar for the host, the archive, the tree and the store), and what stats, the report,
compare and export make of them. Over SSH on the simulated Spark: tests/test_axes_sweep.py (cell.yml) and
tests/test_fleet.py (the detached runner)."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest

from agent.errors import UserError
from agent.hostside import facts, loadgen, loadpoints
from agent.hostside.loadpoints import Point
from agent.judging import correctness, stats, summary
from agent.planning import matrix
from agent.planning.spec import load_spec
from agent.reporting import compare, export, htmlpage, loadreport
from agent.reporting import markdown as report
from agent.results import tree
from agent.results.records import MeasurementRecord
from agent.running import archive, hostdata

from .test_report_fixtures import measurement, write_cell

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
SPEC = (REPO / "examples" / "quick.toml").read_text()


# ---------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("point", "repeat", "name"),
    [
        (Point(0.0, 0, 8), 1, "c008-r1"),  # a closed loop: the name trees held before the load axes
        (Point(2.5, 0, 8), 3, "q2.5-c008-r3"),
        (Point(2.0, 8192, 4), 1, "q2-c004-d8192-r1"),
        (Point(0.0, 1024, 16), 2, "c016-d1024-r2"),
        (Point(100000.0, 0, 1), 1, "q100000-c001-r1"),
        (Point(0.001, 0, 1000), 1, "q0.001-c1000-r1"),
    ],
)
def test_a_window_is_named_by_its_point_and_reads_back(point, repeat, name):
    assert point.window(repeat) == name
    assert loadgen.result_filename(point.concurrency, repeat, point.rate, point.depth) == name + ".json"
    assert tree.run_name(point.concurrency, repeat, point.rate, point.depth) == name + ".toml"
    assert loadpoints.parse_window(name) == (point, repeat)
    assert archive.RUN_FILE.fullmatch(name + ".json")


@pytest.mark.parametrize(
    "name",
    [
        "c8-r1",  # 3 digits at least
        "q-1-c008-r1",
        "qnan-c008-r1",
        "qinf-c008-r1",
        "q2-c008-d0-r1",  # depth 0 is no depth: never written
        "q02-c008-r1",
        "q2-c008-r1.json.json",
        "../c008-r1",
        "c008-d8192-q2-r1",  # the parts in another order
        "q2-c008-r",
        "Q2-c008-r1",
        "q2-c008-d8192-r1 ",
    ],
)
def test_names_outside_the_grammar_are_not_windows(name):
    assert loadpoints.parse_window(name) is None
    assert not archive.RUN_FILE.fullmatch(name + ".json")
    assert archive.file_cap(name + ".json") is None


def test_a_window_file_outside_the_grammar_in_a_tar_is_refused(tmp_path):
    tar_path = tmp_path / "cell.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name in ("q2-c004-d128-r1.json", "q2-c004-d128-r1;rm.json"):
            data = b"{}"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "out").mkdir()
    with pytest.raises(hostdata.BadHostData, match=re.escape("q2-c004-d128-r1;rm.json")):
        archive.unpack(tar_path, tmp_path / "out")


def test_a_cells_points_are_rates_by_depths_by_levels_in_the_order_they_run():
    shape = {"request_rate": 0.0, "request_rates": [2.0, 6.0], "context_depth": 0, "context_depths": [128, 512]}
    points = loadpoints.cell_points([1, 4], shape)
    assert [p.name for p in points] == [
        "q2-c001-d128",
        "q2-c004-d128",
        "q2-c001-d512",
        "q2-c004-d512",
        "q6-c001-d128",
        "q6-c004-d128",
        "q6-c001-d512",
        "q6-c004-d512",
    ]
    assert loadpoints.cell_points([1, 4], {}) == [Point(0.0, 0, 1), Point(0.0, 0, 4)]  # today's cell
    assert loadpoints.cell_points([4], {"request_rate": 3.0, "context_depth": 256}) == [Point(3.0, 256, 4)]


# ---------------------------------------------------------------- the spec


def _spec(tmp_path: Path, load: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace("[load]\n", "[load]\n" + load))
    return path


def _cells(tmp_path: Path, load: str) -> list[matrix.Cell]:
    gb10 = facts.classify_gpu({"gpu_name": "NVIDIA GB10", "compute_capability": "12.1"}, facts.load_gpu_rules())
    return matrix.plan_cells(load_spec(_spec(tmp_path, load)), "spark-1", gb10, {"spark_runtime": "docker"})


def test_lists_are_axes_inside_the_cell_and_scalars_keep_todays_ids(tmp_path):
    plain = _cells(tmp_path, "")
    lists = _cells(tmp_path, "request_rate = [2, 6]\ncontext_depth = [128, 512]\n")
    assert len(lists) == len(plain)  # the load axes make no cell of their own
    config = lists[0].config
    assert config.load.request_rates == [2.0, 6.0] and config.load.context_depths == [128, 512]
    assert config.load.request_rate == 0.0 and config.load.context_depth == 0
    assert lists[0].id != plain[0].id  # the id covers the lists
    table = config.to_dict()
    assert table["request_rates"] == [2.0, 6.0] and "request_rate" not in table
    assert matrix.CellConfig.from_dict(table) == config  # cell.toml's [config] reads back
    assert "request_rates" not in plain[0].config.to_dict()  # absent at their default: old ids unchanged
    points = lists[0].playbook_vars()["points"]
    assert len(points) == 4 * len(config.concurrency) and points[0] == {"rate": 2.0, "depth": 128, "concurrency": 1}
    # one value in a list is that value: the same cell as the scalar
    assert _cells(tmp_path, "request_rate = [4]\n")[0].id == _cells(tmp_path, "request_rate = 4.0\n")[0].id
    assert _cells(tmp_path, "request_rate = [6, 2]\n")[0].id != lists[0].id  # the order is the run order


@pytest.mark.parametrize(
    ("load", "key", "words"),
    [
        ("request_rate = []", "request_rate", "empty list"),
        ("request_rate = [2, -1]", "request_rate", "> 0"),
        ("request_rate = [2, 1.23456789]", "request_rate", "6 significant digits"),
        ("request_rate = [2, 2]", "request_rate", "twice"),
        ("context_depth = [512, 0]", "context_depth", "> 0"),
        ("context_depth = [512, 262100]", "context_depth", "exceeds max_model_len"),
        ("context_depth = [512, true]", "context_depth", "must be a int"),
    ],
)
def test_a_bad_list_names_its_line_and_exits_2(tmp_path, load, key, words):
    path = _spec(tmp_path, load + "\n")
    with pytest.raises(UserError) as exc:
        load_spec(path)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith(key))
    assert exc.value.exit_code == 2 and exc.value.message.startswith(f"{path}:{line}: "), exc.value.message
    assert words in exc.value.message and "\n" not in exc.value.message


# ---------------------------------------------------------------- results


def _open_cell(
    root: Path, *, checkpoint: str = "uns-fast", backend: str = "marlin", scale: float = 1.0, slo: bool = True
):
    """A cell with request_rate = [2, 8] x context_depth = [128, 512] at c=4: at 8 req/s it serves 4 (saturated)."""
    config = {"request_rates": [2.0, 8.0], "context_depths": [128, 512]} | ({"goodput": ["ttft:500"]} if slo else {})
    config |= {"concurrency": [4]}
    folder = write_cell(root, backend=backend, values={}, checkpoint=checkpoint, config=config)
    cell_id = folder.name
    for rate in (2.0, 8.0):
        for depth in (128, 512):
            for repeat, wobble in ((1, 0.99), (2, 1.0), (3, 1.01)):
                run = measurement(cell_id, 4, repeat, 100.0 * rate * scale * wobble * (1.5 if depth == 128 else 1))
                served = min(rate, 4.0) * wobble
                run.update(
                    request_rate=rate,
                    context_depth=depth,
                    request_throughput=served,
                    request_goodput=served * 0.5,
                    p90_ttft_ms=200.0 * rate,
                    p95_ttft_ms=300.0 * rate,
                    p99_ttft_ms=400.0 * rate,
                )
                tree.atomic_write_toml(folder / tree.run_name(4, repeat, rate, depth), run)
    return folder


def test_the_tree_reads_windows_by_point_old_names_included(tmp_path):
    folder = _open_cell(tmp_path)
    tree.atomic_write_toml(folder / "c004-r9.toml", measurement(folder.name, 4, 9, 50.0))  # from an older tree
    (folder / "q2-c004-r1.toml.bak").write_text("x")  # not a window
    [cell] = correctness.judged_cells(tmp_path)
    names = [loadpoints.of_window(r).window(r["repeat"]) for r in cell["runs"]]
    assert names[0] == "c004-r9" and names[1:4] == ["q2-c004-d128-r1", "q2-c004-d128-r2", "q2-c004-d128-r3"]
    assert len(names) == 13 and names[-1] == "q8-c004-d512-r3"
    record = MeasurementRecord.from_toml(cell["runs"][6])
    assert record.name == "q2-c004-d512-r3.toml" and record.point == Point(2.0, 512, 4)


def test_stats_summarize_each_rate_and_depth_and_say_each_cell_once(tmp_path):
    _open_cell(tmp_path)
    cells = correctness.judged_cells(tmp_path)
    summaries = summary.summarize_cells(cells)
    assert [(s.load.rate, s.load.depth) for s in summaries] == [(2.0, 128), (2.0, 512), (8.0, 128), (8.0, 512)]
    at = {(s.load.rate, s.load.depth): s for s in summaries}
    p = at[(8.0, 512)].points[4]
    assert p.throughput is not None and p.throughput.median == pytest.approx(800.0)
    assert p.tails["p90_ttft_ms"].median == pytest.approx(1600.0) and p.tails["median_ttft_ms"].median == 180.0
    assert p.tails["request_goodput"].median == pytest.approx(2.0)
    assert len(summary.distinct_cells(summaries)) == 1
    # each slice pairs at its own load: a question is ranked within the load held equal
    assert len({stats.pairing_key(s.cell) for s in summaries}) == 4


def test_the_report_shows_the_load_columns_percentiles_goodput_and_saturation(tmp_path):
    _open_cell(tmp_path, checkpoint="uns-<b>1</b>|x")  # spec text is escaped wherever it is shown
    data = report.build(correctness.judged_cells(tmp_path))
    cols = report.median_columns(data.summaries)
    assert cols[cols.index("c") - 2 : cols.index("c")] == ["rate req/s", "depth"] and "goodput req/s" in cols
    rows = report.median_rows(data.summaries)
    assert all(len(r) == len(cols) for r in rows) and [r[cols.index("rate req/s")] for r in rows] == list("2288")
    text = report.render_markdown(data)
    pct = text.split("## Latency percentiles and goodput", 1)[1].split("\n## ", 1)[0]
    assert "| 8 | 512 | 4 | TTFT | 180.0 | 1,600.0 | 2,400.0 | 3,200.0 | 2.00 | ttft:500 |" in pct, pct
    sweep = text.split("## Rate sweep: served vs offered", 1)[1].split("\n## ", 1)[0]
    assert "| 8 | 4.00 |" in sweep and "**saturated**" in sweep and "Saturates at 8 req/s" in sweep, sweep
    assert "| 2 | 2.00 |" in sweep
    assert "<b>" not in text
    assert "Cells: 1 —" in text  # one cell, however many slices
    html = htmlpage.render(data, {})
    assert "<b>1</b>" not in html and "Rate sweep" in html
    [sweep] = [sw for sw in loadreport.rate_sweeps(data.summaries) if sw.depth == 512]
    assert [(p.rate, p.saturated) for p in sweep.points] == [(2.0, False), (8.0, True)] and sweep.saturated_at == 8.0
    images = report.render_plots(data)
    assert images["rate_sweep.png"].startswith(b"\x89PNG")
    assert "![rate_sweep.png](rate_sweep.png)" in report.render_markdown(data, images)


def test_a_report_without_load_axes_keeps_its_table(tmp_path):
    write_cell(tmp_path, backend="marlin", values={1: [60.0, 61.0]})
    data = report.build(correctness.judged_cells(tmp_path))
    assert report.median_columns(data.summaries) == report.MEDIAN_COLUMNS
    assert loadreport.rate_sweep_lines(data.summaries) == [] and loadreport.rate_plot(data.summaries) == {}


def test_compare_ranks_by_goodput_or_throughput_and_says_which(tmp_path):
    _open_cell(tmp_path / "a", backend="marlin")
    _open_cell(tmp_path / "b", backend="marlin", scale=0.5)  # half the tok/s, the same goodput
    a, b = correctness.judged_cells(tmp_path / "a"), correctness.judged_cells(tmp_path / "b")
    by_tput = compare.compare(a, b)
    assert len(by_tput.diffs) == 4 and len(by_tput.regressions) == 4
    by_goodput = compare.compare(a, b, rank_by="goodput")
    assert not by_goodput.regressions and by_goodput.rank_by == "goodput"
    text = compare.render_markdown(by_goodput)
    assert "Ranked by: goodput" in text and "A goodput req/s" in text
    assert any("2 req/s, depth 128" in d.label for d in by_goodput.diffs)


def test_export_carries_the_point_of_every_window(tmp_path):
    _open_cell(tmp_path)
    rows = export.rows(correctness.judged_cells(tmp_path))
    assert rows[0]["window"] == "q2-c004-d128-r1" and rows[0]["request_rate"] == 2.0
    assert rows[0]["context_depth"] == 128
    header = export.to_csv(rows).splitlines()[0].split(",")
    assert {"window", "request_rate", "context_depth", "request_goodput", "p90_ttft_ms"} <= set(header)


def test_a_cell_with_load_axes_is_one_cell_to_the_rule_effects_and_the_replicas(tmp_path):
    _open_cell(tmp_path)  # measured at 4 points on one host: no replica
    lists = {"request_rates": [2.0, 8.0], "context_depths": [128, 512], "concurrency": [4]}
    write_cell(
        tmp_path,
        backend="marlin",
        values={},
        status="failed",
        verdict="failed",
        failure_class="deep_gemm_assert",
        config={**lists, "goodput": ["ttft:500"], "env_variant": "no-rule"},
    )
    summaries = summary.summarize_cells(correctness.judged_cells(tmp_path))
    effects = stats.startup_effects(summaries)
    assert effects == [
        "env_variant: with no-rule the server failed to start (deep_gemm_assert), where none ran (checkpoint "
        "uns-fast, backend marlin held equal, on spark-1)"
    ], effects
    assert "## Replicas across hosts" not in report.render_markdown(report.build(correctness.judged_cells(tmp_path)))


def test_the_end_of_sweep_table_names_each_load_slice(tmp_path):
    from rich.console import Console

    _open_cell(tmp_path)
    console = Console(width=200, record=True)
    console.print(report.terminal_table(correctness.judged_cells(tmp_path)))
    text = console.export_text()
    assert "marlin @ 2 req/s, depth 128" in text and "marlin @ 8 req/s, depth 512" in text
