"""judgement.json: what agent.judging makes of a tree, as plain data: every point's medians and spreads, each
point's and each group's noise, every verdict, what to run, the bandwidth ceilings.

`share` writes it from the tree it packs; `verify` makes it again from the bundle's own windows and compares the
two. Both call `of_tree`, so both run the project's judging code (judging/judgement.judge): nothing here decides.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from agent import __version__
from agent.judging import correctness, summary, verdicts
from agent.judging.judgement import Judgement, judge, question_rows
from agent.results import tree

SCHEMA = 1
REL_TOL = 1e-9  # float noise of one judgement made twice; anything larger is another number


def of_tree(folder: Path) -> dict[str, Any]:
    """The judgement of a sweep folder as report judges it by default (the spec's [judge] equivalence)."""
    cells = correctness.judged_cells(folder, on_bad=_refuse)
    margin = min(tree.equivalence_margins(folder), default=verdicts.DEFAULT_MARGIN)
    return of_judgement(judge(cells, equivalence=margin))


def _refuse(path: Path, why: str) -> None:
    raise ValueError(f"{path.name}: {why}")


def of_judgement(j: Judgement) -> dict[str, Any]:
    points = []
    for s in j.summaries:
        for level, p in sorted(s.points.items()):
            points.append(
                {
                    "cell_id": s.cell.get("cell_id", ""),
                    "host": s.cell.get("host", ""),
                    "load": summary.load_text(s.load),
                    "concurrency": level,
                    "verdict": s.verdict,
                    "throughput": _stat(p.throughput),
                    "ttft_ms": _stat(p.ttft),
                    "tpot_ms": _stat(p.tpot),
                    "unstable": p.unstable,
                    "noise": dataclasses.asdict(p.noise),
                }
            )
    return {
        "schema": SCHEMA,
        "agent_version": __version__,
        "settings": {"threshold": j.threshold, "seed": j.seed, "rank_by": j.rank_by, "equivalence": j.equivalence},
        "points": points,
        "noise_floors": [
            {"hardware": r.hardware, "quant": r.quant, "noise": dataclasses.asdict(r.noise) if r.noise else None}
            for r in j.recommendations
        ],
        "verdicts": [row for r in j.recommendations for row in question_rows(r)],
        "what_to_run": list(j.what_to_run),
        "ceilings": [
            {"arch": c.arch, "backend": c.backend, "rows": list(c.notes["rows"]) if c.notes else []} for c in j.ceilings
        ],
    }


def _stat(st: summary.Stat | None) -> dict[str, Any] | None:
    return None if st is None else {"median": st.median, "lo": st.lo, "hi": st.hi, "spread": st.spread}


def dumps(claims: dict[str, Any]) -> bytes:
    return (json.dumps(claims, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def differences(claimed: Any, derived: Any, where: str = "") -> list[str]:
    """Where two judgements differ ("points[3].throughput.median: 176.06 claimed, 180.2 from the windows"); floats
    equal within REL_TOL."""
    if isinstance(claimed, dict) and isinstance(derived, dict):
        out = []
        for key in sorted(set(claimed) | set(derived)):
            if key == "agent_version":
                continue
            out += differences(claimed.get(key), derived.get(key), f"{where}.{key}" if where else str(key))
        return out
    if isinstance(claimed, list) and isinstance(derived, list):
        if len(claimed) != len(derived):
            return [f"{where}: {len(claimed)} entries claimed, {len(derived)} from the windows"]
        return [
            d for i, (a, b) in enumerate(zip(claimed, derived, strict=True)) for d in differences(a, b, f"{where}[{i}]")
        ]
    if _number(claimed) and _number(derived):
        if math.isclose(float(claimed), float(derived), rel_tol=REL_TOL, abs_tol=1e-12):
            return []
    elif claimed == derived:
        return []
    return [f"{where}: {_short(claimed)} claimed, {_short(derived)} from the windows"]


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(x: Any) -> str:
    return json.dumps(x, default=str)[:60]
