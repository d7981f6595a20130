"""The report's "Single stream vs the bandwidth ceiling (c=1)": the judgement's ceilings (judging/bandwidth.py)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.escape import md
from agent.judging.judgement import Ceiling
from agent.reporting.words import num


def ceiling_lines(ceilings: Sequence[Ceiling]) -> list[str]:
    """Single-stream decode (c=1) as % of the bandwidth ceiling, per (chip, backend) the judgement found one for;
    and whether bytes explain the differences between checkpoints on the same backend."""
    lines: list[str] = []
    for c in ceilings:
        arch, backend, gbs, source, notes = c.arch, c.backend, c.gbs, c.source, c.notes
        if notes is None:
            lines += [f"- {md(arch)} · {md(backend)}: no ceiling ({md(c.why_none)})", ""]
            continue
        lines += [
            f"{md(arch)} · {md(backend)}: {gbs:g} GB/s ({md(source)})",
            "",
            "| checkpoint | bytes/token | ceiling tok/s | c=1 tok/s | % of ceiling | note |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {md(r['label'])} | {r['bytes_per_token']:,} | {num(r['ceiling_tok_s'])} | {num(r['tok_s'])} "
            f"| {num(r['pct_of_ceiling'])} | {md(r['note'])} |"
            for r in notes["rows"]
        ]
        lines += [""] + [f"- {md(p['note'])}" for p in notes["pairs"]] + [""]
    return lines
