"""The three verdicts a question can end in, and the price of the third. Pure functions, no I/O.

Every question the report asks (an axis, a pair of its values, one load level) ends in one of:

- *faster*: one value beats the others outside the noise (judging/stats' winner rule), with its ratio;
- *equivalent within ±Δ*: the interval of the ratio lies inside [1/(1+Δ), 1+Δ] (a two one-sided tests' region of
  practical equivalence, as in the ROPE/TOST literature); Δ is the spec's `[judge] equivalence`, default 5%;
- *undecided*: neither yet. Then the observed gap, the minimum detectable effect at the current server starts,
  and how many more starts per side would decide it, in minutes.

A group with one configuration has *nothing to compare*.

The minimum detectable effect of n starts per side, at a between-start standard deviation s of a start's mean log
throughput, is (t₀.₉₇₅ + t₀.₈₀)·s·√(2/n) on 2n − 2 degrees of freedom (95% two-sided, 80% power): at s = 4% about
21% at n = 2 and 10% at n = 4. A question decides once the interval either excludes 1 (a gap g needs that effect
under g) or lies inside ±Δ (it needs it under log(1+Δ) − g): the starts needed are the fewest n for which the
effect falls under the larger of the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.judging import nested
from agent.judging.student import t_quantile

FASTER = "faster"
EQUIVALENT = "equivalent"
UNDECIDED = "undecided"
NOTHING = "nothing to compare"
BY_LEVEL = "depends on the level"  # every level decided, not alike: the answer is per level (a crossover)
KINDS = (FASTER, EQUIVALENT, UNDECIDED, NOTHING, BY_LEVEL)

DEFAULT_MARGIN = 0.05  # Δ: two values within ±5% of each other are one choice
MAX_STARTS = 50  # the most starts per side a price is computed for: beyond, "not within 50 starts"
POWER = 0.80
CONFIDENCE = 0.95


def check_margin(margin: float) -> str:
    """What is wrong with an equivalence margin, or "" (the spec and the CLI turn it into a one-line error)."""
    if not isinstance(margin, (int, float)) or isinstance(margin, bool) or not 0.0 < float(margin) < 0.5:
        return f"the equivalence margin must be a share above 0 and below 0.5 (0.05 = ±5%), got {margin!r}"
    return ""


def inside(ci: tuple[float, float] | None, margin: float) -> bool:
    """Does the interval of a ratio lie inside ±margin (symmetric on the log scale, so a/b and b/a agree)?"""
    if ci is None or not ci[0] > 0 or not math.isfinite(ci[1]):
        return False
    limit = math.log1p(margin)
    return abs(math.log(ci[0])) <= limit and abs(math.log(ci[1])) <= limit


ZERO = "the other side measured 0"  # a ratio over a zero says nothing: never printed as "inf"


def times(r: float | None) -> str:
    """A ratio as printed: "1.72×"; one over a side that measured 0 (goodput under SLOs nothing met) has no value,
    and says so."""
    if r is None or math.isnan(r):
        return "no ratio"
    return f"no ratio: {ZERO}" if math.isinf(r) else f"{r:.2f}×"


def interval(ci: tuple[float, float] | None) -> str:
    """ " (1.10–1.30×)", or "" where there is none or a bound is not a number."""
    if not ci or not all(math.isfinite(x) for x in ci):
        return ""
    return f" ({ci[0]:.2f}–{ci[1]:.2f}×)"


@dataclass(frozen=True)
class Price:
    """What deciding a question costs: the detectable effect now and the starts per side that would decide it."""

    starts: int  # server starts per side now (the fewer of the two)
    mde: float | None  # relative effect detectable at `starts` (None: the between-start noise is unknown)
    need: int | None  # starts per side that would decide it; None: more than MAX_STARTS
    noise: float | None = None  # the between-start standard deviation used (relative)

    @property
    def more(self) -> int | None:
        return None if self.need is None else max(self.need - self.starts, 0)


def start_sd(floor: nested.Nested | None, windows_per_start: float) -> float | None:
    """The standard deviation of one start's mean log throughput: between starts, plus the windows' share."""
    if floor is None or floor.between is None:
        return None
    return math.sqrt(floor.between + (floor.within or 0.0) / max(windows_per_start, 1.0))


def detectable(sd: float, n: int) -> float:
    """The minimum detectable effect (relative) of n starts per side at start-mean standard deviation sd."""
    if n < nested.MIN_STARTS:
        return math.inf
    df = 2 * n - 2
    k = t_quantile(1 - (1 - CONFIDENCE) / 2, df) + t_quantile(POWER, df)
    return math.expm1(k * sd * math.sqrt(2.0 / n))


def price(ratio: float, starts: int, sd: float | None, margin: float) -> Price:
    """The price of deciding a pair observed at `ratio` on `starts` starts per side. Without a between-start
    estimate (one start each, no A/A pair in the group) the price is the start that measures it."""
    if sd is None:
        return Price(starts, None, max(starts + 1, nested.MIN_STARTS))
    if sd == 0.0:
        return Price(starts, 0.0, max(starts, nested.MIN_STARTS), sd)
    gap = abs(math.log(ratio)) if ratio > 0 and math.isfinite(ratio) else 0.0
    target = max(gap, math.log1p(margin) - gap)
    need = next(
        (n for n in range(max(starts, nested.MIN_STARTS), MAX_STARTS + 1) if math.log1p(detectable(sd, n)) <= target),
        None,
    )
    return Price(starts, detectable(sd, starts), need, sd)


@dataclass(frozen=True)
class Verdict:
    """How one question ended: its kind (KINDS), what to run, and the numbers behind the words."""

    kind: str
    choice: str | None = None  # faster: the winner; equivalent: the one picked; nothing: the only value
    equivalents: tuple[str, ...] = ()  # equivalent: every value inside the margin of the others, the choice first
    why_choice: str = ""  # equivalent: "the default" / "the fewest non-default settings"
    pair: tuple[str, str] = ("", "")  # faster: (winner, runner-up); undecided: the open pair (leader first)
    ratio: float | None = None  # the pair's median ratio, leader over the other
    ci: tuple[float, float] | None = None  # its interval, where the start means gave one
    price: Price | None = None  # undecided: what deciding costs
    minutes: float | None = None  # one server start, median (None: the tree has no cell timings)
    margin: float = DEFAULT_MARGIN
    why: str = ""  # undecided: why the rule cannot name a winner yet, in words
    levels: tuple[tuple[int, str], ...] = ()  # depends on the level: (concurrency, that level's verdict in words)

    @property
    def decided(self) -> bool:
        return self.kind in (FASTER, EQUIVALENT)

    def headline(self) -> str:
        """ "marlin", "equivalent within ±5%: run auto", "undecided", "nothing to compare": a short label."""
        if self.kind == FASTER:
            return str(self.choice)
        if self.kind == EQUIVALENT:
            return f"equivalent within ±{self.margin:.0%}: run {self.choice}"
        return self.kind

    def words(self) -> str:
        """The verdict in one line, with the numbers a person acts on."""
        if self.kind == BY_LEVEL:
            return f"{BY_LEVEL}: " + "; ".join(f"c={c}: {w}" for c, w in self.levels)
        if self.kind == NOTHING and len(self.equivalents) == 2:
            alias, target = self.equivalents
            return f"{NOTHING}: {alias} loads {target}, the same choice; run {alias} ({self.why_choice})"
        if self.kind == NOTHING:
            only = f"{self.choice} is the only valid value measured" if self.choice else "no valid cell"
            return f"{NOTHING}: {only}"
        if self.kind == FASTER:
            if self.ratio and self.pair[1] and math.isinf(self.ratio):
                return f"faster: {self.choice}, where {self.pair[1]} measured 0 (no ratio)"
            ratio = f", {times(self.ratio)} over {self.pair[1]}" if self.ratio and self.pair[1] else ""
            return f"faster: {self.choice}{ratio}{interval(self.ci)}"
        if self.kind == EQUIVALENT:
            return (
                f"equivalent within ±{self.margin:.0%}: any of {', '.join(self.equivalents)}; "
                f"run {self.choice} ({self.why_choice})"
            )
        if self.price is None and self.why:  # the why is the next step (more windows, a host effect)
            return f"undecided: {self.gap_words()}"
        return f"undecided: {self.gap_words()}; {self.price_words()}"

    def gap_words(self) -> str:
        a, b = self.pair
        if self.ratio is None or not a:
            return self.why or "no two values were measured on otherwise identical cells"
        ci = interval(self.ci)
        if math.isinf(self.ratio):
            return f"{b} measured 0 where {a} did not" + (f", {self.why}" if self.why else "")
        lead = f"{a} leads {b} by {self.ratio - 1:.1%}" if self.ratio >= 1.0005 else f"{a} and {b} measured alike"
        return f"{lead}{ci}, {self.why}" if self.why else f"{lead}{ci}"

    def price_words(self) -> str:
        p = self.price
        if p is None:
            return "more server starts would decide it"
        minutes = self.minutes or 0.0
        if p.mde is None:
            more = p.more or 1
            cost = f" ({2 * more} starts × {minutes:.1f} min = {2 * more * minutes:.0f} min)" if minutes else ""
            return (
                f"the between-start noise is unknown at {_starts(p.starts)} each; {_starts(more, 'more ')} each "
                f"measure{'s' if more == 1 else ''} it{cost}"
            )
        mde = f"detectable at {_starts(p.starts)} each: {p.mde:.0%}" if math.isfinite(p.mde) else ""
        if p.need is None:
            return (
                f"{mde + '; ' if mde else ''}not decidable within {MAX_STARTS} starts each at "
                f"{p.noise or 0.0:.1%} between-start noise: the difference is smaller than the noise can resolve"
            )
        more = p.more or 0
        cost = f" ({2 * more} starts × {minutes:.1f} min = {2 * more * minutes:.0f} min)" if minutes and more else ""
        return (
            f"{mde + '; ' if mde else ''}{_starts(more, 'more ')} each decide{'s' if more == 1 else ''} it{cost} "
            f"(spark-agent tune, or server_starts = {p.need} in [matrix])"
        )


def _starts(n: int, what: str = "") -> str:
    return f"{n} {what}start" + ("" if n == 1 else "s")
