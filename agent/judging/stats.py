"""Medians, spread and honest ranking. Pure functions over cell dicts (see agent.results.tree.load_cells): no I/O.

The method (from the article): warmup + N measured repeats per (cell, concurrency); the reported value is the
median of the repeats that succeeded; spread = (max - min) / median, and a point whose spread exceeds the threshold
is flagged unstable. A beats B only when their repeat ranges do not overlap, or when a seeded bootstrap confidence
interval on the ratio of medians excludes 1. Anything else is "cannot rank": never an order inside the noise.
Cells whose verdict is not "valid" never rank.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.judging import hosteffect, measurable, nested, verdicts
from agent.judging.summary import (
    RANK_METRIC,
    WRONG_OUTPUT,
    CellSummary,
    Point,
    comparable,
    distinct_cells,
    logged_version,
    starts_of,
    whole_cell,
)
from agent.planning.matrix import BACKEND_FIELDS, backend_label
from agent.planning.settings import LoadSettings, ServerSettings, flat_names, toml_schema

DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95
MIN_REPEATS = 2  # one value says nothing about noise, so it cannot rank

# --rank-by: name -> (window key, how the report says it). Goodput is vLLM bench serve's name for requests/s that
# met every SLO; windows carry it only when the sweep set SLOs.
RANK_BY = {
    "throughput": (RANK_METRIC, "output throughput, tok/s"),
    "goodput": ("request_goodput", "goodput, requests/s that met every SLO"),
}
RANK_BY_WORDS = {key: words for key, words in RANK_BY.values()}
NO_SLO_GOODPUT = "goodput with no SLOs set: finished requests/s, every one counted ([load] goodput sets SLOs)"


def rank_words(rank_by: str, slos: Sequence[str]) -> str:
    """How the report says the metric it ranks on (a --rank-by name or its window key): goodput under no SLO is
    plain request throughput, and said so."""
    key = RANK_BY[rank_by][0] if rank_by in RANK_BY else rank_by
    if key == RANK_BY["goodput"][0] and not slos:
        return NO_SLO_GOODPUT
    return RANK_BY_WORDS.get(key, key)


LATENCY_METRICS = ("median_ttft_ms", "median_tpot_ms")
# Config keys that describe the sweep's schedule, not the configuration being measured.
SCHEDULE_FIELDS = ("concurrency", "warmup", "repeats", "server_start")
# "what to run" names a winner this close to its runner-up only when both have MIN_STARTS interleaved server starts
RESOLVE_MARGIN = 0.25

CANNOT_RANK = "cannot rank"  # one pair at one point, neither ordered nor equivalent: its question is undecided
EQUIVALENT = verdicts.EQUIVALENT  # one pair at one point: the start means' interval lies inside the margin
UNRESOLVED = "unresolved"  # a leader by less than RESOLVE_MARGIN without two interleaved server starts each


def pairing_key(cell: dict[str, Any], axis: str = "backend") -> str:
    """Everything that must match for two cells to be compared on one axis (the backend by default): host and
    config minus that axis's keys and the schedule. Every other axis is held equal."""
    skip = axis_keys(axis) + SCHEDULE_FIELDS
    config = {k: v for k, v in cell.get("config", {}).items() if k not in skip}
    return json.dumps({"host": cell.get("host", ""), **config}, sort_keys=True, default=str)


# ---------------------------------------------------------------- ranking two sets of repeats


@dataclass(frozen=True)
class Ranking:
    outcome: str  # "a" | "b" | CANNOT_RANK
    ratio: float  # median(a) / median(b)
    rule: str  # why, in words
    ci: tuple[float, float] | None = None
    across: str = ""  # "spark-1 vs spark-2": the two cells ran on different hosts (the host effect divided out)
    widened: float = 0.0  # how much the host effect added to the standard error (0.3 = 30%)
    starts: tuple[int, int] = (1, 1)  # server starts behind a and b; below 2, the between-start noise is unknown
    price: verdicts.Price | None = None  # CANNOT_RANK on one host: what deciding it would cost (matchups)


def ranges_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    return min(a) <= max(b) and min(b) <= max(a)


def bootstrap_ratio_ci(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(a) / median(b), resampling each side with replacement.

    Draws exactly what `rng.choices(b, k=len(b))` then `rng.choices(a, k=len(a))` per resample would (the same
    random() stream, index floor(random() * n)), and takes the medians with numpy: the same numbers as a loop of
    statistics.median, at the speed a report ranking every axis needs (tests/test_axes.py checks they match)."""
    import numpy as np  # here: the host side never imports this module, and the report's plots need numpy anyway

    kb, ka = len(b), len(a)
    draws = _randoms(random.Random(seed), resamples * (kb + ka)).reshape(resamples, kb + ka)
    picked_b = np.asarray(b, dtype=float)[np.floor(draws[:, :kb] * float(kb)).astype(int)]
    picked_a = np.asarray(a, dtype=float)[np.floor(draws[:, kb:] * float(ka)).astype(int)]
    mb, ma = _medians(picked_b), _medians(picked_a)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(mb != 0, ma / np.where(mb != 0, mb, 1.0), math.inf).tolist()
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    lo = ratios[int(tail * (resamples - 1))]
    hi = ratios[math.ceil((1.0 - tail) * (resamples - 1))]
    return lo, hi


def _randoms(rng: random.Random, n: int) -> Any:
    """The next n values of rng.random(), as a numpy array. CPython's random() is (w0 >> 5) * 2**26 + (w1 >> 6),
    over 2**53, of the next two 32-bit Mersenne Twister words, and getrandbits(64 * n) returns the next 2n words,
    least significant first: the same stream, without a Python call per value."""
    import numpy as np

    if n == 0:
        return np.zeros(0)
    words = np.frombuffer(rng.getrandbits(64 * n).to_bytes(8 * n, "little"), dtype="<u4").reshape(n, 2)
    high, low = (words[:, 0] >> 5).astype(float), (words[:, 1] >> 6).astype(float)
    return (high * 67108864.0 + low) / 9007199254740992.0


def _medians(rows: Any) -> Any:
    """statistics.median of each row: the middle value, or (x + y) / 2 of the two middle ones."""
    import numpy as np

    ordered = np.sort(rows, axis=1)
    n = ordered.shape[1]
    if n % 2:
        return ordered[:, n // 2]
    return (ordered[:, n // 2 - 1] + ordered[:, n // 2]) / 2


def rank_pair(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    min_repeats: int = MIN_REPEATS,
    starts: tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]] = ((), ()),
    floor: nested.Nested | None = None,
    margin: float | None = None,
) -> Ranking:
    """Does a beat b (higher is better)? Only outside the noise; otherwise CANNOT_RANK. `starts`: a's and b's
    windows grouped by server start; with MIN_STARTS each, the start means decide (both kinds of noise), else
    the windows do, as before, and the Ranking says how many starts stood behind them. With `margin` (Δ) and
    MIN_STARTS each, an interval inside ±Δ is EQUIVALENT (even where it excludes 1: a gap inside Δ is no reason
    to choose); windows of one start never show equivalence, since they leave the between-start noise out."""
    count = (max(len(starts[0]), 1), max(len(starts[1]), 1))
    by_start = nested.ratio_interval(starts[0], starts[1], confidence, floor)
    if by_start is not None:
        ratio, ci = by_start
        words = f"start means of {count[0]} and {count[1]} server starts: {confidence:.0%} interval"
        if margin is not None and verdicts.inside(ci, margin):
            return Ranking(EQUIVALENT, ratio, f"{words} lies inside ±{margin:.0%}", ci, starts=count)
        if ci[0] > 1 or ci[1] < 1:
            return Ranking("a" if ci[0] > 1 else "b", ratio, f"{words} excludes 1", ci, starts=count)
        return Ranking(CANNOT_RANK, ratio, f"{words} includes 1", ci, starts=count)
    return replace(_rank_windows(a, b, seed, resamples, confidence, min_repeats), starts=count)


def _rank_windows(
    a: Sequence[float], b: Sequence[float], seed: int, resamples: int, confidence: float, min_repeats: int
) -> Ranking:
    """The report's window rule: ranges that do not overlap, or a bootstrap interval that excludes 1."""
    if len(a) < min_repeats or len(b) < min_repeats:
        ratio = _ratio(a, b)
        return Ranking(CANNOT_RANK, ratio, f"fewer than {min_repeats} successful repeats")
    ratio = _ratio(a, b)
    if math.isnan(ratio):  # both medians zero: nothing finished on either side, nothing to order
        return Ranking(CANNOT_RANK, ratio, "zero on both sides: not measured")
    better = "a" if ratio > 1 else "b"
    if not ranges_overlap(a, b):
        return Ranking(better, ratio, "repeat ranges do not overlap")
    ci = bootstrap_ratio_ci(a, b, seed=seed, resamples=resamples, confidence=confidence)
    pct = f"{confidence:.0%}"
    if ci[0] > 1 or ci[1] < 1:
        return Ranking("a" if ci[0] > 1 else "b", ratio, f"ranges overlap but bootstrap {pct} CI excludes 1", ci)
    return Ranking(CANNOT_RANK, ratio, f"ranges overlap and bootstrap {pct} CI includes 1", ci)


def _ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """median(a) / median(b); nan when a side is empty or both medians are zero (no order), inf when only b's is."""
    if not a or not b:
        return math.nan
    ma, mb = statistics.median(a), statistics.median(b)
    if mb == 0:
        return math.inf if ma else math.nan
    return ma / mb


# ---------------------------------------------------------------- axes: the questions a report answers

# [config] keys that are never a question of "what to run", only held equal: the schedule, the load (the workload
# itself; load-side axes vary inside a cell), what follows from the checkpoint (model) or groups the report (quant).
HELD_KEYS = frozenset(SCHEDULE_FIELDS + ("duration_s", "model", "quant", "runtime") + tuple(flat_names(LoadSettings)))
_AXIS_KEYS = {
    "backend": BACKEND_FIELDS,
    "checkpoint": ("checkpoint", "model"),
    "extra_args": ("extra_args", "extra_args_name"),
}
# Which checkpoint, across quant formats (FP8 or NVFP4 of one model): asked of a hardware's cells when they span
# several formats, the checkpoint and its format one value, everything else held equal.
CHECKPOINTS = "checkpoint (any quant)"
_AXIS_KEYS[CHECKPOINTS] = ("checkpoint", "model", "quant")
# the value a key has when [config] leaves it out (a setting added later, at its default)
_DEFAULTS: dict[str, Any] = {k: d for k, (_, _, d) in toml_schema(ServerSettings).items()} | {"env_variant": ""}


def axis_keys(axis: str) -> tuple[str, ...]:
    """The [config] keys one axis covers: the backend is the three backend fields; the checkpoint its model too."""
    return _AXIS_KEYS.get(axis, (axis,))


def axes_of(config: dict[str, Any]) -> list[str]:
    """The axes a [config] can be ranked on: backend, checkpoint, then its other keys in table order."""
    skip = HELD_KEYS | set(BACKEND_FIELDS) | {"checkpoint", "extra_args_name"}
    return ["backend", "checkpoint"] + [k for k in config if k not in skip]


def axis_value(config: dict[str, Any], axis: str) -> str:
    """A cell's value on an axis, exactly (canonical JSON; a key left out is its default)."""
    if axis == "backend":
        return backend_label(config)
    return json.dumps([config.get(k, _DEFAULTS.get(k)) for k in axis_keys(axis)], sort_keys=True, default=str)


def value_label(config: dict[str, Any], axis: str) -> str:
    """A cell's value on an axis in words: "marlin", "uns-fast", "mtp", "off", "sha256:3c0a6e4b9f1d"."""
    if axis == "backend":
        return backend_label(config)
    if axis in ("checkpoint", CHECKPOINTS):
        return str(config.get("checkpoint") or config.get("model") or "unknown")
    value = config.get(axis, _DEFAULTS.get(axis))
    if axis == "speculative":
        return str(json.loads(value).get("method", value)) if value else "off"
    if axis == "extra_args" and config.get("extra_args_name"):
        return str(config["extra_args_name"])  # [matrix.extra_args] named it, as [matrix.env] names a variant
    if isinstance(value, str) and "@sha256:" in value:
        return value.split("@", 1)[1][:19]
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "none"
    return "none" if value in ("", None) else str(value)


@dataclass(frozen=True)
class Matchup:
    """Value a against value b of one axis, on otherwise identical cells, at one concurrency."""

    checkpoint: str
    concurrency: int
    a: str
    b: str
    ranking: Ranking


@dataclass(frozen=True)
class Loser:
    backend: str  # the value beaten (of whichever axis; the backend axis is the common one)
    beaten_at: int  # matchups the winner won
    lost_at: int  # matchups the winner lost
    cannot_rank_at: int
    ratios: tuple[float, ...]  # winner / loser, every matchup
    equivalent_at: int = 0  # matchups inside the equivalence margin

    @property
    def ratio_lo(self) -> float:
        return min(self.ratios)

    @property
    def ratio_hi(self) -> float:
        return max(self.ratios)

    @property
    def ratio_median(self) -> float:
        return statistics.median(self.ratios)


@dataclass
class Question:
    """One axis ranked within the others held equal: which of its values to run."""

    axis: str
    held: list[str]  # the other axes that vary here: every matchup holds them equal
    candidates: list[str]
    matchups: list[Matchup]
    winner: str | None  # None: cannot rank
    reason: str
    versus: list[Loser]  # the winner against each other candidate (empty without a winner)
    per_concurrency: dict[int, str]  # c → its verdict's headline (the winning value, equivalent…, undecided)
    same: dict[str, str] = field(default_factory=dict)  # "auto" → the backend it loaded, itself a candidate
    unresolved: str = ""  # the leader's margin is inside the start-to-start noise: what it would cost to resolve
    verdict: verdicts.Verdict = field(default_factory=lambda: verdicts.Verdict(verdicts.NOTHING))
    per_level: dict[int, verdicts.Verdict] = field(default_factory=dict)  # c → the same question at that level
    quality: dict[str, str] = field(default_factory=dict)  # checkpoint questions: value → its quality verdict


@dataclass
class Recommendation:
    hardware: str
    quant: str
    questions: list[Question]  # one per axis that varies among the valid cells (the backend when none does)
    winner: str | None  # the decided values in words ("uns-fast · marlin"); None when no question has a winner
    reason: str  # one line: why this winner, or why none
    choice: dict[str, str]  # axis → winning value, for the axes the data separates
    winner_cells: list[CellSummary]  # cells matching the choice: where the command line comes from
    invalid: list[CellSummary]
    failed: list[CellSummary]
    effects: list[str]  # one axis value runs where another fails to start or is INVALID, all else held equal
    metric: str = RANK_METRIC
    hosts: hosteffect.HostEffects = field(default_factory=hosteffect.HostEffects)  # each host's measured speed
    noise: nested.Nested | None = None  # the machine's noise floor from its A/A pairs (None: no cell started twice)

    @property
    def undecided(self) -> list[Question]:
        """The questions still open (undecided, or ranked but never measured together): more starts decide them."""
        return [q for q in self.questions if q.verdict.kind == verdicts.UNDECIDED]

    @property
    def versus(self) -> list[Loser]:
        """The losers of a single-question recommendation (the common case: backends only)."""
        return self.questions[0].versus if len(self.questions) == 1 else []

    @property
    def per_concurrency(self) -> dict[int, str]:
        return self.questions[0].per_concurrency if len(self.questions) == 1 else {}


def matchups(
    group: Sequence[CellSummary],
    axis: str = "backend",
    *,
    seed: int = DEFAULT_SEED,
    effects: hosteffect.HostEffects | None = None,
    margin: float = verdicts.DEFAULT_MARGIN,
) -> list[Matchup]:
    """Every pair of rankable cells that differ only on `axis`, at every concurrency both measured. Cells on one
    host are paired first; two values measured at a level only on different hosts (of one fingerprint) are ranked
    with the host effect divided out (rank_across), or refused with the reason when it is not known. A pair on one
    host inside the noise is EQUIVALENT within `margin`, or CANNOT_RANK with the price of deciding it."""
    labels = _labels(group, axis)
    floor = noise_floor([s for s in group if s.rankable])
    by_key: dict[str, list[CellSummary]] = {}
    for s in group:
        if s.rankable:
            by_key.setdefault(comparison_key(s.cell, axis), []).append(s)
    out = []
    for key in sorted(by_key):
        cells = sorted(by_key[key], key=lambda s: (labels[axis_value(s.config, axis)], _host(s)))
        values = sorted({labels[axis_value(s.config, axis)] for s in cells})
        for i, a in enumerate(values):
            for b in values[i + 1 :]:
                xs = [s for s in cells if labels[axis_value(s.config, axis)] == a]
                ys = [s for s in cells if labels[axis_value(s.config, axis)] == b]
                for c in sorted({c for s in xs for c in s.points} & {c for s in ys for c in s.points}):
                    pairs = [(x, y) for x in xs for y in ys if c in x.points and c in y.points]
                    local = [(x, y) for x, y in pairs if _host(x) == _host(y)]
                    for x, y in local or pairs:
                        if _host(x) == _host(y):
                            px, py = x.points[c], y.points[c]
                            ranking = rank_pair(
                                px.values,
                                py.values,
                                seed=seed,
                                starts=(px.starts, py.starts),
                                floor=floor,
                                margin=margin,
                            )
                            if ranking.outcome == CANNOT_RANK:
                                ranking = replace(ranking, price=pair_price(px, py, ranking.ratio, floor, margin))
                        else:
                            ranking = rank_hosts(x, y, c, effects or hosteffect.HostEffects())
                        out.append(Matchup(x.checkpoint, c, a, b, ranking))
    return out


def pair_price(px: Point, py: Point, ratio: float, floor: nested.Nested | None, margin: float) -> verdicts.Price:
    """What deciding px against py costs: their starts, the group's noise floor (its A/A pairs) and the gap."""
    starts = min(max(len(px.starts), 1), max(len(py.starts), 1))
    windows = (len(px.values) + len(py.values)) / max(len(px.starts) + len(py.starts), 2)
    return verdicts.price(ratio, starts, verdicts.start_sd(floor, windows), margin)


def comparison_key(cell: dict[str, Any], axis: str = "backend") -> str:
    """What two cells must share to be ranked on `axis`: their config minus that axis and the schedule, and one kind
    of machine (the fingerprint and logged vLLM, not the host: hosts of one group differ by a measured effect)."""
    skip = axis_keys(axis) + SCHEDULE_FIELDS
    config = {k: v for k, v in cell.get("config", {}).items() if k not in skip}
    return json.dumps({"machine": comparable(cell), **config}, sort_keys=True, default=str)


def _host(s: CellSummary) -> str:
    return str(s.cell.get("host", ""))


def rank_hosts(x: CellSummary, y: CellSummary, c: int, effects: hosteffect.HostEffects) -> Ranking:
    """x against y at level c, measured on different hosts of one group: the ratio with the host effect divided
    out and its uncertainty added; CANNOT_RANK (with why) when the effect is unknown or too large."""
    a, b = x.points[c].values, y.points[c].values
    across = f"{_host(x)} vs {_host(y)}"
    ratio = _ratio(a, b)
    if len(a) < MIN_REPEATS or len(b) < MIN_REPEATS:
        return Ranking(CANNOT_RANK, ratio, f"fewer than {MIN_REPEATS} successful repeats", None, across)
    if min(a) <= 0 or min(b) <= 0:  # a ratio of logs needs values above 0 (goodput under SLOs can be 0)
        if (min(a) > 0 and max(b) <= 0) or (min(b) > 0 and max(a) <= 0):
            side = "a" if min(a) > 0 else "b"
            zero = _host(y) if side == "a" else _host(x)
            return Ranking(side, ratio, f"across hosts: the side on {zero} measured 0 in every window", None, across)
        return Ranking(CANNOT_RANK, ratio, "across hosts: a window measured 0, so there is no ratio to adjust", None,
                       across)  # fmt: skip
    effect, why = effects.across(_host(x), _host(y))
    if effect is None:
        return Ranking(CANNOT_RANK, ratio, f"across hosts, refused: {why}", None, across)
    adjusted, ci, widened = hosteffect.rank_across(a, b, effect)
    pct = f"{hosteffect.CONFIDENCE:.0%}"
    if ci[0] > 1 or ci[1] < 1:
        rule = f"across hosts, host effect divided out: {pct} interval excludes 1"
        return Ranking("a" if ci[0] > 1 else "b", adjusted, rule, ci, across, widened)
    rule = f"across hosts, host effect divided out: {pct} interval includes 1"
    return Ranking(CANNOT_RANK, adjusted, rule, ci, across, widened)


def _labels(group: Sequence[CellSummary], axis: str) -> dict[str, str]:
    """exact value → its words; the exact value itself wherever two values would read the same. Unnamed argument
    lists read as what differs between them: the options every value shares are left out."""
    labels = {axis_value(s.config, axis): value_label(s.config, axis) for s in group}
    if axis == "extra_args":
        labels |= _differing_args({axis_value(s.config, axis): s.config for s in group})
    return labels if len(set(labels.values())) == len(labels) else {v: v for v in labels}


def _differing_args(configs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """exact value → its unnamed extra_args without the options all values share ("--enforce-eager" against
    "without --enforce-eager", not the whole argv twice). An option is a flag with the values that follow it."""
    unnamed = {v: c for v, c in configs.items() if not c.get("extra_args_name")}
    if len(configs) < 2 or not unnamed:
        return {}
    options = {v: _options(c.get("extra_args") or []) for v, c in configs.items()}
    shared = set.intersection(*(set(o) for o in options.values()))
    out = {}
    for v in unnamed:
        own = [o for o in options[v] if o not in shared]
        if own:
            out[v] = " ".join(own)
        else:
            others = sorted({o for w, opts in options.items() if w != v for o in opts if o not in shared})
            out[v] = "without " + " ".join(others) if others else "none"
    return out


def _options(args: Sequence[Any]) -> list[str]:
    """["--a", "1", "--b"] → ["--a 1", "--b"]: each flag with the values that follow it, as one option."""
    out: list[str] = []
    for a in map(str, args):
        if a.startswith("-") or not out:
            out.append(a)
        else:
            out[-1] += " " + a
    return out


def _score(ms: Iterable[Matchup]) -> dict[tuple[str, str], list[Ranking]]:
    """(a, b) → rankings oriented so that outcome "a" means the first value won."""
    table: dict[tuple[str, str], list[Ranking]] = {}
    for m in ms:
        table.setdefault((m.a, m.b), []).append(m.ranking)
        table.setdefault((m.b, m.a), []).append(_flip(m.ranking))
    return table


def _flip(r: Ranking) -> Ranking:
    outcome = {"a": "b", "b": "a"}.get(r.outcome, r.outcome)
    ci = (1 / r.ci[1], 1 / r.ci[0]) if r.ci else None
    across = " vs ".join(reversed(r.across.split(" vs "))) if r.across else ""
    return Ranking(
        outcome, 1 / r.ratio if r.ratio else math.inf, r.rule, ci, across, r.widened, r.starts[::-1], r.price
    )


def dominant(candidates: Sequence[str], ms: Sequence[Matchup], same: dict[str, str] | None = None) -> str | None:
    """The candidate that beats every other at least once and loses to none; None if there is none. `same` maps
    an alias ("auto") to the candidate it is (what it loaded): neither is ranked against the other, and the
    alias never wins in its place."""
    same = same or {}
    table = _score(ms)
    for w in candidates:
        if w in same:
            continue
        others = [o for o in candidates if o != w and same.get(o) != w]
        if others and all(_beats(table.get((w, o), [])) for o in others):
            return w
    return None


def _beats(rankings: list[Ranking]) -> bool:
    return any(r.outcome == "a" for r in rankings) and not any(r.outcome == "b" for r in rankings)


def recommend(
    summaries: Sequence[CellSummary],
    *,
    seed: int = DEFAULT_SEED,
    metric: str = RANK_METRIC,
    calibration: Sequence[CellSummary] = (),
    margin: float = verdicts.DEFAULT_MARGIN,
) -> list[Recommendation]:
    """One recommendation per (hardware, quant format), in a stable order; hardware whose server logs gave
    different vLLM versions is one recommendation per version (never ranked together). `calibration`: cells of a
    recent `spark-agent calibrate`, used only to measure host effects. `margin`: the equivalence margin Δ."""
    groups: dict[tuple[str, str, str], list[CellSummary]] = {}
    for s in summaries:
        groups.setdefault((s.hardware, s.quant, logged_version(s.cell)), []).append(s)
    versions: dict[tuple[str, str], int] = {}
    for hw, q, _ in groups:
        versions[(hw, q)] = versions.get((hw, q), 0) + 1
    return _per_quant(groups, versions, seed, metric, calibration, margin) + _across_quants(
        summaries, seed, metric, calibration, margin
    )


def _across_quants(
    summaries: Sequence[CellSummary],
    seed: int,
    metric: str,
    calibration: Sequence[CellSummary],
    margin: float,
) -> list[Recommendation]:
    """Per hardware (and logged vLLM version) whose valid cells span several quant formats: which checkpoint to run,
    the only question, all else held equal (the backend too: `auto` against `auto`)."""
    groups: dict[tuple[str, str], list[CellSummary]] = {}
    for s in summaries:
        groups.setdefault((s.hardware, logged_version(s.cell)), []).append(s)
    out = []
    for (hw, v), group in sorted(groups.items()):
        quants = sorted({s.quant for s in group if s.rankable})
        if len(quants) < 2:
            continue
        several = len({ver for h, ver in groups if h == hw}) > 1
        label = hw if not several else f"{hw} · vLLM {v or '?'}"
        out.append(
            _recommend_group(  # the valid cells only: each format's own answer lists its failures
                label,
                " vs ".join(quants),
                [s for s in group if s.rankable],
                seed,
                metric,
                calibration,
                margin,
                axes=[CHECKPOINTS],
            )
        )
    return out


def _per_quant(
    groups: dict[tuple[str, str, str], list[CellSummary]],
    versions: dict[tuple[str, str], int],
    seed: int,
    metric: str,
    calibration: Sequence[CellSummary],
    margin: float,
) -> list[Recommendation]:
    return [
        _recommend_group(
            hw if versions[(hw, q)] == 1 else f"{hw} · vLLM {v or '?'}",
            q,
            groups[(hw, q, v)],
            seed,
            metric,
            calibration,
            margin,
        )
        for hw, q, v in sorted(groups)
    ]


def varying_axes(cells: Sequence[CellSummary]) -> list[str]:
    """The axes on which these cells do not all have the same value, in table order."""
    axes: list[str] = []
    for s in cells:
        axes += [a for a in axes_of(s.config) if a not in axes]
    return [a for a in axes if len({axis_value(s.config, a) for s in cells}) > 1]


def _recommend_group(
    hardware: str,
    quant: str,
    group: list[CellSummary],
    seed: int,
    metric: str,
    calibration: Sequence[CellSummary],
    margin: float = verdicts.DEFAULT_MARGIN,
    axes: list[str] | None = None,
) -> Recommendation:
    valid = [s for s in group if s.rankable]
    axes = axes or varying_axes(valid) or ["backend"]
    machines = {comparable(s.cell) for s in valid}
    # A cell with wrong outputs still ran what it asked for at the speed it ran: a host's speed on it is as real as on a
    # valid one (a reference cell whose backend turns out wrong still links its hosts).
    ran = valid + [s for s in group if s.verdict == WRONG_OUTPUT]
    effects = hosteffect.estimate(ran + [s for s in calibration if s.rankable and comparable(s.cell) in machines])
    unmeasured = measurable.gap([whole_cell(s) for s in valid], metric)
    if unmeasured is not None:  # zero or missing in every window: never ranked, and the report says why
        questions = [_unranked(axis, [a for a in axes if a != axis], valid, unmeasured.words()) for axis in axes]
    else:
        questions = [_question(axis, [a for a in axes if a != axis], valid, seed, effects, margin) for axis in axes]
    choice = {q.axis: q.winner for q in questions if q.winner}
    winner_cells = _matching(valid, choice, [q.axis for q in questions], effects) if choice else []
    reason = unmeasured.words() if unmeasured else _group_reason(questions, valid, metric)
    if choice and not winner_cells:  # per-axis winners never measured together: nothing measured to run
        reason = (
            f"the values that win each axis ({' · '.join(_choice_words(choice))}) were never measured together, "
            "so there is no measured configuration to run: add that combination to the matrix to measure it"
        )
    return Recommendation(
        hardware=hardware,
        quant=quant,
        questions=questions,
        winner=" · ".join(_choice_words(choice)) if winner_cells else None,
        reason=reason,
        choice=choice,
        winner_cells=winner_cells,
        invalid=[s for s in group if s.verdict == "invalid"],
        failed=[s for s in group if s.verdict == "failed"],
        effects=startup_effects(group),
        metric=metric,
        hosts=effects,
        noise=noise_floor(valid),
    )


def noise_floor(valid: Sequence[CellSummary]) -> nested.Nested | None:
    """Between starts and between windows, pooled over every point of a config started twice or more: each such
    config is an A/A pair (the same cell started again). None when no config has two starts."""
    points = [p.noise for s in valid for p in s.points.values() if len(p.starts) >= nested.MIN_STARTS]
    if not points:
        return None
    # A config's load levels share its starts' draws: S starts give S - 1 degrees of freedom however many levels
    # measured them (counting each level's would make the t quantile, and so every interval, too narrow).
    df = sum(max(len(p.starts) for p in s.points.values()) - 1 for s in valid if s.points)
    floor = nested.pooled(points)
    return replace(floor, between_df=min(floor.between_df, max(df, 1)))


def _choice_words(choice: dict[str, str]) -> list[str]:
    """ "uns-fast", "marlin", then "speculative=mtp": the checkpoint and backend read on their own."""
    return [v if axis in ("checkpoint", "backend", CHECKPOINTS) else f"{axis}={v}" for axis, v in choice.items()]


def _question(
    axis: str,
    held: list[str],
    valid: list[CellSummary],
    seed: int,
    effects: hosteffect.HostEffects,
    margin: float = verdicts.DEFAULT_MARGIN,
) -> Question:
    ms = matchups(valid, axis, seed=seed, effects=effects, margin=margin)
    labels = _labels(valid, axis)
    candidates = sorted({labels[axis_value(s.config, axis)] for s in valid})
    same = _auto_aliases(valid, candidates) if axis == "backend" else {}
    winner = dominant(candidates, ms, same)
    table = _score(ms)
    rivals = [o for o in candidates if o != winner and same.get(o) != winner]
    versus = [_loser(o, table.get((winner, o), [])) for o in rivals] if winner else []
    held_back = _unresolved(axis, winner, versus, valid) if winner else None
    context = _Context(axis, valid, margin, noise_floor(valid), _start_minutes(valid))
    if held_back is not None:
        verdict = _held_back(context, winner or "", versus, held_back)
    else:
        verdict = _decide(context, candidates, ms, same, versus)
    chosen = verdict.choice if verdict.decided or verdict.equivalents else None
    if verdict.kind == verdicts.EQUIVALENT and chosen:
        rivals = [o for o in candidates if o not in verdict.equivalents]
        versus = [_loser(o, table.get((chosen, o), [])) for o in rivals]
    levels = _per_level(context, candidates, ms, same)
    verdict = _by_level(verdict, levels)
    reason = _reason(axis, chosen, candidates, ms, versus) if verdict.kind == verdicts.FASTER else verdict.words()
    return Question(
        axis=axis,
        held=held,
        candidates=candidates,
        matchups=ms,
        winner=chosen,
        reason=reason,
        versus=versus if chosen else [],
        per_concurrency={c: v.headline() for c, v in levels.items()},
        same=same,
        unresolved=verdict.words() if held_back is not None else "",
        verdict=verdict,
        per_level=levels,
        quality=_quality(valid, axis) if axis in ("checkpoint", CHECKPOINTS) else {},
    )


def _quality(valid: Sequence[CellSummary], axis: str) -> dict[str, str]:
    """Each checkpoint's quality verdict beside its speed: from the correctness probe its cells answered (a cell
    that failed it is WRONG OUTPUT and not among these), or why it was not judged."""
    labels = _labels(valid, axis)
    seen: dict[str, set[str]] = {}
    for s in valid:
        c = s.cell.get("correctness") or {}
        if c.get("not_judged"):
            words = f"not judged: {c['not_judged']}"
        elif c.get("probed"):
            words = f"probe passed (score {float(c.get('score', 0.0)):.2f})"
        else:
            words = "not probed"
        seen.setdefault(labels[axis_value(s.config, axis)], set()).add(words)
    return {v: "; ".join(sorted(w)) for v, w in sorted(seen.items())}


@dataclass(frozen=True)
class _Context:
    """What every verdict of one question shares: its axis, cells, margin, noise floor and a start's minutes."""

    axis: str
    valid: list[CellSummary]
    margin: float
    floor: nested.Nested | None
    minutes: float | None


def _start_minutes(cells: Sequence[CellSummary]) -> float | None:
    """One server start's cell time, median over the cells' starts (None: the tree has no cell timings)."""
    elapsed = [float(st.get("elapsed_s") or 0.0) for s in cells for st in starts_of(s.cell)]
    elapsed = [e for e in elapsed if e > 0]
    return statistics.median(elapsed) / 60 if elapsed else None


def _decide(
    ctx: _Context, candidates: list[str], ms: Sequence[Matchup], same: dict[str, str], versus: list[Loser]
) -> verdicts.Verdict:
    """The verdict of one question over these matchups: faster, equivalent within the margin, undecided with the
    price of deciding it, or nothing to compare."""
    real = [c for c in candidates if c not in same]
    if len(real) < 2:
        aliases = tuple(a for a, t in same.items() if real and t == real[0])
        if aliases:  # "auto" loaded the only other value: one choice under two names, the default named
            return verdicts.Verdict(
                verdicts.NOTHING, aliases[0], (aliases[0], real[0]), "the default", margin=ctx.margin
            )
        return verdicts.Verdict(verdicts.NOTHING, real[0] if real else None, margin=ctx.margin)
    table = _score(ms)
    winner = dominant(candidates, ms, same)
    if winner is not None and versus:
        runner = min(versus, key=lambda v: v.ratio_median)
        cis = [r.ci for r in table.get((winner, runner.backend), []) if r.ci]
        ci = (min(c[0] for c in cis), max(c[1] for c in cis)) if cis else None
        return verdicts.Verdict(
            verdicts.FASTER, winner, pair=(winner, runner.backend), ratio=runner.ratio_median, ci=ci, margin=ctx.margin
        )
    if not ms:
        return verdicts.Verdict(
            verdicts.UNDECIDED,
            margin=ctx.margin,
            why=f"no two valid values of {ctx.axis} were measured on otherwise identical cells",
            price=None,
        )
    top = [c for c in real if not any(r.outcome == "b" for o in candidates for r in table.get((c, o), []))]
    equivalents = _equivalent_set(top, table, same)
    if equivalents:
        choice, why = _pick(ctx, equivalents + [a for a, t in same.items() if t in equivalents])
        beaten = [o for o in real if o not in equivalents]
        if all(_beats(table.get((same.get(choice, choice), o), [])) for o in beaten):
            shown = tuple([choice] + [e for e in equivalents if e != choice])
            return verdicts.Verdict(verdicts.EQUIVALENT, choice, shown, why, margin=ctx.margin)
    return _open(ctx, top or real, table)


def _by_level(verdict: verdicts.Verdict, levels: dict[int, verdicts.Verdict]) -> verdicts.Verdict:
    """A question undecided over all levels whose every level is decided, differently: a crossover, so the answer is
    per level ("c=1: nvfp4 1.09×; c=32: fp8 1.72×"), which more starts would not change."""
    if verdict.kind != verdicts.UNDECIDED or len(levels) < 2 or not all(v.decided for v in levels.values()):
        return verdict
    if len({(v.kind, v.choice) for v in levels.values()}) < 2:
        return verdict
    words = tuple((c, _level_words(v)) for c, v in levels.items())
    return verdicts.Verdict(verdicts.BY_LEVEL, margin=verdict.margin, minutes=verdict.minutes, levels=words)


def _level_words(v: verdicts.Verdict) -> str:
    if v.kind == verdicts.FASTER:
        if v.ratio and math.isinf(v.ratio):
            return f"{v.choice} ({v.pair[1]} measured 0)"
        return f"{v.choice} ({verdicts.times(v.ratio)} over {v.pair[1]})" if v.ratio else str(v.choice)
    return v.headline()


def _equivalent_set(top: list[str], table: dict[tuple[str, str], list[Ranking]], same: dict[str, str]) -> list[str]:
    """The values that lose to none, when there are two or more and every pair of them was measured and found
    equivalent at every point they share; [] otherwise."""
    if len(top) < 2:
        return []
    for i, x in enumerate(top):
        for y in top[i + 1 :]:
            rankings = table.get((x, y), [])
            if not rankings or any(r.outcome != EQUIVALENT for r in rankings):
                return []
    return top


def _pick(ctx: _Context, equivalents: list[str]) -> tuple[str, str]:
    """Among equivalent values, the one to run: the default if it is one of them, else the one with the fewest
    non-default settings (then the shortest, then by name)."""
    labels = _labels(ctx.valid, ctx.axis)
    changed: dict[str, int] = {}
    for s in ctx.valid:
        label = labels[axis_value(s.config, ctx.axis)]
        changed[label] = _non_defaults(s.config, ctx.axis)
    ranked = sorted(equivalents, key=lambda v: (changed.get(v, 0), len(v), v))
    best = ranked[0]
    if changed.get(best, 1) == 0:
        return best, "the default"
    return best, "the fewest non-default settings"


def _non_defaults(config: dict[str, Any], axis: str) -> int:
    """How many settings a value of `axis` changes from vLLM's defaults (an extra argument counts one each)."""
    count = 0
    for key in axis_keys(axis):
        if key in ("model", "extra_args_name"):  # follow from the checkpoint / only name the arguments
            continue
        value, default = config.get(key, _DEFAULTS.get(key)), _DEFAULTS.get(key)
        if isinstance(value, list):
            count += len([v for v in value if str(v).startswith("-")]) or len(value)
        elif value not in (default, "", None, "auto"):
            count += 1
    return count


def _open(ctx: _Context, top: list[str], table: dict[tuple[str, str], list[Ranking]]) -> verdicts.Verdict:
    """Undecided: the open pair that costs the most to decide (among the values that lose to none), its gap and
    that price."""
    worst: tuple[tuple[float, float], str, str, Ranking] | None = None
    for (x, y), rankings in table.items():
        if x not in top:
            continue
        for r in rankings:
            if r.outcome != CANNOT_RANK or not r.ratio or not math.isfinite(r.ratio) or r.ratio < 1:
                continue
            need = r.price.need if r.price and r.price.need is not None else verdicts.MAX_STARTS + 1
            key = (float(need), -abs(math.log(r.ratio)))
            if worst is None or key > worst[0]:
                worst = (key, x, y, r)
    if worst is None:
        why = f"no {ctx.axis} beats every other outside the noise (the order changes with load)"
        return verdicts.Verdict(verdicts.UNDECIDED, margin=ctx.margin, why=why, minutes=ctx.minutes)
    _, x, y, r = worst
    price: verdicts.Price | None = r.price
    why = f"across hosts ({r.across})" if r.across else ""
    if r.rule.startswith("fewer than"):  # no noise to judge by: more windows, not more starts, are the next step
        why, price = f"{r.rule}: repeats = {MIN_REPEATS} or more in [matrix] measure its noise", None
    elif "refused" in r.rule:  # across hosts without a known host effect: the reason says what would link them
        why, price = r.rule, None
    elif price is None:
        price = verdicts.price(r.ratio, min(r.starts), verdicts.start_sd(ctx.floor, 3.0), ctx.margin)
    return verdicts.Verdict(
        verdicts.UNDECIDED,
        pair=(x, y),
        ratio=r.ratio,
        ci=r.ci,
        price=price,
        minutes=ctx.minutes,
        margin=ctx.margin,
        why=why,
    )


@dataclass(frozen=True)
class _Unresolved:
    """Why a leader under RESOLVE_MARGIN is not named yet: too few starts, or starts not interleaved in time."""

    why: str
    apart: bool  # enough starts, but A A B B: the price is that many again, interleaved


def _held_back(ctx: _Context, winner: str, versus: list[Loser], held: _Unresolved) -> verdicts.Verdict:
    """Undecided: the leader wins every point but by under RESOLVE_MARGIN on too few (or not interleaved) starts."""
    runner = min(versus, key=lambda v: v.ratio_median)
    starts = min(
        (len(starts_of(s.cell)) for s in ctx.valid if value_label(s.config, ctx.axis) in (winner, runner.backend)),
        default=1,
    )
    sd = verdicts.start_sd(ctx.floor, 3.0)
    price = verdicts.price(runner.ratio_median, starts, sd, ctx.margin)
    if held.apart and price.need is not None and price.need <= starts:
        price = verdicts.Price(starts, price.mde, starts + nested.MIN_STARTS, price.noise)  # again, interleaved
    return verdicts.Verdict(
        verdicts.UNDECIDED,
        pair=(winner, runner.backend),
        ratio=runner.ratio_median,
        price=price,
        minutes=ctx.minutes,
        margin=ctx.margin,
        why=held.why,
    )


def _per_level(
    ctx: _Context, candidates: list[str], ms: Sequence[Matchup], same: dict[str, str]
) -> dict[int, verdicts.Verdict]:
    """Each load level's own verdict over the matchups measured there."""
    out = {}
    for c in sorted({m.concurrency for m in ms}):
        at_c = [m for m in ms if m.concurrency == c]
        present = sorted({m.a for m in at_c} | {m.b for m in at_c})
        here = [x for x in candidates if x in present]
        winner = dominant(here, at_c, same)
        table = _score(at_c)
        rivals = [o for o in here if o != winner and same.get(o) != winner]
        versus = [_loser(o, table.get((winner, o), [])) for o in rivals] if winner else []
        out[c] = _decide(ctx, here, at_c, same, versus)
    return out


def _unresolved(axis: str, winner: str, versus: list[Loser], valid: list[CellSummary]) -> _Unresolved | None:
    """Why the winner cannot be named yet, or None: its margin over the runner-up (the closest loser, median ratio)
    is under RESOLVE_MARGIN and the two do not each have MIN_STARTS server starts, interleaved in time wherever
    they ran on one host. With one start the between-start noise is unknown, and a real machine's (compile and
    autotune outcomes, memory layout) can pose as a difference of that size."""
    if not versus:
        return None
    runner = min(versus, key=lambda v: v.ratio_median)
    margin = runner.ratio_median - 1
    if not margin < RESOLVE_MARGIN:
        return None
    labels = _labels(valid, axis)
    mine = {v: [s for s in valid if labels[axis_value(s.config, axis)] == v] for v in (winner, runner.backend)}
    local = [
        (x, y)
        for x in mine[winner]
        for y in mine[runner.backend]
        if _host(x) == _host(y) and comparison_key(x.cell, axis) == comparison_key(y.cell, axis)
    ]
    # Where the two were measured side by side on one host, that comparison is the one made (a cell of either on
    # another host, a fleet's reference cell above all, only measures that host's speed): its starts count.
    paired = [s for pair in local for s in pair]
    cells = list({id(s): s for s in paired}.values()) if local else mine[winner] + mine[runner.backend]
    few = [s for s in cells if len(starts_of(s.cell)) < nested.MIN_STARTS]
    apart = [
        (x, y)
        for x, y in local
        if not nested.interleaved(*([s["started_at"] for s in starts_of(z.cell)] for z in (x, y)))
    ]
    if not few and not apart:
        return None
    if few:
        why = f"under {RESOLVE_MARGIN:.0%} on {len(few)} of {len(cells)} cells with fewer than {nested.MIN_STARTS} server starts"
        return _Unresolved(why, apart=False)
    why = f"under {RESOLVE_MARGIN:.0%}, their server starts not interleaved in time (A A B B lets drift pose as a difference)"
    return _Unresolved(why, apart=True)


def _unranked(axis: str, held: list[str], valid: list[CellSummary], why: str) -> Question:
    """An axis left unranked because the metric was not measured anywhere: its values, no matchups, why."""
    labels = _labels(valid, axis)
    candidates = sorted({labels[axis_value(s.config, axis)] for s in valid})
    return Question(
        axis, held, candidates, [], None, why, [], {}, verdict=verdicts.Verdict(verdicts.UNDECIDED, why=why)
    )


def _auto_aliases(valid: list[CellSummary], candidates: list[str]) -> dict[str, str]:
    """ "auto" → the MoE backend its cells attest they loaded, when that backend is itself a candidate: then
    auto and it are one choice, never ranked against each other."""
    loaded = {
        str(s.cell.get("attestation", {}).get("moe_backend", "")).lower() for s in valid if s.backend == "auto"
    } - {""}
    if "auto" in candidates and len(loaded) == 1 and (target := next(iter(loaded))) in candidates and target != "auto":
        return {"auto": target}
    return {}


def _loser(value: str, rankings: list[Ranking]) -> Loser:
    return Loser(
        backend=value,
        beaten_at=sum(r.outcome == "a" for r in rankings),
        lost_at=sum(r.outcome == "b" for r in rankings),
        cannot_rank_at=sum(r.outcome == CANNOT_RANK for r in rankings),
        ratios=tuple(r.ratio for r in rankings),
        equivalent_at=sum(r.outcome == EQUIVALENT for r in rankings),
    )


def _reason(axis: str, winner: str | None, candidates: list[str], ms: list[Matchup], versus: list[Loser]) -> str:
    if not candidates:
        return "no valid cell: nothing to rank"
    if len(candidates) == 1:
        return f"only one valid {axis} ({candidates[0]}): nothing to compare it with"
    if not ms:
        return f"no two valid values of {axis} were measured on otherwise identical cells"
    if winner is None:
        return f"no {axis} beats every other outside the noise (ranges overlap, or the order changes with load)"
    won = sum(v.beaten_at for v in versus)
    total = sum(v.beaten_at + v.lost_at + v.cannot_rank_at for v in versus)
    return f"{winner} wins {won} of {total} head-to-head points outside the noise and loses none"


def _group_reason(questions: list[Question], valid: list[CellSummary], metric: str) -> str:
    if len(questions) == 1:
        return questions[0].reason
    return "; ".join(f"{q.axis}: {q.reason}" for q in questions)


def _matching(
    valid: list[CellSummary], choice: dict[str, str], axes: list[str], effects: hosteffect.HostEffects | None = None
) -> list[CellSummary]:
    """The valid cells with the chosen value on every decided axis: one per combination of the undecided ones.
    Measured on several hosts, the one given is from a host not excluded from the ranking, and in full rather than
    a reference cell's one level."""
    labels = {axis: _labels(valid, axis) for axis in choice}
    picked = [s for s in valid if all(labels[a][axis_value(s.config, a)] == v for a, v in choice.items())]
    odd = {h for h, e in (effects.effects if effects else {}).items() if e.outlier}
    most = max((len(s.points) for s in picked), default=0)
    picked.sort(key=lambda s: (_host(s) in odd, len(s.points) < most))
    best: dict[tuple[str, ...], CellSummary] = {}
    for s in picked:
        best.setdefault(tuple(axis_value(s.config, a) for a in axes if a not in choice), s)
    return [best[k] for k in sorted(best)]


def startup_effects(group: Sequence[CellSummary]) -> list[str]:
    """Plain lines: on an axis other than the backend (whose failures are listed on their own), a value whose
    server failed to start, died or was INVALID where another value ran, everything else held equal. This is how
    an env rule shows its effect: the cell without it fails, the cell with it runs."""
    axes = [a for a in varying_axes(group) if a != "backend"]
    group = distinct_cells(group)  # a cell, not each of its load slices, started or failed to
    lines = []
    for axis in axes:
        labels = _labels(group, axis)
        by_key: dict[str, list[CellSummary]] = {}
        for s in group:
            by_key.setdefault(pairing_key(whole_cell(s), axis), []).append(s)
        for key in sorted(by_key):
            ran = sorted({labels[axis_value(s.config, axis)] for s in by_key[key] if s.rankable})
            for s in by_key[key]:
                if s.rankable or not ran:
                    continue
                what = {"invalid": "was INVALID", WRONG_OUTPUT: "gave WRONG OUTPUT"}.get(s.verdict) or _failure_words(
                    s.cell
                )
                held = ", ".join(f"{a} {value_label(s.config, a)}" for a in ["checkpoint", "backend"] if a != axis)
                lines.append(
                    f"{axis}: with {labels[axis_value(s.config, axis)]} the server {what}, where "
                    f"{' and '.join(ran)} ran ({held} held equal, on {s.cell.get('host', '?')})"
                )
    return lines


def _failure_words(cell: dict[str, Any]) -> str:
    cls = cell.get("failure_class") or "other"
    return f"died mid-cell ({cls})" if cls == "engine_died" else f"failed to start ({cls})"


def with_variants(summaries: Sequence[CellSummary]) -> list[CellSummary]:
    """The summaries with `variant` set: their values on the axes (other than backend and checkpoint, which every
    table shows) that vary across the report, so two cells that differ only there read differently."""
    axes = [a for a in varying_axes(summaries) if a not in ("backend", "checkpoint")]
    labels = {a: _labels(summaries, a) for a in axes}
    return [replace(s, variant=" ".join(f"{a}={labels[a][axis_value(s.config, a)]}" for a in axes)) for s in summaries]
