"""Two runs compared, the same sweep on two image digests or two hosts, point by point: the decision `spark-agent
compare` and `watch` render (agent/reporting/compare.py).

Cells are matched on their configuration without the image, whatever host measured them: on one host where both
runs measured it there, else across hosts of one group with the host effect divided out, as the ranking does. What
could not be compared (one side only, INVALID or failed, no host effect) is always said, and fails
--fail-on-regression: a gate cannot pass on what it did not compare. At every concurrency B/A is computed and judged
with the ranking rule of agent.judging.stats (slower or faster outside the noise, or "within noise"). Whether a
configuration regressed is decided once per configuration over all its points (judging/regression.py: the repeats'
noise, the host effect when A and B ran on different hosts, a stated false-alarm rate per compare).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.judging import hosteffect, regression, stats, summary
from agent.judging.stats import Ranking
from agent.judging.summary import CellSummary, Point

REGRESSION, IMPROVEMENT, WITHIN_NOISE = "regression", "improvement", "within noise"
# Fields that may differ between the two sides of a comparison: what is being compared.
VARYING = ("image",)


@dataclass(frozen=True)
class PointDiff:
    label: str  # checkpoint / backend (/ host)
    concurrency: int
    a: Point
    b: Point
    ranking: Ranking  # b against a: outcome "a" means B is faster

    @property
    def ratio(self) -> float:
        """B/A as judged: the medians' ratio on one host; across hosts, with the host effect divided out."""
        return self.ranking.ratio

    @property
    def medians_ratio(self) -> float:
        """B/A of the two medians shown (before any host effect); nan where a side has none."""
        a, b = self.a.ranked, self.b.ranked
        return b.median / a.median if a and b and a.median else math.nan

    @property
    def status(self) -> str:
        return {"a": IMPROVEMENT, "b": REGRESSION}.get(self.ranking.outcome, WITHIN_NOISE)


@dataclass(frozen=True)
class ConfigDiff:
    """One configuration over all the points both sides measured."""

    label: str
    change: regression.Change | None  # None: not decided (why says why)
    why: str = ""

    @property
    def status(self) -> str:
        if self.change is None:
            return WITHIN_NOISE
        return REGRESSION if self.change.slower else IMPROVEMENT if self.change.faster else WITHIN_NOISE


@dataclass
class Comparison:
    diffs: list[PointDiff]
    only_a: list[str]
    only_b: list[str]
    not_compared: list[str]  # matched, but INVALID or failed on a side: never compared
    warnings: list[str] = field(default_factory=list)
    rank_by: str = "throughput"  # a key of stats.RANK_BY: the metric B/A is judged on
    configs: list[ConfigDiff] = field(default_factory=list)
    same_failure: list[str] = field(default_factory=list)  # INVALID, failed or WRONG OUTPUT alike on both sides
    slos: list[str] = field(default_factory=list)  # every SLO goodput was counted under, either side; [] = none

    @property
    def regressions(self) -> list[ConfigDiff]:
        """The configurations that regressed: what --fail-on-regression fails on."""
        return [c for c in self.configs if c.status == REGRESSION]

    @property
    def uncompared(self) -> list[str]:
        """Every configuration not compared, with why: on one side only, INVALID or failed on a side, or undecided
        (no host effect across hosts, too few repeats). What --fail-on-regression cannot vouch for; a configuration
        INVALID or failed alike on both sides is unchanged, and listed apart (same_failure)."""
        return (
            [f"{x}: only in A" for x in self.only_a]
            + [f"{x}: only in B" for x in self.only_b]
            + self.not_compared
            + [f"{c.label}: {c.why}" for c in self.configs if c.change is None]
        )

    @property
    def slower_points(self) -> list[PointDiff]:
        return [d for d in self.diffs if d.status == REGRESSION]


def match_key(cell: dict[str, Any], with_host: bool, with_image: bool = False) -> str:
    dropped = stats.SCHEDULE_FIELDS + (() if with_image else VARYING)
    config = {k: v for k, v in cell.get("config", {}).items() if k not in dropped}
    if with_host:
        config["__host"] = cell.get("host", "")
    return json.dumps(config, sort_keys=True, default=str)


def _groups(summaries: Sequence[CellSummary], with_image: bool) -> dict[str, list[CellSummary]]:
    """match key -> the side's cells of that configuration (one per host that measured it), hosts sorted."""
    out: dict[str, list[CellSummary]] = {}
    for s in sorted(summaries, key=_host):
        out.setdefault(match_key(s.cell, False, with_image), []).append(s)
    return out


def _needs_image(*sides: Sequence[CellSummary]) -> bool:
    """A tree whose [matrix] had an image axis: the image is then part of what a cell is, and stays in the key."""
    return any(len({s.config.get("image") for s in side}) > 1 for side in sides)


def _host(s: CellSummary) -> str:
    return str(s.cell.get("host", ""))


def pairs(xs: Sequence[CellSummary], ys: Sequence[CellSummary]) -> list[tuple[CellSummary, CellSummary]]:
    """One configuration's cells on each side, paired: on the same host wherever both measured it there; else
    across hosts (the host effect divided out), each cell once. A replica left over on one side is not a
    configuration of its own: the configuration was compared."""
    same = sorted({_host(x) for x in xs} & {_host(y) for y in ys})
    out = [(next(x for x in xs if _host(x) == h), next(y for y in ys if _host(y) == h)) for h in same]
    if not out:
        out = list(zip(xs, ys, strict=False))
    return out


def _label(s: CellSummary, host: str = "") -> str:
    load = summary.load_text(s.load) if s.cell.get("load_slice") else ""  # one rate/depth of a cell's load axes
    return f"{s.checkpoint} / {s.backend_text}" + (f" / {load}" if load else "") + (f" / {host}" if host else "")


def compare(
    cells_a: Sequence[dict[str, Any]],
    cells_b: Sequence[dict[str, Any]],
    *,
    threshold: float = summary.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    rank_by: str = "throughput",
    calibration: Sequence[dict[str, Any]] = (),
) -> Comparison:
    """`calibration`: cells of a recent `spark-agent calibrate` near either run (host effects only, as the report).
    B against A at every point both measured, on the metric `rank_by` names (the report's ranking rule). A
    configuration is matched whatever host measured it (pairs); across hosts with the host effect either run
    measured, as the ranking does. Every configuration ends compared, or listed with why not."""
    metric = stats.RANK_BY[rank_by][0]
    side_a = stats.with_variants(summary.summarize_cells(cells_a, threshold, metric))
    side_b = stats.with_variants(summary.summarize_cells(cells_b, threshold, metric))
    with_image = _needs_image(side_a, side_b)
    groups_a, groups_b = _groups(side_a, with_image), _groups(side_b, with_image)
    effects = [_host_effects(side_a, side_b, summary.summarize_cells(calibration, threshold, metric))]
    result = Comparison([], [], [], [], warnings(side_a, side_b), rank_by=rank_by)
    result.slos = sorted({x for s in side_a + side_b for x in summary.slos(s)})
    matched: list[tuple[str, CellSummary, CellSummary]] = []
    for key in sorted(groups_a.keys() | groups_b.keys(), key=lambda k: _label((groups_a.get(k) or groups_b[k])[0])):
        xs, ys = groups_a.get(key, []), groups_b.get(key, [])
        if not xs or not ys:
            (result.only_b if not xs else result.only_a).append(_label((xs or ys)[0]))
            continue
        found = pairs(xs, ys)
        for a, b in found:
            where = _where(a, b) if len(found) > 1 or _host(a) != _host(b) else ""
            label = _label(a, where)
            if not (a.rankable and b.rankable):
                said = f"{label}: A {a.verdict.upper()}, B {b.verdict.upper()}"
                (result.same_failure if a.verdict == b.verdict else result.not_compared).append(said)
                continue
            for c in sorted(a.points.keys() & b.points.keys()):
                result.diffs.append(PointDiff(label, c, a.points[c], b.points[c], _rank(a, b, c, seed, effects)))
            matched.append((label, a, b))
    result.configs = [_config_diff(label, a, b, len(matched), effects) for label, a, b in matched]
    return result


def _host_effects(
    side_a: Sequence[CellSummary], side_b: Sequence[CellSummary], calibration: Sequence[CellSummary] = ()
) -> hosteffect.HostEffects:
    """Each host's speed from the cells both runs measured on several hosts, each run's cells its own (one run's
    cell is never the other's: that difference is what compare measures). Hosts linked in either run, or through a
    host both runs used, are compared across; hosts keep their speed between the runs, as a calibration assumes."""
    tagged = [
        dataclasses.replace(s, cell={**s.cell, "config": {**s.config, "compare_run": run}})
        for run, side in (("A", side_a), ("B", side_b), ("calibration", calibration))
        for s in side
        if s.rankable
    ]
    return hosteffect.estimate(tagged)


def _where(a: CellSummary, b: CellSummary) -> str:
    return _host(a) if _host(a) == _host(b) else f"{_host(a)} → {_host(b)}"


def _rank(a: CellSummary, b: CellSummary, c: int, seed: int, effects: Sequence[hosteffect.HostEffects]) -> Ranking:
    """B against A at one level: the ranking rule on one host; across hosts, the host effect either run measured
    divided out (stats.rank_hosts), or cannot rank with why."""
    if _host(a) == _host(b):
        return stats.rank_pair(b.points[c].values, a.points[c].values, seed=seed)
    known = next((e for e in effects if e.across(_host(b), _host(a))[0] is not None), effects[0])
    return stats.rank_hosts(b, a, c, known)


def _config_diff(
    label: str, a: CellSummary, b: CellSummary, configurations: int, effects: Sequence[hosteffect.HostEffects]
) -> ConfigDiff:
    """B against A over every level both measured; across hosts, with the host effect either run measured."""
    pairs = [(a.points[c].values, b.points[c].values) for c in sorted(a.points.keys() & b.points.keys())]
    host_a, host_b = _host(a), _host(b)
    effect = None
    if host_a != host_b:
        known = [e.across(host_b, host_a) for e in effects]
        effect = next((est for est, _ in known if est is not None), None)
        if effect is None:
            why = known[0][1] if known else "no host effect"
            return ConfigDiff(
                label, None, f"A ran on {host_a}, B on {host_b}, and neither run measured their effect ({why})"
            )
    found = regression.change(pairs, configurations, effect)
    return ConfigDiff(label, found, "" if found else "fewer than two successful repeats at every level")


def warnings(side_a: Sequence[CellSummary], side_b: Sequence[CellSummary]) -> list[str]:
    out = []
    fp_a, fp_b = _facts(side_a, "fingerprint"), _facts(side_b, "fingerprint")
    if fp_a != fp_b:
        out.append(
            f"different host fingerprints (A: {', '.join(fp_a) or '?'}; B: {', '.join(fp_b) or '?'}): "
            "a difference may come from the hardware, driver or CUDA, not from what you changed"
        )
    v_a, v_b = _attested(side_a), _attested(side_b)
    if v_a != v_b:
        out.append(f"different vLLM versions in the logs (A: {', '.join(v_a) or '?'}; B: {', '.join(v_b) or '?'})")
    return out


def _facts(side: Sequence[CellSummary], key: str) -> list[str]:
    return sorted({str(s.cell.get("facts", {}).get(key, "")) for s in side} - {""})


def _attested(side: Sequence[CellSummary]) -> list[str]:
    return sorted({str(s.cell.get("attestation", {}).get("vllm_version", "")) for s in side} - {""})
