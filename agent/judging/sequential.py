"""Adaptive tuning: which cell to measure next, at which levels and how many windows, and when a point is settled.
Pure functions over cell dicts (agent.results.tree.load_cells), like stats.py: no I/O, no host.

A *point* is one (cell, concurrency). Each group of cells that differ only in backend (stats.pairing_key) is tuned
on its own, in these steps per cell, each a fresh run of that cell that replaces the previous one:

1. **screen**: the lowest and highest concurrency (every level when there are SCREEN_ALL or fewer), `min_repeats`
   windows. A cell dominated by the group's leader at every screened level, settled and by at least
   `carry_margin`, cannot matter and stops here. A backend that lost that way in one group is skipped in the groups
   not yet started ("cannot change the recommendation").
2. **full**: the concurrency levels the screen left out, `min_repeats` windows, for the cells still in the running
   (the screen's windows are kept: together they cover every level of the spec); in the same step, a **start**
   (another independent server start, planning/matrix.nth_start: its own cell, so the starts interleave) of the
   leader and of each rival within RESOLVE_MARGIN of it or still open, on fewer than two starts (the report's
   winner rule). A pair that is close only once every level is in gets its second start in the next step.
3. **priced starts**: a pair still open on two starts each gets the starts per side verdicts.price names, all in one
   step and once, when `max_starts` and the budget (`afford`) allow them; otherwise it stops and says what it would
   need ("undecided: needs N starts each, the budget allows M").
4. **more**: with one start only (`max_starts` 1), a cell with a point still open gets `max_repeats` windows, once.

The first group that compares backends is screened alone (what it stops is skipped elsewhere); once its screen is
measured every other group is planned in the same step. A group of one config never waits.

A point still open when nothing is left to measure is a *tie* when tune's limits reach the spec's own schedule
(`--max-starts` and `--max-repeats` at least its server_starts and repeats: the sweep would measure no more, and
its report leaves it undecided too, with the starts that would decide it), and *undecided* when the limits were set
below it. A point whose start means lie within the spec's equivalence margin (stats.EQUIVALENT) is settled.

A group whose rivals were all skipped, or of one config, is that group's answer on the other axes (checkpoint,
speculative...): measured once at every level, `min_repeats` windows, never skipped.

Sequential testing: a point is *settled* only when the report's own rule (stats.rank_pair: ranges that don't
overlap, or a bootstrap CI on the ratio) orders it AND a one-sided two-sample t-test on log throughput rejects equality
at alpha / (2 * LOOKS), its variance pooled over both cells' measured levels. Every point is tested at most LOOKS = 4 times (screen; full with its second start; a late second start or more windows; the priced starts, once), so by Bonferroni the chance of
settling any given pair of equal backends wrongly is at most alpha = 1 - confidence over all looks, whatever the
looks' dependence (the guarantee assumes roughly log-normal window noise; the t-test, not the ranges rule, carries it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.judging import nested, stats, verdicts
from agent.judging.student import t_sf
from agent.judging.summary import CellSummary, cell_verdict, merge_starts, starts_of, summarize_cell

LOOKS = 4  # screen, full (+ a second start), a late second start or more windows, the priced starts: the most
# tests a point ever gets (Bonferroni divides alpha by this)
SCREEN = "screen"
FULL = "full"
MORE = "more"
START = "start"
ONCE = "once"  # a group of one config: every level, once


@dataclass(frozen=True)
class TuneSettings:
    confidence: float = 0.95
    min_repeats: int = 2
    max_repeats: int = 3
    carry_margin: float = 1.25  # a loss by at least this ratio at every screened level ends a backend
    max_starts: int = 2  # independent server starts tune may give one config (the report's rule needs 2)
    sweep_repeats: int = 1  # the spec's own schedule (repeats, server_starts): limits at or above it make a point
    sweep_starts: int = 1  # still open at the end a tie (what the sweep leaves undecided too), not undecided
    seed: int = stats.DEFAULT_SEED
    margin: float = verdicts.DEFAULT_MARGIN  # the spec's [judge] equivalence: a point inside it is settled

    @property
    def look_alpha(self) -> float:
        """Two-sided alpha of one look: alpha spread evenly over the capped number of looks (Bonferroni)."""
        return (1.0 - self.confidence) / LOOKS


def problems(s: TuneSettings) -> list[str]:
    """What is wrong with the settings, one phrase each (the CLI turns them into one-line errors, exit 2)."""
    out = []
    if not 0.0 < s.confidence < 1.0:
        out.append(f"--confidence {s.confidence} is outside (0, 1); use e.g. 0.95")
    if s.min_repeats < stats.MIN_REPEATS:
        out.append(f"--min-repeats {s.min_repeats} is below {stats.MIN_REPEATS}: one window says nothing about noise")
    if s.min_repeats > s.max_repeats:
        out.append(f"--min-repeats {s.min_repeats} is above --max-repeats {s.max_repeats}; raise the maximum")
    if not 1 <= s.max_starts <= 100:
        out.append(f"--max-starts {s.max_starts} is outside 1..100; use e.g. 2")
    if not s.carry_margin >= 1.0:
        out.append(f"--carry-margin {s.carry_margin} is below 1; use e.g. 1.25")
    return out


# ---------------------------------------------------------------- one test: the report's rule + a sequential test


@dataclass(frozen=True)
class Noise:
    """A cell's log-throughput noise, pooled over its measured levels: sum of squared deviations and its df."""

    ss: float = 0.0
    df: int = 0


def noise_of(summary: CellSummary) -> Noise:
    ss, df = 0.0, 0
    for p in summary.points.values():
        logs = [math.log(v) for v in p.values if v > 0]
        if len(logs) >= 2:
            m = statistics.fmean(logs)
            ss += sum((x - m) ** 2 for x in logs)
            df += len(logs) - 1
    return Noise(ss, df)


def t_p_greater(a: Sequence[float], b: Sequence[float], pooled: Noise | None = None) -> float:
    """One-sided p-value of 'log a is larger than log b': Student's two-sample t-test with pooled variance. Under
    the null we guard against (both backends the same: one distribution) the pooled test is exact for normal
    log-noise. `pooled` (both cells' noise over all their levels) replaces the two samples' own variance: it
    assumes a backend's relative noise is the same at every level, and keeps power at two windows a point."""
    la = [math.log(v) for v in a if v > 0]
    lb = [math.log(v) for v in b if v > 0]
    if len(la) < 2 or len(lb) < 2:
        return 1.0
    diff = statistics.fmean(la) - statistics.fmean(lb)
    if pooled is None or pooled.df == 0:
        ma, mb = statistics.fmean(la), statistics.fmean(lb)
        pooled = Noise(sum((x - ma) ** 2 for x in la) + sum((x - mb) ** 2 for x in lb), len(la) + len(lb) - 2)
    se = math.sqrt(pooled.ss / pooled.df * (1 / len(la) + 1 / len(lb)))
    if se == 0.0:
        return 0.0 if diff > 0 else 1.0
    return t_sf(diff / se, pooled.df)


def settle(
    a: Sequence[float],
    b: Sequence[float],
    s: TuneSettings,
    pooled: Noise | None = None,
    starts: tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]] = ((), ()),
) -> stats.Ranking:
    """Does a beat b, settled for a sequential procedure? The report's rule must order them, and the t-test
    must agree at the per-look alpha; otherwise CANNOT_RANK (the point stays open). With two starts each the
    t-test takes the start means (the unit of replication), not the windows."""
    r = stats.rank_pair(a, b, seed=s.seed, confidence=s.confidence, starts=starts, margin=s.margin)
    if r.outcome in (stats.CANNOT_RANK, stats.EQUIVALENT):  # equivalent: settled, nothing more to measure there
        return r
    if min(r.starts) >= nested.MIN_STARTS:
        a, b = ([math.exp(m) for m in nested.start_means(x)] for x in starts)
        pooled = None
    p = t_p_greater(a, b, pooled) if r.outcome == "a" else t_p_greater(b, a, pooled)
    needed = s.look_alpha / 2.0
    if p <= needed:
        return stats.Ranking(r.outcome, r.ratio, f"{r.rule}; t-test p={p:.2g} <= {needed:.2g}", r.ci)
    return stats.Ranking(stats.CANNOT_RANK, r.ratio, f"{r.rule}, but t-test p={p:.2g} > {needed:.2g}", r.ci)


# ---------------------------------------------------------------- the plan: what to run next


@dataclass(frozen=True)
class Step:
    """Run cell `cell_id` now at these levels with this many measured windows."""

    cell_id: str
    stage: str  # screen | full | start | more | once
    concurrency: tuple[int, ...]
    repeats: int

    @property
    def keep(self) -> bool:
        """The cell's earlier windows at other levels stay: the full step adds the levels the screen left out."""
        return self.stage == FULL


@dataclass(frozen=True)
class Skip:
    cell_id: str
    label: str
    reason: str


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)  # never run: cannot change the recommendation
    stopped: list[Skip] = field(default_factory=list)  # measured, then stopped: dominated beyond the noise
    open_points: list[str] = field(default_factory=list)  # "label @ c=N: why" still undecided
    tied: list[str] = field(default_factory=list)  # open at tune's limits, which reach the spec's: cannot rank

    @property
    def done(self) -> bool:
        return not self.steps


@dataclass(frozen=True)
class Candidate:
    """A planned cell: its id, group (stats.pairing_key of its planned config) and backend label, in spec order."""

    cell_id: str
    group: str
    backend: str
    label: str
    concurrency: tuple[int, ...]
    start: int = 1  # its server start (planning/matrix.nth_start); starts above 1 run only as START steps


SCREEN_ALL = 3  # at this many levels or fewer the screen is every level: a full step would add one level a round


def screen_levels(levels: Sequence[int]) -> tuple[int, ...]:
    """The lowest and highest level; every level when there are few (screen and full merged: one round less)."""
    if len(set(levels)) <= SCREEN_ALL:
        return tuple(sorted(set(levels)))
    return tuple(sorted({min(levels), max(levels)}))


def plan_next(
    candidates: Sequence[Candidate],
    measured: dict[str, dict[str, Any]],
    s: TuneSettings,
    afford: int | None = None,
) -> Plan:
    """The steps to take now, from what is measured (cell id -> cell dict of load_cells). `afford`: how many more
    server starts per config the budget fits (None: no budget). The first group that compares backends is
    screened alone (it teaches which backends are out); once its screen is measured, every other group is planned
    in the same step, skipping what the groups screened so far stopped. A group of one config (nothing to compare
    within it) never waits. Invalid and failed cells are measured once and never again (they cannot rank)."""
    plan = Plan()
    out: dict[str, str] = {}  # backend -> why it is out (lost beyond the margin in an earlier group)
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.group, []).append(c)
    teacher: bool | None = None  # the first comparing group: None before it, then whether its screen is measured
    for members in groups.values():
        firsts = [c for c in members if c.start == 1]
        comparing = len({c.backend for c in firsts}) >= 2
        if comparing and teacher is False and not any(c.cell_id in measured for c in firsts):
            continue  # waits for the first comparing group's screen: what it stops is skipped here
        screened = _plan_group(members, measured, s, out, plan, afford)
        if comparing and teacher is None:
            teacher = screened
    return plan


def _plan_group(
    members: list[Candidate],
    measured: dict[str, dict[str, Any]],
    s: TuneSettings,
    out: dict[str, str],
    plan: Plan,
    afford: int | None = None,
) -> bool:
    """Plan one group's next steps; True once its screen is measured (what it teaches other groups is known)."""
    later = {(c.backend, c.start): c for c in members if c.start > 1}
    members = [c for c in members if c.start == 1]
    started = any(c.cell_id in measured for c in members)
    live = []
    for c in members:
        if c.backend in out and c.cell_id not in measured:
            plan.skipped.append(Skip(c.cell_id, c.label, out[c.backend]))
        else:
            live.append(c)
    rivals = {c.backend for c in live}
    if len(rivals) < 2 and not started:
        # Nothing to compare within the group (one config, or its rivals are out): the cell is its group's answer
        # on the other axes (checkpoint, speculative...), compared with the other groups' survivors: measured once
        # at every level, --min-repeats windows, in one step (a screen would decide nothing; the report judges the
        # other axes on these windows, as on any first look).
        plan.steps += [Step(c.cell_id, ONCE, c.concurrency, s.min_repeats) for c in live]
        return True
    todo = [c for c in live if c.cell_id not in measured]
    if todo:
        plan.steps += [Step(c.cell_id, SCREEN, screen_levels(c.concurrency), s.min_repeats) for c in todo]
        return False
    rankable = [c for c in live if cell_verdict(measured[c.cell_id]) == "valid"]
    summaries = {c.cell_id: _summary(c, measured, later) for c in rankable}
    verdicts = _versus_leader(rankable, summaries, s)
    survivors = []
    for c in rankable:
        why = verdicts[c.cell_id].get("dominated")
        if why:
            plan.stopped.append(Skip(c.cell_id, c.label, why))
            out.setdefault(c.backend, f"{why} (in group of {c.label})")
        else:
            survivors.append(c)
    if not survivors:
        return True
    # Another start where one is due: under the margin the report needs two starts whatever the windows say. It
    # runs in the same step as the full one (the screen's levels already show a close pair), at every level.
    need_full = [c for c in survivors if set(c.concurrency) - set(summaries[c.cell_id].points)]
    restart = _needs_start(survivors, summaries, verdicts, bool(need_full)) if later and len(survivors) > 1 else []
    starts = [
        Step(nxt.cell_id, START, c.concurrency, s.min_repeats)
        for c in restart
        if (nxt := later.get((c.backend, _starts(summaries[c.cell_id]) + 1))) is not None
        and nxt.cell_id not in measured
    ]
    if need_full:  # only the levels not measured yet: the screen's windows stay (Step.keep)
        plan.steps += [
            Step(c.cell_id, FULL, tuple(sorted(set(c.concurrency) - set(summaries[c.cell_id].points))), s.min_repeats)
            for c in need_full
        ]
        plan.steps += starts
        return True
    if len(survivors) < 2:
        return True
    if starts:
        plan.steps += starts
        return True
    opened = [c for c in survivors if verdicts[c.cell_id]["open"]]
    # With two starts each the answer is more starts or none: the price (verdicts.price) says how many would
    # decide the pair; they run in one step, once, when --max-starts and the budget allow them, else it stops.
    left = plan.tied if s.max_starts >= s.sweep_starts and s.max_repeats >= s.sweep_repeats else plan.open_points
    priced = _priced_starts(survivors, summaries, verdicts, later, measured, s, afford, left)
    if priced:
        plan.steps += priced
        return True
    more = [
        c
        for c in opened
        if _repeats(summaries[c.cell_id]) < s.max_repeats and _starts(summaries[c.cell_id]) < nested.MIN_STARTS
    ]
    if more:
        plan.steps += [Step(c.cell_id, MORE, c.concurrency, s.max_repeats) for c in more]
        return True
    # Nothing left to measure within the limits: a tie when the limits reach the spec's own schedule (the sweep
    # would measure no more, and its report says cannot rank), else undecided (the limits were set below it).
    for c in restart:
        left.append(
            f"{c.label}: within {stats.RESOLVE_MARGIN:.0%} of the leader or open, on "
            f"{_starts(summaries[c.cell_id])} server start(s) (--max-starts {s.max_starts} reached)"
        )
    for c in opened:
        left += [f"{c.label} @ c={lvl}: {why}" for lvl, why in verdicts[c.cell_id]["open"]]
    return True


def _priced_starts(
    survivors: list[Candidate],
    summaries: dict[str, CellSummary],
    verdicts_: dict[str, dict[str, Any]],
    later: dict[tuple[str, int], Candidate],
    measured: dict[str, dict[str, Any]],
    s: TuneSettings,
    afford: int | None,
    left: list[str],
) -> list[Step]:
    """Open pairs on two starts or more each: the starts per side that would decide them (verdicts.price at the
    pair's between-start noise). Planned, all in one step, when the pair is on exactly MIN_STARTS starts (once:
    the looks stay capped) and --max-starts and the budget allow them; otherwise the pair stops here and `left`
    says why: "undecided: needs N starts each, the budget allows M"."""
    leader = _leader(survivors, summaries)
    if leader is None:
        return []
    steps: list[Step] = []
    seen: set[str] = set()
    for c in survivors:
        if c is leader or not verdicts_[c.cell_id]["open"]:
            continue
        pair = (leader, c)
        have = min(_starts(summaries[x.cell_id]) for x in pair)
        if have < nested.MIN_STARTS:
            continue
        price = pair_price(summaries[leader.cell_id], summaries[c.cell_id], s)
        if price is None:
            continue
        allows = s.max_starts if afford is None else min(s.max_starts, have + max(afford, 0))
        why = "--max-starts" if afford is None or s.max_starts <= have + afford else "the budget"
        if price.need is None:
            left.append(
                f"{leader.label} vs {c.label}: undecided: not decidable within {verdicts.MAX_STARTS} starts each "
                f"(between-start noise {price.noise or 0.0:.1%}, detectable at {have} starts: {price.mde:.0%})"
            )
            continue
        # The price pools the noise over every level; a point still open at `have` starts needs one more at least.
        need = max(price.need, have + 1)
        least = "at least " if price.need <= have else ""
        if need > allows or have > nested.MIN_STARTS:
            left.append(
                f"{leader.label} vs {c.label}: undecided: needs {least}{need} starts each, {why} allows {allows} "
                f"(detectable at {have} starts: {price.mde:.0%})"
            )
            continue
        for k in range(have + 1, need + 1):
            for x in pair:
                nxt = later.get((x.backend, k))
                if nxt is not None and nxt.cell_id not in measured and nxt.cell_id not in seen:
                    seen.add(nxt.cell_id)
                    steps.append(Step(nxt.cell_id, START, x.concurrency, s.min_repeats))
    start_of = {c.cell_id: c.start for c in later.values()}
    return sorted(steps, key=lambda st: start_of[st.cell_id])  # A3 B3 A4 B4: the starts interleave in time


def pair_price(a: CellSummary, b: CellSummary, s: TuneSettings) -> verdicts.Price | None:
    """The price of deciding a against b (verdicts.price): their median ratio over the shared levels, on the
    between-start noise pooled over both cells' points started twice; None when no level is shared."""
    levels = [lvl for lvl in a.points if lvl in b.points and a.points[lvl].values and b.points[lvl].values]
    if not levels:
        return None
    ratio = statistics.median(
        statistics.median(a.points[lvl].values) / statistics.median(b.points[lvl].values) for lvl in levels
    )
    points = [p.noise for sm in (a, b) for p in sm.points.values() if len(p.starts) >= nested.MIN_STARTS]
    floor = nested.pooled(points) if points else None
    per_start = floor.windows / max(floor.starts, 1) if floor else 1.0
    starts = min(len(starts_of(a.cell)), len(starts_of(b.cell)))
    return verdicts.price(ratio, starts, verdicts.start_sd(floor, per_start), s.margin)


def open_against_leader(
    cells: list[Candidate], measured: dict[str, dict[str, Any]], s: TuneSettings
) -> dict[str, list[tuple[int, str]]]:
    """Cell id -> its points not settled against the leader (level, why): what the log shows while tuning."""
    valid = [c for c in cells if cell_verdict(measured[c.cell_id]) == "valid"]
    summaries = {c.cell_id: summarize_cell(measured[c.cell_id]) for c in valid}
    return {k: v["open"] for k, v in _versus_leader(valid, summaries, s).items()}


def _summary(c: Candidate, measured: dict[str, dict[str, Any]], later: dict[tuple[str, int], Candidate]) -> CellSummary:
    """A candidate's measured starts as one summary (merge_starts: windows grouped by start)."""
    cells = [measured[c.cell_id]] + [
        measured[x.cell_id]
        for (backend, _), x in sorted(later.items())
        if backend == c.backend and x.cell_id in measured
    ]
    same = [x for x in cells if cell_verdict(x) == cell_verdict(cells[0])]
    return summarize_cell(merge_starts(same)[0])


def _starts(summary: CellSummary) -> int:
    return len(starts_of(summary.cell))


def _leader(survivors: list[Candidate], summaries: dict[str, CellSummary]) -> Candidate | None:
    """The highest geometric mean of the medians over the levels every survivor measured (None: no such level)."""
    levels = sorted(set.intersection(*(set(summaries[c.cell_id].points) for c in survivors))) if survivors else []
    ranked = [c for c in survivors if levels and all(summaries[c.cell_id].points[lvl].values for lvl in levels)]
    if len(ranked) < 2:
        return None
    return max(
        ranked,
        key=lambda c: sum(
            math.log(v) for lvl in levels if (v := statistics.median(summaries[c.cell_id].points[lvl].values)) > 0
        ),
    )


def _needs_start(
    survivors: list[Candidate],
    summaries: dict[str, CellSummary],
    verdicts_: dict[str, dict[str, Any]],
    close_only: bool = False,
) -> list[Candidate]:
    """The leader and the rivals that need a second server start: within RESOLVE_MARGIN of the leader (the median
    of the per-level ratios, as the report's margin) or (unless `close_only`: at the screen, where the full step's
    levels may still settle a wide gap) still open, on fewer than two starts. Starts beyond the second are the
    price's (_priced_starts)."""
    leader = _leader(survivors, summaries)
    if leader is None:
        return []
    levels = sorted(set.intersection(*(set(summaries[c.cell_id].points) for c in survivors)))
    med = {
        c.cell_id: {lvl: statistics.median(summaries[c.cell_id].points[lvl].values) for lvl in levels}
        for c in survivors
        if all(summaries[c.cell_id].points[lvl].values for lvl in levels)
    }
    out = []
    for c in survivors:
        if c is leader or c.cell_id not in med:
            continue
        ratio = statistics.median(
            med[leader.cell_id][lvl] / med[c.cell_id][lvl] for lvl in levels if med[c.cell_id][lvl]
        )
        few = min(_starts(summaries[x.cell_id]) for x in (leader, c)) < nested.MIN_STARTS
        if few and (ratio < 1 + stats.RESOLVE_MARGIN or (verdicts_[c.cell_id]["open"] and not close_only)):
            out.append(c)
    return [leader, *out] if out else []


def _repeats(summary: CellSummary) -> int:
    return min((len(p.values) + len(p.failed) for p in summary.points.values()), default=0)


def _versus_leader(
    cells: list[Candidate], summaries: dict[str, CellSummary], s: TuneSettings
) -> dict[str, dict[str, Any]]:
    """Per cell: 'dominated' (why, or "") and 'open' [(level, why)]: its points not settled against the leader.
    The leader at a level is the highest median there; the leader itself is open where any rival is."""
    out: dict[str, dict[str, Any]] = {c.cell_id: {"dominated": "", "open": []} for c in cells}
    levels = sorted({lvl for sm in summaries.values() for lvl in sm.points})
    noise = {c.cell_id: noise_of(summaries[c.cell_id]) for c in cells}
    losses: dict[str, list[tuple[int, float, str]]] = {c.cell_id: [] for c in cells}
    for lvl in levels:
        at = [c for c in cells if lvl in summaries[c.cell_id].points and summaries[c.cell_id].points[lvl].values]
        if len(at) < 2:
            continue
        leader = max(at, key=lambda c: statistics.median(summaries[c.cell_id].points[lvl].values))
        lead_vals = summaries[leader.cell_id].points[lvl].values
        for c in at:
            if c is leader:
                continue
            na, nb = noise[leader.cell_id], noise[c.cell_id]
            pa, pb = summaries[leader.cell_id].points[lvl], summaries[c.cell_id].points[lvl]
            r = settle(lead_vals, pb.values, s, Noise(na.ss + nb.ss, na.df + nb.df), (pa.starts, pb.starts))
            if r.outcome == "a":
                losses[c.cell_id].append((lvl, r.ratio, leader.label))
            elif r.outcome != stats.EQUIVALENT:
                out[c.cell_id]["open"].append((lvl, f"vs {leader.label}: {r.rule}"))
                out[leader.cell_id]["open"].append((lvl, f"vs {c.label}: {r.rule}"))
    for c in cells:
        measured_levels = [lvl for lvl, p in summaries[c.cell_id].points.items() if p.values]
        lost = losses[c.cell_id]
        if measured_levels and len(lost) == len(measured_levels) and min(x[1] for x in lost) >= s.carry_margin:
            worst = min(x[1] for x in lost)
            winners = sorted({x[2] for x in lost})
            out[c.cell_id]["dominated"] = (
                f"{c.backend} lost to {', '.join(winners)} at every measured level by at least {worst:.2f}x "
                f"(margin {s.carry_margin:.2f}x), settled"
            )
            out[c.cell_id]["open"] = []
    return out
