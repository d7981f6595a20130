"""The report's "Single stream vs the bandwidth ceiling (c=1)", from agent.judging.bandwidth."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.errors import UserError
from agent.escape import md
from agent.judging import bandwidth
from agent.judging.stats import CellSummary, Point
from agent.reporting.words import num


def ceiling_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """Single-stream decode (c=1) as % of the bandwidth ceiling, for cells that carry
    checkpoint_info.bytes_per_token; and whether bytes explain the differences between checkpoints
    on the same backend (agent.judging.bandwidth)."""
    groups: dict[tuple[str, str], list[CellSummary]] = {}
    for s in summaries:
        if s.rankable and _c1(s) and s.cell.get("checkpoint_info", {}).get("bytes_per_token"):
            groups.setdefault((_arch(s.cell), s.backend), []).append(s)
    lines: list[str] = []
    for (arch, backend), cells in sorted(groups.items()):
        try:
            gbs, source = bandwidth.bandwidth_for(arch)
        except UserError as exc:
            lines += [f"- {md(arch)} · {md(backend)}: no ceiling ({md(exc.message)})", ""]
            continue
        notes = bandwidth.ceiling_notes([_ceiling_point(s) for s in cells], gbs, source)
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


def _c1(s: CellSummary) -> Point | None:
    p = s.points.get(1)
    return p if p is not None and p.throughput is not None else None


def _arch(cell: dict[str, Any]) -> str:
    facts = cell.get("facts", {})
    return facts.get("arch") or facts.get("gpu_name") or "unknown"


def _ceiling_point(s: CellSummary) -> bandwidth.Point:
    p = _c1(s)
    assert p is not None and p.throughput is not None  # ceiling_lines only passes cells with a c=1 throughput
    medians = {"median_tpot_ms": p.tpot.median if p.tpot else 0.0, "output_throughput": p.throughput.median}
    return bandwidth.Point(
        label=s.checkpoint,
        bytes_per_token=int(s.cell["checkpoint_info"]["bytes_per_token"]),
        tok_s=bandwidth.single_stream_tok_s(medians),
        speculative=bool(s.config.get("speculative")),
    )
