"""The judgement of a results tree, made once: its points, who wins and why (or why not), the noise floors, the host
effects, what is WRONG OUTPUT, what hosts disagree on, what went unmeasured and what went wrong, counted.

Every renderer (report.md and report.html, the end-of-sweep table, `watch`'s page) reads one Judgement and decides
nothing: the decisions are agent.judging.stats' (ranking), hosteffect's, correctness', replicas' and measurable's,
taken here once. Pure: cell tables in (agent.results.tree.load_cells or a store selection), a Judgement out; the
one reading of files is `lost_cells`, the lost.toml markers a tree keeps beside its cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.judging import bandwidth, measurable, replicas, stats, summary, verdicts
from agent.judging import telemetry as tj
from agent.judging.stats import Recommendation
from agent.judging.summary import (
    GOODPUT,
    CellSummary,
    Point,
    distinct_cells,
    hardware_label,
    is_checks_only,
    whole_cell,
)
from agent.results.tree import CELL_FILE, LOST_FILE

VERDICTS = ("valid", "invalid", "failed", summary.WRONG_OUTPUT)
MEASURED_ON = ": measured on "  # a lost cell another host of its group measured (requeued): not measured again
# What the medians table leaves empty when no request finishes inside a window: said, with what would measure it.
UNMEASURED = (("median_tpot_ms", "TPOT"), ("median_e2el_ms", "end-to-end latency"), (GOODPUT, "goodput"))


@dataclass(frozen=True)
class Provenance:
    """Where the numbers came from and how many there are: what the report's Provenance and Problems say."""

    sweeps: tuple[str, ...]
    images: tuple[str, ...]
    vllm_versions: tuple[str, ...]  # from the server logs
    hosts: tuple[tuple[str, str, str], ...]  # (host, hardware, fingerprint)
    first_started: str
    last_finished: str
    wall_s: float | None
    cell_time_s: float
    cells: int
    server_starts: int
    verdicts: dict[str, int]  # each of VERDICTS → cells
    measurements: int
    failed_runs: int
    unstable_points: int


@dataclass(frozen=True)
class Ceiling:
    """Single-stream decode (c=1) of one (chip, backend) against its bandwidth ceiling (judging/bandwidth.py)."""

    arch: str
    backend: str
    gbs: float = 0.0
    source: str = ""
    notes: bandwidth.CeilingNotes | None = None  # None: no ceiling known for this chip (why_none)
    why_none: str = ""


@dataclass(frozen=True)
class Judgement:
    """A results tree judged: every renderer reads this and nothing else of judging's decisions."""

    summaries: tuple[CellSummary, ...]  # the points of every cell (and load slice), in the report's order
    recommendations: tuple[Recommendation, ...]  # per (hardware, quant): rankings, winner, noise floor, host effects
    provenance: Provenance
    threshold: float  # spread above which a point is unstable
    seed: int  # of the bootstrap
    rank_by: str  # a key of stats.RANK_BY
    replicas: tuple[replicas.ReplicaPoint, ...]  # cells measured on several hosts; "hosts disagree" flagged
    ceilings: tuple[Ceiling, ...]  # per (chip, backend) with checkpoint bytes per token: c=1 against the ceiling
    unmeasured: tuple[str, ...]  # plain sentences: a metric left empty, why, and what would measure it
    what_to_run: tuple[str, ...]  # plain lines: per (hardware, quant) the answer and its reason, then unmeasured
    throttled: int  # points with throttled windows
    not_gpu_bound: int  # points with windows under telemetry.GPU_BOUND_PCT GPU utilisation
    jit_dropped: int  # measured windows left out for a JIT compile during them
    lost: tuple[str, ...] = ()  # "sweep/host/cell" of cells started without results (lost_cells)
    tune: tuple[dict[str, Any], ...] = ()  # results/<sweep>/tune.toml records
    calibration: str = ""  # the calibration whose host effects were used too, in words ("" = none)
    checks_only: tuple[dict[str, Any], ...] = ()  # eager starts that only ran the correctness checks: never ranked
    equivalence: float = verdicts.DEFAULT_MARGIN  # Δ: values within ±Δ of each other are one choice
    slos: tuple[str, ...] = ()  # every SLO goodput was counted under, in any cell ([load] goodput); () = none set

    @property
    def once(self) -> list[CellSummary]:
        """One summary per cell, whatever its load slices: what is said once per cell."""
        return distinct_cells(self.summaries)

    @property
    def moved(self) -> list[str]:
        """Lost cells that another host of their group measured instead."""
        return [x for x in self.lost if MEASURED_ON in x]


def judge(
    cells: Sequence[dict[str, Any]],
    *,
    threshold: float = summary.DEFAULT_THRESHOLD,
    seed: int = stats.DEFAULT_SEED,
    rank_by: str = "throughput",
    calibration: Sequence[dict[str, Any]] = (),
    lost: Sequence[str] = (),
    tune: Sequence[dict[str, Any]] = (),
    calibration_words: str = "",
    equivalence: float = verdicts.DEFAULT_MARGIN,
) -> Judgement:
    """`calibration`: cells of a recent `spark-agent calibrate` (host effects only, never ranked); `lost` and `tune`:
    what the tree keeps beside its cells (a store selection has neither); `equivalence`: the margin Δ inside which
    two values are one choice (the spec's [judge] equivalence)."""
    metric = stats.RANK_BY[rank_by][0]
    summaries = stats.with_variants(sorted(summary.summarize_cells(cells, threshold, metric), key=_cell_order))
    calibrated = summary.summarize_cells(calibration, threshold, metric)
    recs = stats.recommend(summaries, seed=seed, metric=metric, calibration=calibrated, margin=equivalence)
    gaps = unmeasured(summaries)
    return Judgement(
        summaries=tuple(summaries),
        recommendations=tuple(recs),
        provenance=provenance(summaries),
        threshold=threshold,
        seed=seed,
        rank_by=rank_by,
        replicas=tuple(replicas.replica_points(summaries, threshold)),
        ceilings=tuple(ceilings(summaries)),
        unmeasured=tuple(gaps),
        what_to_run=tuple([answer(rec) for rec in recs] + gaps),
        throttled=sum(len(list(tj.throttled_points(s.cell))) for s in summaries),
        not_gpu_bound=sum(bool(t.not_gpu_bound) for s in summaries for t in tj.cell_telemetry(s.cell).values()),
        jit_dropped=sum(len(p.jit_dropped) for s in summaries for p in s.points.values()),
        lost=tuple(lost),
        tune=tuple(tune),
        slos=tuple(sorted({x for s in summaries for x in summary.slos(s)})),
        calibration=calibration_words,
        checks_only=tuple(sorted((c for c in cells if is_checks_only(c)), key=_check_order)),
        equivalence=equivalence,
    )


def _check_order(cell: dict[str, Any]) -> tuple[str, ...]:
    return (str(cell.get("host", "")), str(cell.get("config", {}).get("checkpoint", "")), str(cell.get("cell_id", "")))


def _cell_order(s: CellSummary) -> tuple:
    return (s.hardware, s.quant, s.checkpoint, s.cell.get("host", ""), s.backend_text, s.cell.get("cell_id", ""))


def provenance(summaries: Sequence[CellSummary]) -> Provenance:
    once = distinct_cells(summaries)  # a cell with load axes has a summary per (rate, depth): counted once
    cells = [s.cell for s in once]
    runs = [st for c in cells for st in (c.get("starts") or [c])]  # every server start (summary.merge_starts)
    started = sorted(st["started_at"] for st in runs if st.get("started_at"))
    finished = sorted(st["finished_at"] for st in runs if st.get("finished_at"))
    return Provenance(
        sweeps=tuple(sorted({c.get("sweep", "") for c in cells})),
        images=tuple(sorted({c.get("config", {}).get("image", "") for c in cells} - {""})),
        vllm_versions=tuple(sorted({c.get("attestation", {}).get("vllm_version", "") for c in cells} - {""})),
        hosts=tuple(
            sorted({(c.get("host", ""), hardware_label(c), c.get("facts", {}).get("fingerprint", "")) for c in cells})
        ),
        first_started=started[0] if started else "",
        last_finished=finished[-1] if finished else "",
        wall_s=_span_s(started[0], finished[-1]) if started and finished else None,
        cell_time_s=sum(float(st.get("elapsed_s", 0.0)) for st in runs),
        cells=len(cells),
        server_starts=len(runs),
        verdicts={v: sum(s.verdict == v for s in once) for v in VERDICTS},
        measurements=sum(len(s.cell.get("runs", [])) for s in summaries),
        failed_runs=sum(len(s.failed_runs) for s in summaries),
        unstable_points=sum(len(s.unstable_points) for s in summaries),
    )


def _span_s(start: str, end: str) -> float | None:
    try:
        a = datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (b - a).total_seconds()


# ---------------------------------------------------------------- the answer in words


def answer(rec: Recommendation) -> str:
    """One plain line per (hardware, quant): what a person reads first on the terminal."""
    verdict, reason = headline(rec)
    return f"{rec.hardware} · {rec.quant}: {verdict} ({reason})"


def headline(rec: Recommendation) -> tuple[str, str]:
    """("run marlin; checkpoint undecided", why) or ("undecided", gap and price): the answer, then its reason
    without the verdict word repeated."""
    undecided = undecided_text(rec)
    if rec.winner:
        return f"run {rec.winner}" + (f"; {undecided}" if undecided else ""), rec.reason
    verdict = nothing_to_run(rec)
    return verdict, rec.reason.removeprefix(f"{verdict}: ")


def undecided_text(rec: Recommendation) -> str:
    """ "checkpoint undecided": the axes still open (each question's reason says its gap and price)."""
    return ", ".join(f"{q.axis} {verdicts.UNDECIDED}" for q in rec.undecided)


def undecided_word(rec: Recommendation) -> str:
    """The headline without a winner: "nothing to compare" (one configuration) or "undecided"."""
    kinds = {q.verdict.kind for q in rec.questions}
    if kinds and kinds <= {verdicts.NOTHING}:
        return verdicts.NOTHING
    if verdicts.BY_LEVEL in kinds and verdicts.UNDECIDED not in kinds:
        return verdicts.BY_LEVEL
    return verdicts.UNDECIDED


def nothing_to_run(rec: Recommendation) -> str:
    """The headline without a winner: the axes were decided but their choices never ran together, or undecided."""
    return "no measured configuration to run" if rec.choice else undecided_word(rec)


def question_rows(rec: Recommendation) -> list[dict[str, Any]]:
    """Every question of a recommendation as plain data (report's verdicts.json, `export --verdicts`): per axis, and
    per axis and load level, its verdict kind, choice, equivalents, pair, ratio, interval and price."""
    rows = []
    for q in rec.questions:
        for level, v in [(None, q.verdict), *q.per_level.items()]:
            p = v.price
            rows.append(
                {
                    "hardware": rec.hardware,
                    "quant": rec.quant,
                    "axis": q.axis,
                    "concurrency": level,
                    "verdict": v.kind,
                    "words": v.words() if level is not None or q.verdict.kind != verdicts.FASTER else q.reason,
                    "choice": v.choice,
                    "equivalents": list(v.equivalents),
                    "margin": v.margin,
                    "pair": [x for x in v.pair if x],
                    "ratio": v.ratio,
                    "interval": list(v.ci) if v.ci else None,
                    "starts": p.starts if p else None,
                    "detectable_effect": p.mde if p and p.mde is not None and p.mde != float("inf") else None,
                    "starts_needed": p.need if p else None,
                    "more_starts_each": p.more if p else None,
                    "minutes_per_start": v.minutes,
                }
            )
    return rows


# ---------------------------------------------------------------- the bandwidth ceiling


def ceilings(summaries: Sequence[CellSummary]) -> list[Ceiling]:
    """Single-stream decode (c=1) as % of the bandwidth ceiling, for cells that carry
    checkpoint_info.bytes_per_token; and whether bytes explain the differences between checkpoints
    on the same backend (agent.judging.bandwidth)."""
    groups: dict[tuple[str, str], list[CellSummary]] = {}
    for s in summaries:
        if s.rankable and _c1(s) and s.cell.get("checkpoint_info", {}).get("bytes_per_token"):
            groups.setdefault((_arch(s.cell), s.backend), []).append(s)
    out = []
    for (arch, backend), cells in sorted(groups.items()):
        try:
            gbs, source = bandwidth.bandwidth_for(arch)
        except UserError as exc:
            out.append(Ceiling(arch, backend, why_none=exc.message))
            continue
        notes = bandwidth.ceiling_notes([_ceiling_point(s) for s in cells], gbs, source)
        out.append(Ceiling(arch, backend, gbs, source, notes))
    return out


def _c1(s: CellSummary) -> Point | None:
    p = s.points.get(1)
    return p if p is not None and p.throughput is not None else None


def _arch(cell: dict[str, Any]) -> str:
    facts = cell.get("facts", {})
    return facts.get("arch") or facts.get("gpu_name") or "unknown"


def _ceiling_point(s: CellSummary) -> bandwidth.Point:
    p = _c1(s)
    assert p is not None and p.throughput is not None  # ceilings only passes cells with a c=1 throughput
    medians = {"median_tpot_ms": p.tpot.median if p.tpot else 0.0, "output_throughput": p.throughput.median}
    return bandwidth.Point(
        label=s.checkpoint,
        bytes_per_token=int(s.cell["checkpoint_info"]["bytes_per_token"]),
        tok_s=bandwidth.single_stream_tok_s(medians),
        speculative=bool(s.config.get("speculative")),
    )


# ---------------------------------------------------------------- what was not measured, what was lost


def unmeasured(summaries: Sequence[CellSummary]) -> list[str]:
    """Plain sentences: each metric left empty (zero or missing in every window, or at some points), why, and the
    window length or SLO that would measure it (judging/measurable.py). [] when everything was measured."""
    cells = [whole_cell(s) for s in distinct_cells(summaries) if s.points]
    found: dict[tuple[str, str, str, bool], list[str]] = {}  # (where, why, fix, zero) -> the metrics it leaves empty
    for key, words in UNMEASURED:
        if not any(key in r for c in cells for r in c.get("runs", [])):
            continue  # a tree from before the key was recorded: nothing to say about it
        everywhere = measurable.gap(cells, key)
        if everywhere is not None:
            found.setdefault(("", everywhere.why, everywhere.fix, everywhere.zero), []).append(words)
            continue
        for cell, level, g in measurable.gaps_by_point(cells, key):
            config = cell.get("config", {})
            where = f"{cell.get('host', '?')}/{stats.value_label(config, 'checkpoint')}/{stats.value_label(config, 'backend')} c={level}"
            found.setdefault((where, g.why, g.fix, g.zero), []).append(words)
    return [
        f"{'Measured 0' if zero else 'Not measured'}{' at ' + where if where else ''}: {_and(metrics)} ({why}); {fix}."
        for (where, why, fix, zero), metrics in found.items()
    ]


def _and(words: Sequence[str]) -> str:
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def lost_cells(results_dir: Path) -> list[str]:
    """Every lost.toml below a tree, as lost_text says it."""
    return [lost_text(results_dir, p) for p in sorted(results_dir.rglob(LOST_FILE))]


def lost_text(results_dir: Path, lost: Path) -> str:
    """ "host/cell" of a lost cell, and where it was measured instead when another host has it (requeued)."""
    where = str(lost.parent.relative_to(results_dir))
    sweep = lost.parent.parent.parent  # <sweep>/<host>/<cell>/lost.toml
    others = sorted(p.parent.parent.name for p in sweep.glob(f"*/{lost.parent.name}/{CELL_FILE}"))
    return f"{where}{MEASURED_ON}{', '.join(others)} instead" if others else where
