"""The reference no single host can forge: among cells whose outputs should agree, the one that agrees with the most
others, across at least two hosts when the group spans two (docs/correctness.md).

A cell's own task score is never the yardstick: a host can answer the shipped questions perfectly without running
a model, but it cannot reproduce the greedy continuations that cells on other hosts produced. So two cells agree
only when their outputs match overall *and* they share some of their open-ended outputs (continuations, long
decodes). Pure functions on an agreement matrix, so the choice is testable on synthetic matrices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Choice:
    index: int | None  # the reference among the candidates; None = no consensus
    how: str  # said in the report
    supporters: list[int] = field(default_factory=list)
    suspicious: list[int] = field(default_factory=list)  # agree with nobody while others agree


def agrees(overall: float, open_ended: float, min_agreement: float) -> bool:
    return overall >= min_agreement and open_ended > 0


def choose(
    hosts: Sequence[str],
    overall: Sequence[Sequence[float]],
    open_ended: Sequence[Sequence[float]],
    min_agreement: float,
) -> Choice:
    """The reference among candidates (in the caller's order of preference for ties: earliest first), given
    pairwise agreement: `overall` over all outputs, `open_ended` over those without one right answer.

    Ranked by: support spanning two hosts (when the candidates span two), then how many cells agree with it,
    then how many hosts they are on, then the summed agreement. A candidate nobody agrees with is never chosen
    when there is more than one; it is suspicious when some other pair does agree."""
    n = len(hosts)
    if n == 0:
        return Choice(None, "none: no cell with sane outputs")
    if n == 1:
        return Choice(0, "the only cell with sane outputs")
    support = [
        [j for j in range(n) if j != i and agrees(overall[i][j], open_ended[i][j], min_agreement)] for i in range(n)
    ]
    spans = [len({hosts[i], *(hosts[j] for j in support[i])}) for i in range(n)]
    need = min(2, len(set(hosts)))

    def rank(i: int) -> tuple[bool, int, int, float, int]:
        return (spans[i] >= need, len(support[i]), spans[i], sum(overall[i][j] for j in range(n) if j != i), -i)

    best = max(range(n), key=rank)
    if not support[best]:
        return Choice(None, f"none: {n} cells, none agrees with another")
    loners = [i for i in range(n) if not support[i]]
    where = f"across {spans[best]} hosts" if spans[best] >= 2 else "on one host (no other host agrees)"
    return Choice(best, f"consensus of {len(support[best]) + 1} of {n} cells {where}", support[best], loners)
