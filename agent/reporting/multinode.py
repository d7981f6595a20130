"""The report's multi-node section: each multi-node cell's nodes, what each did before Ray started (page cache
dropped or not, the image digest its Ray container ran), and the cluster its log attests. Absent without one."""

from __future__ import annotations

from collections.abc import Sequence

from agent.escape import md
from agent.judging.summary import CellSummary


def node_lines(summaries: Sequence[CellSummary]) -> list[str]:
    cells = [s.cell for s in summaries if s.cell.get("nodes")]
    if not cells:
        return []
    out = ["## Multi-node cells", "", "| cell | node | role | page cache | image | cluster (from the log) |"]
    out.append("|---|---|---|---|---|---|")
    for cell in cells:
        cluster = (cell.get("attestation") or {}).get("cluster") or {}
        links = ", ".join(f"{link.get('node', '?')}: {link.get('transport', '?')}" for link in cluster.get("links", []))
        attested = f"world {cluster.get('world_size', '?')}, {cluster.get('ray_nodes', '?')} Ray nodes" + (
            f"; {links}" if links else ""
        )
        for i, node in enumerate(cell["nodes"]):
            out.append(
                f"| {md(cell.get('cell_id', '?')) if i == 0 else ''} | {md(node.get('host', '?'))} | "
                f"{md(node.get('role', '?'))} | {md(node.get('page_cache', '?'))} | "
                f"{md(node.get('image') or 'process runtime')} | {md(attested) if i == 0 else ''} |"
            )
    return [*out, ""]
