"""One configuration over time and across images: the answer to "did image B regress this config against A?".

The query reads typed, indexed columns only (no JSON), so it stays fast on millions of windows
(bench/store_bench.py). Each history row is one measured cell at one concurrency: median output tok/s over its
successful repeats. A row is marked a regression when it is slower than the previous valid row of the same config,
host and concurrency measured on another image, beyond the noise (agent.judging.stats.rank_pair, the rule reports
and compare use); a difference inside the noise is "cannot rank", never a regression.
"""

from __future__ import annotations

import fnmatch
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from agent.judging import stats, summary
from agent.planning.settings import ServerSettings, flat_names
from agent.store import readback
from agent.store.schema import cells, hosts, measurements, sweeps
from agent.store.select import CHUNK, Selection, joined, where


@dataclass
class HistoryRow:
    config_key: str
    checkpoint: str
    backend: str
    host: str
    concurrency: int
    sweep: str
    image: str
    vllm_version: str
    started_at: str
    verdict: str
    values: tuple[float, ...]  # output tok/s of the successful repeats
    failed: int
    change: str = ""  # "regression" / "improvement" / "cannot rank" against the previous image ("" = first)
    ratio: float = math.nan  # median / previous image's median
    point: str = ""  # the load point, from the window's name: c008, or q2-c008-d8192 in a cell with load axes
    cell_pk: int = 0
    sweep_started: str = ""  # with sweep and results_root: the run of the sweep this row is from
    results_root: str = ""
    settings: dict[str, str] = field(default_factory=dict)  # its value on each axis of AXES, in words (mtp, off)
    variant: str = ""  # the axes that differ among the rows shown: "speculative=mtp"
    change_point: str = ""  # this row starts a new level of its series (judging/changepoint.py): "9.8% slower ..."

    @property
    def median(self) -> float | None:
        st = summary.describe(self.values)
        return st.median if st else None

    @property
    def spread(self) -> float | None:
        """None for fewer than two repeats: a spread of one value is undefined, not 0."""
        st = summary.describe(self.values)
        return st.spread if st and len(self.values) > 1 else None

    @property
    def run(self) -> str:
        """The sweep run in words: "quick 2026-12-01T10:00:00" (one name may have several runs, each its own)."""
        return f"{self.sweep} {self.sweep_started[:19]}".strip()

    @property
    def config(self) -> str:
        return f"{self.checkpoint} / {self.backend}" + (f" {self.variant}" if self.variant else "")


# The [config] axes beyond checkpoint and backend a row can differ on (the image is what history runs across): each
# is in the label when it differs among the rows, and a filter (speculative=off).
AXES = (*[k for k in flat_names(ServerSettings) if k not in stats.HELD_KEYS], "env_variant")


def split_terms(args: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The command line's terms: the store's (select.parse) and the axis filters (axis -> wanted values)."""
    store: list[str] = []
    axes: dict[str, list[str]] = {}
    for arg in args:
        kept = []
        for term in arg.split(","):
            key, eq, value = term.partition("=")
            if eq and key.strip() in AXES:
                axes.setdefault(key.strip(), []).append(value.strip())
            else:
                kept.append(term)
        if kept:
            store.append(",".join(kept))
    return store, axes


def query(
    engine: sa.Engine,
    selection: Selection,
    *,
    seed: int = stats.DEFAULT_SEED,
    axes: dict[str, list[str]] | None = None,
) -> list[HistoryRow]:
    """The rows of the selection, each labelled with the axes that differ among them; `axes` (axis -> values, `*`
    matches anything) keeps the rows whose value on each axis is one of those given."""
    q = (
        sa.select(
            cells.c.id,
            cells.c.config_key,
            cells.c.checkpoint,
            cells.c.backend,
            hosts.c.name.label("host"),
            sweeps.c.name.label("sweep"),
            sweeps.c.started.label("sweep_started"),
            sweeps.c.results_root,
            cells.c.image,
            cells.c.vllm_version,
            cells.c.started_at,
            cells.c.verdict,
            measurements.c.id.label("window_pk"),
            measurements.c.concurrency,
            measurements.c.window,
            measurements.c.ok,
            measurements.c.output_throughput,
        )
        .select_from(joined().join(measurements, measurements.c.cell_pk == cells.c.id))
        .where(*where(selection))
    )
    if selection.concurrency:
        q = q.where(measurements.c.concurrency.in_(selection.concurrency))
    groups: dict[tuple[int, str], HistoryRow] = {}
    with engine.connect() as conn, readback.reading("cells/measurements"):
        for r in conn.execute(q):
            _check(r)
            point = r.window.rsplit("-r", 1)[0]  # a cell's windows at one load point, whatever the repeat
            row = groups.get((r.id, point))
            if row is None:
                row = groups[(r.id, point)] = HistoryRow(
                    r.config_key, r.checkpoint, r.backend, r.host, r.concurrency, r.sweep, r.image,
                    r.vllm_version, r.started_at, r.verdict, (), 0, point=point, cell_pk=r.id,
                    sweep_started=r.sweep_started, results_root=r.results_root,
                )  # fmt: skip
            if r.ok:
                row.values += (float(r.output_throughput),)
            else:
                row.failed += 1
    found = _with_settings(engine, list(groups.values()), axes or {})
    rows = sorted(found, key=lambda h: (h.config, h.config_key, h.host, h.concurrency, h.point, h.started_at))
    mark_changes(rows, seed=seed)
    mark_change_points(rows)
    return rows


def _check(r: Any) -> None:
    """A history row's typed columns, as the store holds them (readback.py: whoever writes the store is not trusted)."""
    readback.config_key("cells", r.id, r.config_key)
    for name in ("checkpoint", "backend", "host", "sweep", "image", "vllm_version", "started_at", "verdict"):
        readback.text("cells", r.id, name, getattr(r, name))
    readback.text("measurements", r.window_pk, "window", r.window)
    readback.whole("measurements", r.window_pk, "concurrency", r.concurrency, 1, 1_000_000)
    if not isinstance(r.ok, bool | int):
        raise readback.bad("measurements", r.window_pk, "'ok' is not a boolean")
    if r.ok:
        readback.number("measurements", r.window_pk, "output_throughput", r.output_throughput)


def _with_settings(engine: sa.Engine, rows: list[HistoryRow], wanted: dict[str, list[str]]) -> list[HistoryRow]:
    """Each row's value on every axis (from its cell's [config]: one read per cell, not per window), the rows the
    axis filters keep, and their labels: every axis on which the kept rows differ."""
    ids = sorted({r.cell_pk for r in rows})
    configs: dict[int, dict[str, Any]] = {}
    with engine.connect() as conn:
        for i in range(0, len(ids), CHUNK):
            q = sa.select(cells.c.id, cells.c.config).where(cells.c.id.in_(ids[i : i + CHUNK]))
            with readback.reading("cells"):
                for pk, config in conn.execute(q):
                    configs[pk] = readback.table_of("cells", pk, "config", config)
    kept = []
    for r in rows:
        config = configs.get(r.cell_pk, {})
        r.settings = {a: str(stats.value_label(config, a)) for a in AXES}
        if all(any(fnmatch.fnmatchcase(r.settings[a], v) for v in values) for a, values in wanted.items()):
            kept.append(r)
    differ = [a for a in AXES if len({r.settings[a] for r in kept}) > 1]
    for r in kept:
        r.variant = " ".join(f"{a}={r.settings[a]}" for a in differ)
    return kept


def mark_changes(rows: Sequence[HistoryRow], *, seed: int = stats.DEFAULT_SEED) -> None:
    """Each valid row against the last valid row before it (same config, host, load point) on another image."""
    last: dict[tuple[str, str, int, str], HistoryRow] = {}
    for row in rows:
        key = (row.config_key, row.host, row.concurrency, row.point)
        prev = last.get(key)
        if row.verdict != "valid" or not row.values:
            continue
        if prev is not None and prev.image != row.image:
            ranking = stats.rank_pair(row.values, prev.values, seed=seed)
            row.ratio = ranking.ratio
            row.change = {"a": "improvement", "b": "regression"}.get(ranking.outcome, stats.CANNOT_RANK)
        last[key] = row


def mark_change_points(rows: Sequence[HistoryRow]) -> None:
    """Where each series (config, host, load point) stepped to a new level and stayed there, over its valid rows in
    time order. Needs the `watch` extra (ruptures); without it nothing is marked (changepoint.available says so)."""
    from agent.judging import changepoint

    if not changepoint.available():
        return
    series: dict[tuple[str, str, int, str], list[HistoryRow]] = {}
    for row in rows:
        if row.verdict == "valid" and row.median:
            series.setdefault((row.config_key, row.host, row.concurrency, row.point), []).append(row)
    for members in series.values():
        members.sort(key=lambda r: r.started_at)
        for cp in changepoint.change_points([r.median or 0.0 for r in members]):
            members[cp.index].change_point = cp.describe()


def regressions(rows: Sequence[HistoryRow]) -> list[HistoryRow]:
    return [r for r in rows if r.change == "regression"]


def plot(rows: Sequence[HistoryRow], title: str = "") -> bytes:
    """PNG: one panel per config (checkpoint / backend), one line per host × concurrency, median with min–max bars
    over the cells' start times; a regression is a red ✕, a change point a dashed purple line. Labels fit inside the
    figure (constrained layout)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs: dict[str, list[HistoryRow]] = {}
    for r in rows:
        if r.values:
            configs.setdefault(r.config, []).append(r)
    n = max(1, len(configs))
    cols = min(2, n)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 3.8 * nrows), squeeze=False, layout="constrained")
    for ax, (name, members) in zip(axes.flat, sorted(configs.items()), strict=False):
        lines: dict[str, list[HistoryRow]] = {}
        for r in members:
            lines.setdefault(f"{r.host} c={r.concurrency}", []).append(r)
        for label, pts in sorted(lines.items()):
            xs = list(range(len(pts)))
            mids = [p.median or 0.0 for p in pts]
            lo = [m - min(p.values) for m, p in zip(mids, pts, strict=True)]
            hi = [max(p.values) - m for m, p in zip(mids, pts, strict=True)]
            ax.errorbar(xs, mids, yerr=[lo, hi], fmt="o-", capsize=3, label=label)
            bad = [(x, m) for x, m, p in zip(xs, mids, pts, strict=True) if p.change == "regression"]
            if bad:
                ax.scatter([x for x, _ in bad], [m for _, m in bad], marker="x", s=120, color="red", zorder=5)
            for x, p in zip(xs, pts, strict=True):
                if p.change_point:  # a new level from here on: a line between this run and the one before
                    ax.axvline(x - 0.5, color="purple", linestyle="--", linewidth=1)
                    ax.annotate(p.change_point.split(" from ")[0], (x - 0.5, mids[x]), fontsize="x-small",
                                color="purple", rotation=90, va="bottom")  # fmt: skip
        ticks = [_image_tag(p.image) for p in max(lines.values(), key=len)]
        ax.set_xticks(range(len(ticks)), ticks, rotation=20, ha="right", fontsize="small")
        ax.set_title(name, fontsize="medium")
        ax.set_ylabel("output tok/s (median)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small")
    for ax in list(axes.flat)[len(configs) :]:
        ax.set_visible(False)
    if not configs:
        axes.flat[0].text(0.5, 0.5, "no measurements", ha="center", va="center", color="grey")
    if title:
        fig.suptitle(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


def _image_tag(image: str) -> str:
    """vllm/vllm-openai:v0.11@sha256:abcd… → v0.11@abcd12 (short enough for a tick label)."""
    name, _, digest = image.partition("@")
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else name.rsplit("/", 1)[-1]
    return f"{tag}@{digest.removeprefix('sha256:')[:6]}" if digest else tag
