"""agent.reporting.compare and `spark-agent compare`: B/A at every point under the ranking rule."""

import pytest

from agent.cli import main
from agent.judging.correctness import judged_cells
from agent.reporting.compare import IMPROVEMENT, REGRESSION, WITHIN_NOISE, compare, render_markdown
from tests.test_report_fixtures import GB10_FACTS, write_cell

pytestmark = pytest.mark.unit

C = [1, 4, 16]
NEW_IMAGE = "nvcr.io/nvidia/vllm@sha256:" + "cd" * 32


def tight(base):
    return {c: [base * c * 0.99, base * c, base * c * 1.01] for c in C}


def test_regression_beyond_noise_on_new_image(tmp_path):
    write_cell(tmp_path / "a", backend="marlin", values=tight(100.0))
    write_cell(tmp_path / "b", backend="marlin", values=tight(80.0), image=NEW_IMAGE)
    cmp = compare(judged_cells(tmp_path / "a"), judged_cells(tmp_path / "b"))
    assert [(d.label, d.concurrency, d.status) for d in cmp.diffs] == [("uns-fast / marlin", c, REGRESSION) for c in C]
    assert all(d.ratio == pytest.approx(0.8) for d in cmp.diffs)
    assert cmp.warnings == []  # same host fingerprint, same vLLM


def test_overlapping_ranges_are_within_noise_and_faster_is_improvement(tmp_path):
    write_cell(tmp_path / "a", backend="marlin", values={1: [100.0, 110.0, 104.0]})
    write_cell(tmp_path / "a", backend="flashinfer_b12x", values={1: [50.0, 51.0, 49.0]})
    write_cell(tmp_path / "b", backend="marlin", values={1: [98.0, 108.0, 112.0]}, image=NEW_IMAGE)
    write_cell(tmp_path / "b", backend="flashinfer_b12x", values={1: [70.0, 71.0, 69.0]}, image=NEW_IMAGE)
    cmp = compare(judged_cells(tmp_path / "a"), judged_cells(tmp_path / "b"))
    status = {d.label: d.status for d in cmp.diffs}
    assert status == {"uns-fast / marlin": WITHIN_NOISE, "uns-fast / flashinfer_b12x": IMPROVEMENT}
    assert cmp.regressions == []


def test_different_hosts_warn_about_fingerprints(tmp_path):
    other = dict(GB10_FACTS, fingerprint="ffff0000", driver="590.10")
    write_cell(tmp_path / "a", backend="marlin", values=tight(100.0), host="spark-1")
    write_cell(tmp_path / "b", backend="marlin", values=tight(100.0), host="spark-2", facts=other)
    cmp = compare(judged_cells(tmp_path / "a"), judged_cells(tmp_path / "b"))
    assert len(cmp.diffs) == 3  # matched across hosts: same configuration
    assert any("different host fingerprints" in w and "ffff0000" in w for w in cmp.warnings)
    assert "**Warning:** different host fingerprints" in render_markdown(cmp)


def test_invalid_never_compared_and_unmatched_listed(tmp_path):
    write_cell(tmp_path / "a", backend="marlin", values=tight(100.0))
    write_cell(tmp_path / "a", backend="triton", values=tight(100.0))
    write_cell(tmp_path / "b", backend="marlin", values=tight(300.0), verdict="invalid", image=NEW_IMAGE)
    write_cell(tmp_path / "b", backend="cutlass", values=tight(100.0), image=NEW_IMAGE)
    cmp = compare(judged_cells(tmp_path / "a"), judged_cells(tmp_path / "b"))
    assert cmp.diffs == []
    assert cmp.not_compared == ["uns-fast / marlin: A VALID, B INVALID"]
    assert cmp.only_a == ["uns-fast / triton"] and cmp.only_b == ["uns-fast / cutlass"]


def test_cli_fails_on_regression_when_asked(tmp_path, capsys):
    write_cell(tmp_path / "a", backend="marlin", values=tight(100.0))
    write_cell(tmp_path / "b", backend="marlin", values=tight(50.0), image=NEW_IMAGE)
    md = tmp_path / "cmp.md"
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--markdown", str(md)]) == 0
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on-regression"]) == 1
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--fail-on-regression"]) == 0
    assert "| uns-fast / marlin | 16 | 1,600.0 | 2.0% | 800.0 | 2.0% | 0.500 | slower |" in md.read_text()
    assert "| uns-fast / marlin | 0.500x " in md.read_text() and "| REGRESSION |" in md.read_text()
    assert "1 of 1 configuration(s) regressed beyond the noise" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2


def _reference(root, host, speed=1.0):
    """The fleet's reference cell on `host`: what links hosts of a group (their host effect)."""
    write_cell(root, backend="triton", checkpoint="ref", host=host, values=tight(50.0 * speed))


def test_a_rerun_on_other_hosts_is_matched_with_the_host_effect(tmp_path, capsys):
    """A: marlin on spark-1, b12x on spark-2; B (the rerun) placed them the other way round. Every configuration is
    compared across hosts with the host effect each run measured (its reference cell on both hosts)."""
    for side, placed in (("a", ("spark-1", "spark-2")), ("b", ("spark-2", "spark-1"))):
        write_cell(tmp_path / side, backend="marlin", host=placed[0], values=tight(100.0))
        write_cell(tmp_path / side, backend="flashinfer_b12x", host=placed[1], values=tight(40.0))
        for host in ("spark-1", "spark-2"):
            _reference(tmp_path / side, host)
    cmp = compare(judged_cells(tmp_path / "a"), judged_cells(tmp_path / "b"))
    assert cmp.uncompared == [] and cmp.only_a == cmp.only_b == []
    labels = {c.label for c in cmp.configs if c.change is not None}
    assert (
        "uns-fast / marlin / spark-1 → spark-2" in labels and "uns-fast / flashinfer_b12x / spark-2 → spark-1" in labels
    )
    assert cmp.regressions == []
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on-regression"]) == 0
    assert "0 of 4 configuration(s) regressed beyond the noise" in capsys.readouterr().out


def test_what_could_not_be_compared_is_said_and_fails_the_gate(tmp_path, capsys):
    """B ran marlin on another host and no reference links the two: not compared, said on the console, exit 1."""
    write_cell(tmp_path / "a", backend="marlin", host="spark-1", values=tight(100.0))
    write_cell(tmp_path / "a", backend="triton", host="spark-1", values=tight(50.0))
    write_cell(tmp_path / "b", backend="marlin", host="spark-3", values=tight(100.0), image=NEW_IMAGE)
    write_cell(tmp_path / "b", backend="triton", host="spark-1", values=tight(50.0), image=NEW_IMAGE)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0  # a report, not a gate
    out = capsys.readouterr().out
    assert "0 of 1 configuration(s) regressed beyond the noise" in out
    assert "1 configuration(s) could not be compared" in out
    assert "not compared: uns-fast / marlin / spark-1 → spark-3: A ran on spark-1, B on spark-3" in out
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on-regression"]) == 1
    assert "cannot be vouched for" in capsys.readouterr().out
