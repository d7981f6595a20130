"""Host effects that outlive a sweep: `spark-agent calibrate` measures the reference cell on every host of the fleet.

On a real Spark a server start costs minutes, so a reference cell in every split sweep is expensive. A calibration
run measures, on every selected host, the spec's reference configuration (planning/blocks.reference_cell: a portable
backend at one concurrency level) into results/calibrate/. A later sweep with the same image uses those cells while
they are recent (MAX_AGE_DAYS): the planner leaves out the reference cells of the hosts they cover, and the report
adds them to the host-effect estimate (judging/hosteffect.estimate) and says how old they are. Calibrating again
replaces the earlier measurement (the cells are measured fresh).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.judging import correctness
from agent.planning import blocks
from agent.planning.matrix import Cell
from agent.planning.spec import CALIBRATION_SWEEP

SWEEP = CALIBRATION_SWEEP  # results/calibrate/<host>/<cell>/: a name no spec may give its sweep
MAX_AGE_DAYS = 7.0  # older host effects are not trusted: a driver, firmware or room changes in a week
EVERY_HOST = 0  # replicas: every host of its group measures the cell


def select_reference(cells: Mapping[str, list[Cell]]) -> dict[str, list[Cell]]:
    """run_sweep's `select`: on every host, only the reference configuration, as a cell of its own."""
    out: dict[str, list[Cell]] = {}
    for host, cs in cells.items():
        ref = blocks.reference_cell(cs, minimum=1)
        out[host] = [dataclasses.replace(ref, reference_of="")] if ref is not None else []
    return out


def age_days(cell: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Days since the cell finished; None when its record does not say."""
    try:
        finished = datetime.strptime(str(cell.get("finished_at", "")), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    now = now or datetime.now(UTC).replace(tzinfo=None)
    return (now - finished).total_seconds() / 86_400


def recent(results_root: Path, image: str = "", now: datetime | None = None) -> list[dict[str, Any]]:
    """The valid calibration cells under results_root of this image ("" = any), at most MAX_AGE_DAYS old."""
    folder = Path(results_root) / SWEEP
    if not folder.is_dir():
        return []
    out = []
    for cell in correctness.judged_cells(folder):
        age = age_days(cell, now)
        if cell.get("verdict") != "valid" or age is None or not 0 <= age <= MAX_AGE_DAYS:
            continue
        if image and cell.get("config", {}).get("image") != image:
            continue
        out.append(cell)
    return out


def calibrated_hosts(results_root: Path, image: str) -> dict[str, float]:
    """host -> age in days of its most recent calibration cell for this image."""
    out: dict[str, float] = {}
    for cell in recent(results_root, image):
        age = age_days(cell)
        host = str(cell.get("host", ""))
        if age is not None and (host not in out or age < out[host]):
            out[host] = age
    return out
