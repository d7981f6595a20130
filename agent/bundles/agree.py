"""Do two owners' bundles agree? compare's rule (judging/comparison.compare), with each side's hosts taken as one
host of their fingerprint group: two owners' Sparks of one fingerprint compare as two hosts of one group measured
the same configuration, and no host effect links machines that never ran side by side. They agree when every
configuration was compared and none changed beyond the noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.bundles import verify
from agent.judging.comparison import IMPROVEMENT, REGRESSION, compare


def _as_group(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**c, "host": "fingerprint " + str(c.get("facts", {}).get("fingerprint", ""))} for c in cells]


def disagreement(cells_a: Sequence[dict[str, Any]], cells_b: Sequence[dict[str, Any]]) -> list[str]:
    """Why B does not reproduce A ([] when it does)."""
    cmp = compare(_as_group(cells_a), _as_group(cells_b))
    out = [f"{c.label}: {c.status}" for c in cmp.configs if c.status in (REGRESSION, IMPROVEMENT)]
    out += cmp.uncompared
    if not cmp.configs:
        out.append("no configuration was measured by both")
    return out


def why_not(v: verify.Verification, other: verify.Verification) -> str:
    """Why `other` does not raise `v` to reproduced ("" when it does, and then it has)."""
    if not other.ok:
        return f"is only {other.tier} ({other.findings[0].line()})"
    if v.signer and other.signer and v.signer.fingerprint == other.signer.fingerprint:
        return "is signed by the same key: a reproduction needs another signer"
    if other.identity != v.identity:
        return "is not the same spec, image and hardware"
    said = disagreement(v.cells, other.cells)
    if said:
        return "; ".join(said[:3])
    v.tier = verify.REPRODUCED
    v.reproduced_by.append(other.signer_name)
    return ""
