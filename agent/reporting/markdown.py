"""`spark-agent report`: report.md, report.html and the PNG plots of a results tree (or a store selection), written.

agent.judging.judgement judges the cells once; agent/reporting/document.py renders that judgement as report.md (its
sections: agent/reporting/sections/), htmlpage as report.html and charts as the plots; this module reads the tree,
writes the files and says what to run. It also names, for its callers, the pieces they have always found here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.hostside import atomic
from agent.judging import correctness, stats, summary, verdicts
from agent.judging.judgement import MEASURED_ON, Judgement, judge, lost_cells, question_rows
from agent.judging.judgement import lost_text as _lost_text
from agent.reporting import htmlpage, startup
from agent.reporting.charts import PLOTS, _lines, figure, render_plots
from agent.reporting.document import render_markdown
from agent.reporting.sections.medians import MEDIAN_COLUMNS, median_columns, median_rows
from agent.reporting.sections.replicas import replica_section
from agent.reporting.sections.whattorun import verdict_lines
from agent.reporting.terminal import terminal_table
from agent.reporting.words import gap_range_text, serve_command
from agent.results import tree

build = judge  # the judgement of these cells (agent.judging.judgement.judge), under the name callers know

__all__ = [  # what callers (and the tests) import from here; each is defined where its docstring says
    "MEASURED_ON",
    "MEDIAN_COLUMNS",
    "PLOTS",
    "_lines",
    "_lost_text",
    "build",
    "calibration_cells",
    "figure",
    "gap_range_text",
    "median_columns",
    "median_rows",
    "render_markdown",
    "render_plots",
    "replica_section",
    "serve_command",
    "terminal_table",
    "verdict_lines",
    "write_judgement",
    "write_report",
    "write_report_cells",
]


def write_report(
    results_dir: Path,
    out_dir: Path | None = None,
    *,
    threshold: float = summary.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    rank_by: str = "throughput",
    said: list[str] | None = None,
    equivalence: float | None = None,
) -> list[Path]:
    """Read the tree, write report.md, report.html, verdicts.json and the PNGs into out_dir (default: results_dir).
    `said`, if given, gets the "what to run" lines in plain text (what the command prints). `equivalence`: Δ (None:
    the spec's, from the tree's sweep.toml)."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(f"{results_dir}: no such results folder (pass the folder a sweep wrote, e.g. results/)")
    cells = correctness.judged_cells(results_dir)
    if not cells:
        raise UserError(f"{results_dir}: no finished cell (no cell.toml below it); run a sweep first")
    lost = lost_cells(results_dir)
    tune = startup.load_tune_records(results_dir)
    out = Path(out_dir or results_dir)
    calibrated = calibration_cells(results_dir, cells)
    if equivalence is None:  # the spec's [judge] equivalence, as its runs recorded it; the strictest of several
        equivalence = min(tree.equivalence_margins(results_dir), default=verdicts.DEFAULT_MARGIN)
    return write_report_cells(
        cells,
        out,
        threshold=threshold,
        seed=seed,
        lost=lost,
        tune=tune,
        rank_by=rank_by,
        said=said,
        calibration=calibrated,
        equivalence=equivalence,
    )


def calibration_cells(results_dir: Path, cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recent calibration cells next to a sweep's folder, of the images its cells ran (none for the calibration
    itself, or for a whole results tree, which holds them already)."""
    from agent.running import calibration

    if results_dir.name == calibration.SWEEP or (results_dir / calibration.SWEEP).is_dir():
        return []
    images = {c.get("config", {}).get("image") for c in cells}
    return [c for c in calibration.recent(results_dir.parent) if c.get("config", {}).get("image") in images]


def write_report_cells(
    cells: Sequence[dict[str, Any]],
    out: Path,
    *,
    threshold: float = summary.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    lost: Sequence[str] = (),
    tune: Sequence[dict[str, Any]] = (),
    rank_by: str = "throughput",
    calibration: Sequence[dict[str, Any]] = (),
    said: list[str] | None = None,
    equivalence: float = verdicts.DEFAULT_MARGIN,
) -> list[Path]:
    """report.md, report.html and the PNGs of these cells (a tree's, or a store selection's) into out. A store
    selection has no lost cells or tune records (they are files of the tree, not cells)."""
    from agent.running.calibration import age_days

    ages = [a for a in (age_days(c) for c in calibration) if a is not None]
    words = f"{len(calibration)} cell(s) of `spark-agent calibrate`, {max(ages):.1f} days old at most" if ages else ""
    data = judge(
        cells,
        threshold=threshold,
        seed=seed,
        rank_by=rank_by,
        calibration=calibration,
        lost=lost,
        tune=tune,
        calibration_words=words,
        equivalence=equivalence,
    )
    if said is not None:
        said += data.what_to_run
    return write_judgement(data, out)


def write_judgement(data: Judgement, out: Path) -> list[Path]:
    """report.md, report.html and the PNGs of one judgement into out (the site judges each run once and also
    counts its verdicts from the same judgement)."""
    images = render_plots(data)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, png in images.items():
        written.append(_write(out / name, png))
    written.append(_write(out / VERDICTS_FILE, verdicts_json(data).encode()))
    written.append(_write(out / "report.md", render_markdown(data, images).encode()))
    written.append(_write(out / "report.html", htmlpage.render(data, images).encode()))
    return written


VERDICTS_FILE = "verdicts.json"


def verdicts_json(data: Judgement) -> str:
    """Every question's verdict (faster / equivalent / undecided / nothing to compare) with its numbers, as JSON."""
    rows = [row for rec in data.recommendations for row in question_rows(rec)]
    return json.dumps({"schema": 1, "equivalence": data.equivalence, "questions": rows}, indent=1) + "\n"


def _write(path: Path, data: bytes) -> Path:
    atomic.write_bytes(path, data)
    return path
