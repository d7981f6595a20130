"""Replicas across hosts (judging/replicas.py, the report's section): the spread across hosts next to the spread
across repeats, and a flag only when the hosts disagree beyond the noise."""

from __future__ import annotations

import pytest

from agent.judging import replicas, summary
from agent.reporting import markdown

pytestmark = pytest.mark.unit


def cell(host: str, values: list[float], cell_id: str = "0123456789ab", fp: str = "aaaaaaaa") -> dict:
    runs = [{"concurrency": 8, "repeat": i + 1, "ok": True, "output_throughput": v} for i, v in enumerate(values)]
    return {
        "cell_id": cell_id,
        "host": host,
        "verdict": "valid",
        "status": "done",
        "facts": {"fingerprint": fp},
        "config": {"checkpoint": "c", "moe_backend": "marlin", "quant": "nvfp4"},
        "runs": runs,
    }


def points(*cells: dict) -> list[replicas.ReplicaPoint]:
    return replicas.replica_points(summary.summarize_cells(cells))


def test_hosts_within_the_noise_are_not_flagged():
    (p,) = points(cell("a", [100.0, 104.0, 102.0]), cell("b", [101.0, 103.0, 105.0]))
    assert p.hosts == ("a", "b") and p.medians == (102.0, 103.0)
    assert p.across_hosts == pytest.approx(1 / 102.5) and p.across_repeats == pytest.approx(4 / 102)
    assert not p.disagree


def test_hosts_apart_beyond_the_noise_are_flagged_and_shown():
    cells = [cell("a", [100.0, 101.0, 102.0]), cell("b", [130.0, 131.0, 129.0])]
    (p,) = points(*cells)
    assert p.disagree and p.across_hosts > 0.25
    section = markdown.replica_section(summary.summarize_cells(cells), summary.DEFAULT_THRESHOLD)
    assert section[0] == "## Replicas across hosts" and "**hosts disagree**" in section[-2]


def test_single_hosts_other_fingerprints_and_invalid_cells_are_not_replicas():
    assert points(cell("a", [100.0])) == []
    assert points(cell("a", [100.0]), cell("b", [150.0], fp="bbbbbbbb")) == []
    bad = cell("b", [150.0])
    bad["verdict"] = "invalid"
    assert points(cell("a", [100.0]), bad) == []
    assert markdown.replica_section([], 0.1) == []
