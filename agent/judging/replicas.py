"""Replicas: one cell measured on several hosts of a fingerprint group (`sweep --replicas K`).

For each such cell and concurrency: the spread across hosts (of the hosts' medians) next to the spread across
repeats (the widest of any one host), and a flag when the hosts disagree beyond the noise: two hosts' repeat ranges
do not overlap and the spread across hosts is larger than both the threshold and the repeats' own spread. Only
valid cells count; cells of different fingerprints are never compared (their ids differ, or their fingerprints do,
or their server logs gave different vLLM versions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from agent.judging.stats import ranges_overlap
from agent.judging.summary import DEFAULT_THRESHOLD, CellSummary, comparable, load_text, spread


@dataclass(frozen=True)
class ReplicaPoint:
    cell_id: str
    concurrency: int
    hosts: tuple[str, ...]
    medians: tuple[float, ...]  # one per host, in hosts' order
    across_hosts: float  # spread of the medians
    across_repeats: float  # the widest spread of one host's repeats
    disagree: bool
    load: str = ""  # the request rate and context depth, for a cell with load axes ("2 req/s, depth 128")


def replica_points(summaries: Sequence[CellSummary], threshold: float = DEFAULT_THRESHOLD) -> list[ReplicaPoint]:
    by_cell: dict[tuple[str, str, float, int], list[CellSummary]] = {}
    for s in summaries:
        if s.rankable:  # a cell with load axes: one replica question per rate and depth
            key = (str(s.cell.get("cell_id", "")), comparable(s.cell), s.load.rate, s.load.depth)
            by_cell.setdefault(key, []).append(s)
    out = []
    for (cell_id, _, _, _), group in sorted(by_cell.items()):
        if len(group) < 2:
            continue
        group.sort(key=lambda s: str(s.cell.get("host", "")))
        for conc in sorted(set.intersection(*(set(s.points) for s in group))):
            stats = [s.points[conc].throughput for s in group]
            if any(st is None for st in stats):
                continue
            real = [st for st in stats if st is not None]
            medians = tuple(st.median for st in real)
            across_hosts = spread(medians)
            across_repeats = max(st.spread for st in real)
            apart = any(not ranges_overlap(a.values, b.values) for a, b in combinations(real, 2))
            out.append(
                ReplicaPoint(
                    cell_id=cell_id,
                    concurrency=conc,
                    hosts=tuple(str(s.cell.get("host", "")) for s in group),
                    medians=medians,
                    across_hosts=across_hosts,
                    across_repeats=across_repeats,
                    disagree=apart and across_hosts > max(threshold, across_repeats),
                    load=load_text(group[0].load) if group[0].cell.get("load_slice") else "",
                )
            )
    return out
