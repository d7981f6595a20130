"""A guard the tests use: what `report`, `compare`, `history`, `status`, `watch` and `site` print and write, read back
and derived again from the results tree or the store. Nothing printed may disagree with the data: no "inf" or "nan",
no B/A that is not the ratio of the medians shown, no count that differs from the tree, no "Changed." headline where
no answer changed, no WRONG OUTPUT blamed on another host's twin. Each function returns the problems it found
(plain sentences, [] = none), so a test asserts `not problems` and shows them all. Holds no tests itself.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.judging import correctness, judgement
from agent.results import tree

# a number that is not one, as printed ("inf×", "nan", "∞"); words such as "information" never match
NOT_A_NUMBER = re.compile(r"(?<![A-Za-z_])(?:[-+]?inf|nan|∞)(?![A-Za-z_])", re.IGNORECASE)


def numbers(text: str, where: str) -> list[str]:
    """Every "inf", "nan" or "∞" in printed text."""
    return [f"{where}: {m.group(0)!r} printed: …{text[max(0, m.start() - 60) : m.end() + 20]}…"
            for m in NOT_A_NUMBER.finditer(text)]  # fmt: skip


def tree_counts(root: Path) -> dict[str, int]:
    """Cells, windows and sweep runs in a results tree (a run: a sweep folder's run a cell was measured in)."""
    cells = windows = 0
    runs: set[tuple[str, str]] = set()
    for folder in tree.iter_cell_dirs(root):
        cell = tree.read_toml(folder / tree.CELL_FILE)
        cells += 1
        windows += len(tree.window_files(folder))
        sweep_folder = folder.resolve().parent.parent
        runs.add((str(sweep_folder), str(cell.get("run_started") or tree.run_start(sweep_folder))))
    return {"cells": cells, "windows": windows, "runs": len(runs)}


def store_counts(sqlite_path: Path, root: Path) -> dict[str, int]:
    """The same counts, as the store holds the rows that came from `root`."""
    prefix = str(Path(root).resolve())
    with sqlite3.connect(sqlite_path) as db:
        rows = db.execute(
            "SELECT c.id, c.sweep_id FROM cells c JOIN sweeps s ON s.id = c.sweep_id "
            "WHERE s.results_root = ? OR s.results_root LIKE ?",
            (prefix, prefix + "/%"),
        ).fetchall()
        ids = [r[0] for r in rows]
        windows = 0
        if ids:
            marks = ",".join("?" * len(ids))
            windows = db.execute(f"SELECT count(*) FROM measurements WHERE cell_pk IN ({marks})", ids).fetchone()[0]
    return {"cells": len(ids), "windows": int(windows), "runs": len({r[1] for r in rows})}


def store_matches_tree(sqlite_path: Path, root: Path) -> list[str]:
    """The store holds each cell and window of the tree once, in as many sweep runs as the tree has."""
    on_disk, stored = tree_counts(root), store_counts(sqlite_path, root)
    return [
        f"store: {k} {stored[k]} but the tree at {root} has {on_disk[k]}" for k in on_disk if on_disk[k] != stored[k]
    ]


def site_matches_store(html: str, sqlite_path: Path) -> list[str]:
    """The site's "Sweeps (N)" is the store's count of sweep runs."""
    with sqlite3.connect(sqlite_path) as db:
        runs = db.execute("SELECT count(*) FROM sweeps WHERE id IN (SELECT sweep_id FROM cells)").fetchone()[0]
    found = re.search(r"Sweeps \((\d+)\)", html)
    if found and int(found[1]) != runs:
        return [f"site: Sweeps ({found[1]}) but the store holds {runs} sweep run(s)"]
    return numbers(html, "site")


_ROW = re.compile(r"^\| (?P<label>[^|]+) \| (?P<c>\d+) \| (?P<a>[\d,.]+|–) \| [^|]* \| (?P<b>[\d,.]+|–) \| [^|]* "
                  r"\| (?P<ratio>[^|]+) \|")  # fmt: skip


def compare_ratios(markdown: str) -> list[str]:
    """Every B/A in compare's table is the ratio of the two medians beside it (to the digits shown)."""
    out = numbers(markdown, "compare")
    for line in markdown.splitlines():
        m = _ROW.match(line)
        if not m or "–" in (m["a"], m["b"]) or m["ratio"].strip() == "–":
            if m and m["ratio"].strip() == "–" and "–" not in (m["a"], m["b"]) and float(m["a"].replace(",", "")):
                out.append(f"compare: {m['label'].strip()} c={m['c']}: no B/A shown for two medians")
            continue
        a, b = float(m["a"].replace(",", "")), float(m["b"].replace(",", ""))
        shown = float(m["ratio"].split()[0])
        digits = len(m["a"].split(".")[-1]) if "." in m["a"] else 0
        slack = 0.5 * 10**-digits * (1 / a + b / a**2) + 0.0006 if a else 0.0
        if a and abs(shown - b / a) > slack:
            out.append(f"compare: {m['label'].strip()} c={m['c']}: B/A {shown} but {b} / {a} = {b / a:.3f}")
    return out


def report_matches_tree(sweep_dir: Path) -> list[str]:
    """report.md and verdicts.json say what judging the tree again says: the same answer per (hardware, quant), the
    same "Run" lines, goodput worded as what it was (under SLOs or none), and no number that is not one."""
    cells = correctness.judged_cells(sweep_dir)
    text = (sweep_dir / "report.md").read_text()
    out = numbers(text, "report.md")
    verdicts = sweep_dir / "verdicts.json"
    if verdicts.is_file():
        out += numbers(verdicts.read_text(), "verdicts.json")
        json.loads(verdicts.read_text())
    rank_by = "goodput" if "(`--rank-by goodput`" in text else "throughput"
    j = judgement.judge(cells, rank_by=rank_by, equivalence=_margin(sweep_dir))
    for rec in j.recommendations:
        verdict, _ = judgement.headline(rec)
        said = f"**{verdict[:1].upper() + verdict[1:]}.**"
        if said.replace("*", "") not in text.replace("*", "").replace("\\", ""):
            out.append(f"report.md: {rec.hardware} · {rec.quant}: the tree says {verdict!r}; not in the report")
    runs = set(re.findall(r"\*\*Run ([^*]+?)\.\*\*", text))
    derived = {r.winner for r in j.recommendations if r.winner}
    out += [f"report.md: 'Run {x}' but judging the tree names no such winner" for x in runs - {*map(_md, derived)}]
    slos = any(c.get("config", {}).get("goodput") for c in cells)
    if not slos and "met every SLO (`request_goodput`)" in text:
        out.append("report.md: goodput ranked as 'requests/s that met every SLO', but no cell set SLOs")
    if slos and "Not measured" in text:
        out += [
            f"report.md: {line.strip()[:160]}: a point that finished requests under SLOs measured 0, not nothing"
            for line in text.splitlines()
            if line.lstrip("- ").startswith("Not measured") and "met every SLO" in line
        ]
    return out


def correctness_blame(cells: Sequence[dict[str, Any]]) -> list[str]:
    """A WRONG OUTPUT blamed on a path ("only with CUDA graphs: its eager twin X") names a twin on its own host."""
    out = []
    by_host = {(str(c.get("host")), str(c.get("cell_id"))) for c in cells}
    for c in cells:
        for reason in (c.get("correctness") or {}).get("wrong", []):
            m = re.search(r"(?:eager|spec-off) twin ([0-9a-f]{12})", reason)
            if m and (str(c.get("host")), m[1]) not in by_host:
                out.append(f"{c.get('host')}/{c.get('cell_id')}: blamed on a twin {m[1]} of another host")
    return out


def watch_headline(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], markdown: str) -> list[str]:
    """What-changed says "Changed." exactly when some (hardware, quant)'s answer changed."""
    if not before:
        return numbers(markdown, "what changed")
    changed = _answers(judgement.judge(before)) != _answers(judgement.judge(after))
    if ("**Changed.**" in markdown) != changed:
        return [f"what changed: headline {'Changed' if not changed else 'unchanged'} but the answers "
                f"{'did not change' if not changed else 'changed'}"]  # fmt: skip
    return numbers(markdown, "what changed")


def status_labels(stdout: str) -> list[str]:
    """`status` names a running cell by its label, then its id, as the progress bar does: never a bare id."""
    return [
        f"status: 'now {m[1]}': a bare cell id, not its label" for m in re.finditer(r"now ([0-9a-f]{12}) since", stdout)
    ]


def _answers(j: judgement.Judgement) -> dict[tuple[str, str], str]:
    return {(r.hardware, r.quant): judgement.headline(r)[0] for r in j.recommendations}


def _margin(sweep_dir: Path) -> float:
    from agent.judging import verdicts

    found = tree.equivalence_margins(sweep_dir)
    return found[0] if found else verdicts.DEFAULT_MARGIN


def _md(text: str) -> str:
    from agent.escape import md

    return md(text)
