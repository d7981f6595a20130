"""Nothing printed disagrees with the data (issue 47), over generated results trees (Hypothesis): several hosts,
failed cells, goodput with SLOs (a side that met none) and without, a re-measured cell in the same run (a tune
step), a what-changed page whose only difference is a footnote, a compare across hosts. What `report`, `compare`,
`store ingest` and the what-changed page print and write is read back by tests/answers_audit.py and
derived again from the tree or the store (`site`: tests/test_site.py; the store after a real tune:
tests/test_tune_fleet.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agent.cli import main
from agent.judging import judgement
from agent.judging.correctness import judged_cells
from agent.reporting import document, whatchanged
from agent.results import tree
from tests import answers_audit as audit
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

CHECKS = settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
BACKENDS = ["marlin", "flashinfer_b12x", "cutlass"]
LEVELS = (1, 8)


@st.composite
def fleets(draw):
    hosts = [f"spark-{i}" for i in range(1, draw(st.integers(1, 3)) + 1)]
    backends = draw(st.lists(st.sampled_from(BACKENDS), min_size=2, max_size=3, unique=True))
    speeds = [draw(st.floats(40.0, 400.0)) for _ in backends]
    goodput = draw(st.sampled_from(["none", "slos", "slos-one-meets-none"]))
    failed = draw(st.booleans())
    spread = draw(st.floats(0.0, 0.2))
    return hosts, backends, speeds, goodput, failed, spread


def _rewrite(folder: Path, **keys: float) -> None:
    import tomllib

    for path in tree.window_files(folder):
        path.write_text(tomli_w.dumps(tomllib.loads(path.read_text()) | keys))


def _tree(root: Path, fleet, *, scale: float = 1.0, shift_hosts: bool = False) -> None:
    hosts, backends, speeds, goodput, failed, spread = fleet
    placed = [(i, hosts[(i + shift_hosts) % len(hosts)]) for i in range(len(backends))]
    placed += [(0, h) for h in hosts if h != placed[0][1]]  # the first backend on every host: the host effect
    for i, host in placed:
        backend, speed = backends[i], speeds[i]
        config = {"goodput": ["tpot:50"]} if goodput != "none" else {}
        v = speed * scale * (1 - 0.1 * hosts.index(host))  # each host 10% slower than the one before
        values = {c: [v * c * (1 - spread), v * c, v * c * (1 + spread)] for c in LEVELS}
        folder = write_cell(root, backend=backend, host=host, config=config, values=values)
        meets = 0.0 if goodput == "slos-one-meets-none" and i == 1 else v / 256
        _rewrite(folder, request_goodput=meets)
    if failed:
        write_cell(root, backend="auto", host=hosts[0], values={1: ["boom"]}, status="failed", verdict="failed",
                   failure_class="ended_before_ready")  # fmt: skip


def _run(*argv: str) -> int:
    return main(list(argv))


@CHECKS
@given(fleet=fleets(), rank_by=st.sampled_from(["throughput", "goodput"]))
def test_what_every_command_prints_agrees_with_the_tree_and_the_store(fleet, rank_by, capsys, monkeypatch):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        a, b = root / "a", root / "b"
        _tree(a, fleet)
        _tree(b, fleet, scale=0.9, shift_hosts=True)
        sweep = a / "test"
        problems: list[str] = []

        # report: the Markdown and verdicts.json as the command writes them (plots left out: they say no number)
        j = judgement.judge(judged_cells(sweep), rank_by=rank_by)
        (sweep / "report.md").write_text(document.render_markdown(j, plots=()))
        problems += audit.report_matches_tree(sweep)
        problems += [x for line in j.what_to_run for x in audit.numbers(line, "console")]

        # the store: ingested, a cell measured again in the same run (a tune step), ingested again
        store = root / "store.sqlite"
        monkeypatch.setenv("SPARK_AGENT_STORE", f"sqlite:///{store}")
        assert _run("store", "ingest", str(a)) == 0
        again = next(tree.iter_cell_dirs(sweep))
        _rewrite(again, output_throughput=123.0)
        assert _run("store", "ingest", str(a)) == 0
        assert _run("store", "ingest", str(b)) == 0
        problems += audit.store_matches_tree(store, a) + audit.store_matches_tree(store, b)

        # compare across hosts: every B/A is the medians' ratio it shows
        md = root / "compare.md"
        _run("compare", str(sweep), str(b / "test"), "--markdown", str(md), "--rank-by", rank_by)
        problems += audit.compare_ratios(md.read_text())

        # what changed: the same answers, one footnote apart (a point whose TPOT went unmeasured), is no change
        before = judged_cells(sweep)
        after = judged_cells(sweep)
        for r in after[-1]["runs"]:
            r["median_tpot_ms"] = 0.0
        page = whatchanged.render_markdown(whatchanged.build(before, after, "img@sha256:" + "a" * 64,
                                                              "img@sha256:" + "b" * 64), "What changed")  # fmt: skip
        problems += audit.watch_headline(before, after, page)
        capsys.readouterr()
        assert not problems, "\n".join(problems)
