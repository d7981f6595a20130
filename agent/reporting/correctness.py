"""The report's correctness parts: speed and quality side by side per cell, the WRONG OUTPUT cells (never ranked)
with their reasons, and cells on dummy weights (ranked on speed only). The judgement itself is
agent/judging/correctness.py."""

from __future__ import annotations

from collections.abc import Sequence

from agent.escape import md, md_code
from agent.judging import correctness, summary
from agent.judging.summary import CellSummary


def _best(s: CellSummary) -> str:
    medians = [p.throughput.median for p in s.points.values() if p.throughput]
    return f"{max(medians):.1f}" if medians else "–"


def _name(s: CellSummary) -> str:
    return f"{md(s.checkpoint)} {md(s.backend_text)} on {md(s.cell.get('host', '?'))}"


QUALITY_NOT_JUDGED = "quality not judged: "


def wrong_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """One line per WRONG OUTPUT cell: what made its outputs wrong."""
    return [
        f"- **{_name(s)}** ({md(s.cell.get('cell_id', ''))}): {md('; '.join(correctness.wrong_reasons(s.cell)))}"
        for s in summaries
        if s.verdict == summary.WRONG_OUTPUT
    ]


def table_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """| cell | best median tok/s | task score | agreement | first divergence | degenerate | probe s | verdict |"""
    rows = []
    for s in summaries:
        c = s.cell.get("correctness") or {}
        if not c.get("probed"):
            continue
        ref = c.get("reference_cell", "")
        is_ref = ref == s.cell.get("cell_id") and c.get("reference_host", "") == s.cell.get("host", "")  # replicas
        agreement = "reference" if is_ref else (f"{c['agreement']:.0%}" if ref else "–")  # share the cell id
        judged = s.verdict.upper() if s.verdict != "valid" else "valid"
        if c.get("advisory"):
            judged += f" (advisory: {'; '.join(c['advisory'])})"
        if correctness.not_judged(s.cell):
            agreement, judged = "–", f"{judged}; {QUALITY_NOT_JUDGED}{correctness.not_judged(s.cell)}"
        first = c.get("first_divergence", -1)
        rows.append(
            f"| {_name(s)} | {_best(s)} | {c.get('exact', 0)}/{c.get('answered', 0)} ({c.get('score', 0.0):.0%}) "
            f"| {agreement} | {'–' if first < 0 else f'word {first}'} | {c.get('degenerate', 0)}/{c.get('prompts', 0)} "
            f"| {float(c.get('seconds', 0.0)):.1f} | {md(judged)} |"
        )
    if not rows:
        return ["No cell was probed (the probe is off, or every server died before it)."]
    head = [
        "| cell | best median tok/s | task score | agreement | first divergence | degenerate | probe s | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return head + rows


def _path(c: dict, name: str) -> str:
    """One path's long comparisons in a cell: the earliest divergence and what follows it."""
    found = [p for p in c.get("long_paths", []) if p["path"] == name]
    if not found:
        return "–"
    first = min(found, key=lambda p: (p["first_divergence"] < 0, p["first_divergence"]))
    if first["first_divergence"] < 0:
        return "identical"
    return f"token {first['first_divergence']}: {first['follows']}"


def long_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """The long-decode check per cell: where its long outputs went bad, and each path against the others."""
    rows = []
    for s in summaries:
        c = s.cell.get("correctness") or {}
        longs = c.get("long") or []
        if not c.get("probed") or not longs:
            continue
        bad = [r for r in longs if r.get("degenerate")]
        turned = min(bad, key=lambda r: r["degenerate_at"]) if bad else None
        own = f"{turned['degenerate']} from token {turned['degenerate_at']}" if turned else "clean"
        rows.append(
            f"| {_name(s)} ({md(s.cell.get('cell_id', ''))}) | {max(r['tokens'] for r in longs)} "
            f"| {longs[0].get('units', '')} | {float(c.get('long_seconds', 0.0)):.0f} | {md(own)} "
            f"| {md(_path(c, 'reference'))} | {md(_path(c, 'batch'))} | {md(_path(c, 'speculative'))} "
            f"| {md(_path(c, 'graphs'))} "
            f"| {md(c.get('broke_first') or '–')} |"
        )
    if not rows:
        return []
    refs = sorted(
        {
            (f"{c.get('reference_cell', '')} on {c.get('reference_host', '?')}", c.get("consensus", ""))
            for s in summaries
            if (c := s.cell.get("correctness") or {}).get("probed")
        }
    )
    out = [
        "### Long decode: where outputs go bad, path by path",
        "",
        "Long greedy generations (ignore_eos) after the probe, alone (c=1) and inside a batch at the cell's highest "
        "concurrency, compared token by token: with the reference cell, alone against batched, speculative "
        "decoding on against its spec-off twin, CUDA graphs against an `--enforce-eager` twin (an `extra_args` "
        "axis). Seconds: the check's time on the host, once per cell.",
        "",
    ]
    out += [f"- Reference {md(ref if not ref.startswith(' on') else 'none')}: {md(how)}" for ref, how in refs] + [""]
    out += [
        "| cell | tokens | compared as | s | own output | vs reference | batch vs alone | spec vs off | graphs vs eager "
        "| broke first |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    return out


def sections(summaries: Sequence[CellSummary]) -> list[str]:
    once = summary.distinct_cells(summaries)
    out = ["## Correctness: speed and quality side by side", ""]
    out += [
        "Greedy outputs of a fixed prompt set after each cell's windows (docs/correctness.md). Agreement: share of "
        "the reference cell's output words reproduced before the first difference, over the prompts.",
        "",
    ]
    out += table_lines(once) + [""]
    out += long_lines(once)
    wrong = wrong_lines(once)
    out += ["## WRONG OUTPUT cells (never ranked)", ""] + (wrong or ["None."]) + [""]
    return out


def what_to_run_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """Said under "What to run": fast or not, WRONG OUTPUT cells are never the answer; a ranking among cells on
    dummy weights is one of speed alone."""
    once = summary.distinct_cells(summaries)
    out = []
    dummy = [s for s in once if s.rankable and correctness.not_judged(s.cell)]
    if dummy:
        names = ", ".join(f"{md_code(s.backend_text)} on {md(s.checkpoint)}" for s in dummy)
        out += [
            f"**The ranking is speed-only** for {len(dummy)} cell(s) served on dummy weights (`--load-format "
            f"dummy`): their outputs are noise by construction, {QUALITY_NOT_JUDGED}dummy weights ({names}).",
            "",
        ]
    wrong = [s for s in once if s.verdict == summary.WRONG_OUTPUT]
    if wrong:
        names = ", ".join(
            dict.fromkeys(
                f"{md_code(s.backend_text)} on {md(s.checkpoint)} ({md(s.cell.get('host', '?'))})" for s in wrong
            )
        )
        out += [f"Never recommended, whatever their speed: WRONG OUTPUT {names} (see WRONG OUTPUT cells).", ""]
    return out
