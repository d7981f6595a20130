"""watch's "what changed" page (reporting/whatchanged.py) on results trees written per docs/results-tree.md: each
kind of change is said with its evidence, in both directions, and only a change is a headline. The same page end
to end on real images is tests/test_watch.py; this is its cheap half."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.judging.correctness import judged_cells
from agent.reporting import whatchanged
from tests.test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

OLD = "registry.lab/vllm:stable@sha256:" + "ab" * 32
NEW = "registry.lab/vllm:stable@sha256:" + "cd" * 32
C = [1, 4]
GONE = "VLLM_OLD_KNOB"  # dead before, recognised now
DEAD = "VLLM_USE_FLASHINFER_MOE_FP4"  # recognised before, dead now
ROOT_CAUSE = "RuntimeError: CUDA error: unspecified launch failure"


def tight(base: float) -> dict[int, list[float]]:
    return {c: [base * c * 0.99, base * c, base * c * 1.01] for c in C}


def said(cells: list[dict[str, Any]], version: str, unknown: list[str], cold_s: float) -> list[dict[str, Any]]:
    """What each server logged, as the attestation keeps it: the version, what loaded, the unknown variables; and
    how long it took to be ready (a cold compile cache: the first start of each cell)."""
    for cell in cells:
        cell["startup"] = {"compile_cache": "cold", "ready_s": cold_s}
        att = cell["attestation"]
        att["vllm_version"] = version
        att["unknown_env"] = unknown
        att["evidence"] = {
            "version": f"INFO [api_server] vLLM API server version {version}",
            "moe": f"INFO [fused_moe] Using {att['moe_backend'].upper()} MoE backend",
            **{f"unknown_env:{v}": f"WARNING [envs] Unknown vLLM environment variable detected: {v}" for v in unknown},
        }
    return cells


def trees(tmp_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    a, b = tmp_path / "a", tmp_path / "b"
    write_cell(a, backend="auto", loaded="marlin", values=tight(100.0), image=OLD)
    write_cell(a, backend="marlin", values=tight(100.0), image=OLD)
    write_cell(a, backend="flashinfer_b12x", values={c: ["engine died"] for c in C}, image=OLD, status="failed",
               verdict="failed", failure_class="engine_died", failure_evidence=["AssertionError: b12x tile"])  # fmt: skip
    # the new image: auto now loads FLASHINFER_B12X and dies on it; marlin 20% slower; b12x itself runs now, and wins
    write_cell(b, backend="auto", loaded="flashinfer_b12x", values={c: ["engine died"] for c in C}, image=NEW,
               status="failed", verdict="failed", failure_class="engine_died", failure_evidence=[ROOT_CAUSE])  # fmt: skip
    write_cell(b, backend="marlin", values=tight(80.0), image=NEW)
    write_cell(b, backend="flashinfer_b12x", values=tight(150.0), image=NEW)
    return said(judged_cells(a), "0.21.0", [GONE], 60.0), said(judged_cells(b), "0.24.0", [DEAD], 90.0)


def test_each_change_is_said_with_its_evidence_and_only_changes_are_headlines(tmp_path):
    before, after = trees(tmp_path)
    w = whatchanged.build(before, after, OLD, NEW)
    page = whatchanged.render_markdown(w, "What changed: watched")
    heads = "\n".join(i.text for i in w.headlines)

    assert "vLLM 0.21.0 → 0.24.0" in heads and "vLLM API server version 0.24.0" in page  # the log line, not the tag
    assert "auto: MoE MARLIN → **FLASHINFER_B12X**" in heads  # auto's choice moved: a headline
    assert "Using MARLIN MoE backend" in page and "Using FLASHINFER_B12X MoE backend" in page
    assert f"`{DEAD}` became dead" in heads and f"Unknown vLLM environment variable detected: {DEAD}" in page
    assert f"`{GONE}` is recognised now" in page and GONE not in heads  # good news is said, not headlined
    assert "auto: **started failing**: FAILED (engine_died) (ran before)" in heads and ROOT_CAUSE in page
    assert "flashinfer_b12x: stopped failing (it was FAILED (engine_died))" in page and "b12x tile" in page
    assert "marlin: 0.80" in page and "**slower**" in heads  # compare's rule, with its interval
    assert w.regressed == ["uns-fast / marlin"] and w.newly_failing == ["uns-fast/auto"]
    assert "cold start (median to ready): 60.0 s → 90.0 s" in page  # startup, from the log
    assert "auto: VALID → FAILED" in page and "marlin: VALID → VALID (unchanged)" in page  # correctness verdicts
    assert "**Changed.** Now: gb10 · nvfp4: run flashinfer_b12x" in heads  # what to run moved, with the command
    assert "vllm serve unsloth/Qwen3.6-35B-A3B-NVFP4-fast" in page.split("The command now:")[1]
    assert "stopped failing" not in heads and "recognised" not in heads


def test_the_same_image_twice_has_no_headline_and_a_first_image_is_a_baseline(tmp_path):
    before, _ = trees(tmp_path)
    same = whatchanged.build(before, before, OLD, OLD)
    assert same.headlines == [] and same.regressed == [] and same.newly_failing == []
    assert "- nothing changed beyond the noise" in whatchanged.render_markdown(same, "t")

    first = whatchanged.build([], before, "", OLD)
    page = whatchanged.render_markdown(first, "t")
    assert first.first and first.headlines == [] and "## Headlines" not in page
    assert "The log says vLLM 0.21.0." in page and "nothing to compare with yet" in page
