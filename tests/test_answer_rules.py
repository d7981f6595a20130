"""The rules behind every answer, over generated results trees (Hypothesis): a metric zero or missing in every window is
never ranked; a combination of per-axis winners that was never measured is never offered to run; every configuration
compare could not compare is reported, and fails --fail-on-regression."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.cli import main
from agent.judging import measurable, stats
from agent.judging.correctness import judged_cells
from agent.reporting import compare as compare_report
from agent.reporting import markdown as report
from tests.test_report_fixtures import GB10_FACTS, write_cell

pytestmark = pytest.mark.unit

RULES = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BACKENDS = ["marlin", "flashinfer_b12x", "b12x"]
CHECKPOINTS = ["nv", "uns", "uns-fast"]
MTP = json.dumps({"method": "mtp", "num_speculative_tokens": 1})
HOSTS = ["spark-1", "spark-2", "spark-3"]
LEVELS = [1, 8]

combos = st.lists(
    st.tuples(st.sampled_from(BACKENDS), st.sampled_from(CHECKPOINTS), st.booleans()), min_size=1, max_size=7
).map(lambda xs: sorted(set(xs)))
speeds = st.floats(min_value=20.0, max_value=400.0, allow_nan=False)
noise = st.floats(min_value=0.0, max_value=0.3, allow_nan=False)


def _windows(folder: Path, **keys: float) -> None:
    """Rewrite every window of a cell with these keys (e.g. a 3 s window where no request finished)."""
    import tomllib

    for path in folder.glob("c*-r*.toml"):
        data = tomllib.loads(path.read_text()) | keys
        path.write_text(tomli_w.dumps(data))


def _tree(root: Path, design, base, spread, *, finished: bool, hosts=("spark-1",)) -> None:
    for i, (backend, checkpoint, mtp) in enumerate(design):
        speed = base * (1.0 + 0.37 * i)
        values = {c: [speed * c * (1 - spread), speed * c, speed * c * (1 + spread)] for c in LEVELS}
        folder = write_cell(
            root,
            backend=backend,
            checkpoint=checkpoint,
            host=hosts[i % len(hosts)],
            config={"speculative": MTP} if mtp else {},
            values=values,
        )
        if finished:
            _windows(folder, duration=60.0, request_goodput=speed / 256)
        else:  # windows shorter than a request: nothing finished, TPOT and goodput read 0
            _windows(folder, duration=3.0, completed=0, request_goodput=0.0, median_tpot_ms=0.0, median_e2el_ms=0.0)


def _reported(root: Path, design, base, spread, rank_by, *, finished: bool):
    """The generated tree, read back: its cells, the report's data and its Markdown."""
    _tree(root, design, base, spread, finished=finished)
    cells = judged_cells(root)
    data = report.build(cells, rank_by=rank_by)
    return cells, data, report.render_markdown(data)


@RULES
@given(design=combos, base=speeds, spread=noise, rank_by=st.sampled_from(["goodput", "throughput"]))
def test_a_metric_zero_in_every_window_is_never_ranked(design, base, spread, rank_by):
    with tempfile.TemporaryDirectory() as tmp:
        _, data, text = _reported(Path(tmp), design, base, spread, rank_by, finished=False)
        assert "Not measured: TPOT, end-to-end latency and goodput (no request finished inside any 3 s window)" in (
            text
        )
        assert "(--duration " in text  # which window length would measure them
        if rank_by == "goodput":
            for rec in data.recommendations:
                assert rec.winner is None and rec.winner_cells == []
                assert all(q.winner is None and q.matchups == [] for q in rec.questions)
                assert "goodput is not measured" in rec.reason and "--duration" in rec.reason
            assert "**Run " not in text and "Command (" not in text


@RULES
@given(design=combos, base=speeds, spread=noise, rank_by=st.sampled_from(["goodput", "throughput"]))
def test_what_to_run_is_always_a_measured_valid_cell(design, base, spread, rank_by):
    with tempfile.TemporaryDirectory() as tmp:
        cells, data, text = _reported(Path(tmp), design, base, spread, rank_by, finished=True)
        measured = {c["cell_id"] for c in cells}
        for rec in data.recommendations:
            if rec.winner is None:
                continue
            assert rec.winner_cells, rec.winner  # a winner always comes with the cells it was measured as
            for s in rec.winner_cells:
                assert s.rankable and s.cell["cell_id"] in measured
                for axis, value in rec.choice.items():
                    assert stats.value_label(s.config, axis) == value
            assert any(measurable.measured(s.cell["runs"], stats.RANK_BY[rank_by][0]) for s in rec.winner_cells)
        shown = sum(len(r.winner_cells) for r in data.recommendations)
        assert text.count("Command (") == shown
        assert text.count("**Run ") == sum(r.winner is not None for r in data.recommendations)


def test_both_sides_zero_never_rank():
    assert stats.rank_pair([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]).outcome == stats.CANNOT_RANK
    assert stats.rank_pair([0.0, 0.1, 0.0], [0.0, 0.0, 0.0]).outcome == stats.CANNOT_RANK  # medians both 0
    assert stats.rank_pair([0.5, 0.6, 0.55], [0.0, 0.0, 0.0]).outcome == "a"  # one side finished requests


configs = st.lists(
    st.tuples(
        st.sampled_from(BACKENDS),
        st.sampled_from(HOSTS),  # where A measured it
        st.sampled_from(HOSTS),  # where B measured it
        st.sampled_from(["a", "b", "both"]),  # which runs measured it
        st.sampled_from(["valid", "valid", "valid", "invalid"]),
        st.sampled_from(["valid", "valid", "valid", "invalid"]),
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda x: x[0],
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(design=configs, base=speeds, reference=st.booleans())
def test_compare_reports_every_configuration_it_could_not_compare(design, base, reference):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i, (backend, host_a, host_b, where, verdict_a, verdict_b) in enumerate(design):
            k = 1.0 + 0.2 * i
            values = {c: [base * k * c * 0.99, base * k * c, base * k * c * 1.01] for c in LEVELS}
            if where in ("a", "both"):
                write_cell(root / "a", backend=backend, host=host_a, verdict=verdict_a, values=values)
            if where in ("b", "both"):
                write_cell(root / "b", backend=backend, host=host_b, verdict=verdict_b, values=values)
        if reference:  # a reference cell on every host of each run: the host effects are known
            for side in ("a", "b"):
                for host in HOSTS:
                    ref = {c: [50.0 * c * 0.99, 50.0 * c, 50.0 * c * 1.01] for c in LEVELS}
                    write_cell(root / side, backend="triton", checkpoint="ref", host=host, values=ref, facts=GB10_FACTS)
        cells_a = judged_cells(root / "a") if (root / "a").is_dir() else []
        cells_b = judged_cells(root / "b") if (root / "b").is_dir() else []
        cmp = compare_report.compare(cells_a, cells_b)

        keys_a = {compare_report.match_key(c, False) for c in cells_a}
        keys_b = {compare_report.match_key(c, False) for c in cells_b}
        said = cmp.uncompared + cmp.same_failure
        decided = [c for c in cmp.configs if c.change is not None]
        for key in keys_a | keys_b:  # every configuration: compared, or said with why
            cell = next(c for c in cells_a + cells_b if compare_report.match_key(c, False) == key)
            name = f"{cell['config']['checkpoint']} / {stats.backend_label(cell['config'])}"
            assert any(d.label.startswith(name) for d in decided) or any(x.startswith(name) for x in said), (name, cmp)
        assert len(cmp.only_a) == len(keys_a - keys_b) and len(cmp.only_b) == len(keys_b - keys_a)
        if not (cells_a and cells_b):
            return
        code = main(["compare", str(root / "a"), str(root / "b"), "--fail-on-regression"])
        assert code == (1 if cmp.uncompared or cmp.regressions else 0)


def test_goodput_zero_under_slos_names_the_slo_the_servers_reach(tmp_path):
    """Requests finished, none met tpot:5: goodput is never ranked, and the reason gives the TPOT the best point
    reached (the SLO that would count requests)."""
    for backend, base in (("marlin", 100.0), ("flashinfer_b12x", 40.0)):
        folder = write_cell(
            tmp_path, backend=backend, config={"goodput": ["tpot:5"]}, values={c: [base * c] * 3 for c in LEVELS}
        )
        _windows(folder, request_goodput=0.0)
    [rec] = report.build(judged_cells(tmp_path), rank_by="goodput").recommendations
    best = min(r["median_tpot_ms"] for c in judged_cells(tmp_path) for r in c["runs"])
    assert rec.winner is None and "no finished request met every SLO (tpot:5)" in rec.reason
    assert f"tpot:{math.ceil(best)} (best median {best:.0f} ms against 5 ms)" in rec.reason
