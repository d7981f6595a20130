"""`spark-agent compare A B`: the same sweep on two image digests or two hosts, point by point.

Cells are matched on their configuration without the image (and with the host only when one tree holds the same
configuration on several hosts). At every concurrency B/A is computed and judged with the ranking rule of
agent.judging.stats (slower or faster outside the noise, or "within noise"). Whether a configuration regressed is
decided once per configuration over all its points (judging/regression.py: the repeats' noise, the host effect when
A and B ran on different hosts, a stated false-alarm rate per compare): that is what --fail-on-regression reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.judging import hosteffect, regression, stats
from agent.judging.stats import CANNOT_RANK, CellSummary, Point, Ranking
from agent.reporting.escape import md, rich
from agent.reporting.markdown import num, spread_text

REGRESSION, IMPROVEMENT, WITHIN_NOISE = "regression", "improvement", "within noise"
# One point alone is slower or faster beyond its own noise; whether a configuration regressed is its ConfigDiff's.
POINT_WORDS = {REGRESSION: "slower", IMPROVEMENT: "faster", WITHIN_NOISE: WITHIN_NOISE}
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
        return self.ranking.ratio

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

    @property
    def regressions(self) -> list[ConfigDiff]:
        """The configurations that regressed: what --fail-on-regression fails on."""
        return [c for c in self.configs if c.status == REGRESSION]

    @property
    def slower_points(self) -> list[PointDiff]:
        return [d for d in self.diffs if d.status == REGRESSION]


def match_key(cell: dict[str, Any], with_host: bool, with_image: bool = False) -> str:
    dropped = stats.SCHEDULE_FIELDS + (() if with_image else VARYING)
    config = {k: v for k, v in cell.get("config", {}).items() if k not in dropped}
    if with_host:
        config["__host"] = cell.get("host", "")
    return json.dumps(config, sort_keys=True, default=str)


def _index(summaries: Sequence[CellSummary], with_host: bool, with_image: bool = False) -> dict[str, CellSummary]:
    return {match_key(s.cell, with_host, with_image): s for s in summaries}


def _needs_image(*sides: Sequence[CellSummary]) -> bool:
    """A tree whose [matrix] had an image axis: the image is then part of what a cell is, and stays in the key."""
    return any(len({s.config.get("image") for s in side}) > 1 for side in sides)


def _needs_host(*sides: Sequence[CellSummary], with_image: bool = False) -> bool:
    """Host joins the key only when one side has the same configuration on several hosts."""
    return any(len(_index(side, False, with_image)) < len(side) for side in sides)


def _label(s: CellSummary, with_host: bool) -> str:
    load = stats.load_text(s.load) if s.cell.get("load_slice") else ""  # one rate/depth of a cell's load axes
    return (
        f"{s.checkpoint} / {s.backend_text}"
        + (f" / {load}" if load else "")
        + (f" / {s.cell.get('host', '')}" if with_host else "")
    )


def compare(
    cells_a: Sequence[dict[str, Any]],
    cells_b: Sequence[dict[str, Any]],
    *,
    threshold: float = stats.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    rank_by: str = "throughput",
) -> Comparison:
    """B against A at every point both measured, on the metric `rank_by` names (the report's ranking rule)."""
    metric = stats.RANK_BY[rank_by][0]
    side_a = stats.with_variants(stats.summarize_cells(cells_a, threshold, metric))
    side_b = stats.with_variants(stats.summarize_cells(cells_b, threshold, metric))
    with_image = _needs_image(side_a, side_b)
    with_host = _needs_host(side_a, side_b, with_image=with_image)
    index_a, index_b = _index(side_a, with_host, with_image), _index(side_b, with_host, with_image)
    result = Comparison([], [], [], [], warnings(side_a, side_b), rank_by=rank_by)
    matched: list[tuple[str, CellSummary, CellSummary]] = []
    for key in sorted(index_a.keys() | index_b.keys(), key=lambda k: _label((index_a.get(k) or index_b[k]), with_host)):
        a, b = index_a.get(key), index_b.get(key)
        either = a or b
        assert either is not None  # the key came from one of the two indexes
        label = _label(either, with_host)
        if a is None or b is None:
            (result.only_b if a is None else result.only_a).append(label)
        elif not (a.rankable and b.rankable):
            result.not_compared.append(f"{label}: A {a.verdict.upper()}, B {b.verdict.upper()}")
        else:
            for c in sorted(a.points.keys() & b.points.keys()):
                ranking = stats.rank_pair(b.points[c].values, a.points[c].values, seed=seed)
                result.diffs.append(PointDiff(label, c, a.points[c], b.points[c], ranking))
            matched.append((label, a, b))
    effects = [hosteffect.estimate([s for s in side if s.rankable]) for side in (side_a, side_b)]
    result.configs = [_config_diff(label, a, b, len(matched), effects) for label, a, b in matched]
    return result


def _config_diff(
    label: str, a: CellSummary, b: CellSummary, configurations: int, effects: Sequence[hosteffect.HostEffects]
) -> ConfigDiff:
    """B against A over every level both measured; across hosts, with the host effect either run measured."""
    pairs = [(a.points[c].values, b.points[c].values) for c in sorted(a.points.keys() & b.points.keys())]
    host_a, host_b = str(a.cell.get("host", "")), str(b.cell.get("host", ""))
    effect = None
    if host_a != host_b:
        known = [e.across(host_b, host_a) for e in effects]
        effect = next((est for est, _ in known if est is not None), None)
        if effect is None:
            return ConfigDiff(label, None, f"A ran on {host_a}, B on {host_b}, and neither run measured their effect")
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


# ---------------------------------------------------------------- rendering


def render_markdown(cmp: Comparison, name_a: str = "A", name_b: str = "B") -> str:
    lines = [f"# spark-agent compare: A = {md(name_a)}, B = {md(name_b)}", ""]
    lines += [f"**Warning:** {md(w)}." for w in cmp.warnings] + ([""] if cmp.warnings else [])
    lines += [summary_line(cmp), ""]
    n_reg, n_imp = len(cmp.slower_points), sum(d.status == IMPROVEMENT for d in cmp.diffs)
    lines += [
        f"Per point: {len(cmp.diffs)} points compared, {n_reg} slower and {n_imp} faster beyond their own noise, "
        f"{len(cmp.diffs) - n_reg - n_imp} within the noise ({CANNOT_RANK}).",
        "",
        "| configuration | B/A over its points [interval] | verdict |",
        "|---|---|---|",
        *[
            f"| {md(c.label)} | {md(regression.describe(c.change)) if c.change else md(c.why)} | "
            f"{c.status.upper() if c.status == REGRESSION else c.status} |"
            for c in cmp.configs
        ],
        "",
        f"Ranked by: {md(stats.RANK_BY[cmp.rank_by][1])} (`--rank-by {md(cmp.rank_by)}`).",
        "",
    ]
    unit = _unit(cmp.rank_by)
    lines += [
        f"| cell | c | A {unit} | A spread | B {unit} | B spread | B/A | verdict | rule |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in cmp.diffs:
        lines.append(
            f"| {md(d.label)} | {d.concurrency} | {_med(d.a)} | {_spr(d.a)} | {_med(d.b)} | {_spr(d.b)} "
            f"| {d.ratio:.3f} | {POINT_WORDS[d.status]} "
            f"| {d.ranking.rule} |"
        )
    for title, items in (
        ("Only in A", cmp.only_a),
        ("Only in B", cmp.only_b),
        ("Not compared (INVALID or failed)", cmp.not_compared),
    ):
        if items:
            lines += ["", f"## {title}", ""] + [f"- {md(x)}" for x in items]
    return "\n".join(lines) + "\n"


def summary_line(cmp: Comparison) -> str:
    """ "1 of 6 configuration(s) regressed beyond the noise (at most 5% false alarms per compare)"."""
    return (
        f"{len(cmp.regressions)} of {len(cmp.configs)} configuration(s) regressed beyond the noise "
        f"(each configuration over all its points; at most {regression.ALPHA:.0%} false alarms per compare)"
    )


def _unit(rank_by: str) -> str:
    return "tok/s" if rank_by == "throughput" else f"{rank_by} req/s"


def _med(p: Point) -> str:
    """The median of the ranked metric (throughput, or goodput with --rank-by goodput)."""
    return num(p.ranked.median, 1 if p.ranked is p.throughput else 2) if p.ranked else "–"


def _spr(p: Point) -> str:
    return (spread_text(p.ranked) + (" !" if p.unstable else "")) if p.ranked else "–"


def comparison_table(cmp: Comparison) -> Any:
    from rich.table import Table

    title = f"B / A, median {stats.RANK_BY[cmp.rank_by][1]}"
    table = Table(title=rich(title), caption=rich("; ".join(cmp.warnings)) or None)
    for col in ("cell", "c", "A", "B", "B/A", "verdict"):
        table.add_column(col, justify="left" if col in ("cell", "verdict") else "right")
    colour = {REGRESSION: "bold red", IMPROVEMENT: "green", WITHIN_NOISE: "dim"}
    for d in cmp.diffs:
        table.add_row(  # rich markup: labels carry spec and host text
            rich(d.label),
            str(d.concurrency),
            f"{_med(d.a)} ({_spr(d.a)})",
            f"{_med(d.b)} ({_spr(d.b)})",
            f"{d.ratio:.3f}",
            f"[{colour[d.status]}]{d.status}[/]",
        )
    return table
