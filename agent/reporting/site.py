"""`spark-agent site`: a static site from the results store, publishable on any web server (or opened from file://).

    index.html                  the sweeps (who ingested, when, images, hosts, verdict counts) and the configs
    sweeps/<sweep>/report.html  each sweep's report (the very report `spark-agent report` writes)
    history/<config>.html       one configuration across images and time, with its plot, regression markers and
                                change points
    watch/<spec>/<page>.html    `spark-agent watch`'s "what changed" pages, newest first (from <results>/watch)

Built in a temporary folder next to DIR and swapped in at the end: a crash leaves the previous site whole.
Every value shown is escaped (escape.html); pages link only to pages of the site.
DIR is replaced only when it is a site (it carries MARKER, written into every site) or an empty folder: `--out
results` once deleted a whole results tree, store included (issue 30).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agent.errors import UserError
from agent.escape import html
from agent.hostside import atomic
from agent.judging import stats, summary
from agent.judging.judgement import VERDICTS, judge
from agent.reporting.htmlpage import page
from agent.reporting.markdown import write_judgement
from agent.reporting.words import num, pct
from agent.results.tree import PART
from agent.store import history, readback, select
from agent.store.schema import sweeps


def folder_name(name: str) -> str:
    """A sweep's folder: its name when it is a plain folder name (it was one in the tree), else a hash of it."""
    return name if PART.fullmatch(name) else "sweep-" + hashlib.sha256(name.encode()).hexdigest()[:12]


def page_name(config_key: str) -> str:
    """A configuration's history page: its key when it has the hash's shape ingest writes, else hashed again."""
    if readback.CONFIG_KEY.fullmatch(config_key):
        return config_key
    return "config-" + hashlib.sha256(config_key.encode(errors="replace")).hexdigest()[:16]


def inside(root: Path, path: Path) -> Path:
    """path, when it stays under root once links and `..` are resolved; a ValueError otherwise (a bug: every name
    is checked before, this is the last guard before a write)."""
    if not path.resolve().is_relative_to(root.resolve()) or path.resolve() == root.resolve():
        raise ValueError(f"site: {path} would be written outside {root}")
    return path


VERDICT_HEADS = ("valid", "INVALID", "failed", "WRONG OUTPUT")  # as VERDICTS, as the report writes them
MARKER = ".spark-agent-site"  # in every site's folder: what may be replaced


def check_out(out: Path) -> None:
    """DIR may be replaced: missing, an empty folder, or a site of ours. Anything else is one line, nothing touched."""
    if not os.path.lexists(out):
        return
    if out.is_symlink() or not out.is_dir():
        raise UserError(f"--out {out}: not a folder (a link or a file); pass a new folder or an earlier site's")
    if (out / MARKER).is_file() and not (out / MARKER).is_symlink():
        return
    if any(out.iterdir()):
        raise UserError(
            f"--out {out}: a folder that is not a site (no {MARKER}); it would be replaced whole, so nothing was "
            "touched: pass a new folder or an earlier site's"
        )


def build(
    engine: sa.Engine, out: Path, *, threshold: float = summary.DEFAULT_THRESHOLD, watch_pages: Path | None = None
) -> list[Path]:
    """Write the site into out (replacing an earlier site there); returns the pages written. `watch_pages`: the
    folder `spark-agent watch` writes its "what changed" pages to (<results>/watch): copied in and linked."""
    out = Path(out)
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        pages = _build(engine, tmp, threshold, watch_pages)
        (tmp / MARKER).write_text("a site written by `spark-agent site`: the next `site --out` here replaces it\n")
        check_out(out)  # again, just before: it may have changed while the site was built
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / p.relative_to(tmp) for p in pages]


def _swap(tmp: Path, out: Path) -> None:
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; a site is for a web server to read
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


WATCH_PAGE = re.compile(r"[0-9]{8}T[0-9]{6}-[0-9a-f]{12}\.html")  # running/watch.write_page's names


def _watch_pages(source: Path | None, root: Path) -> list[tuple[str, Path]]:
    """(spec, copied page) for each "what changed" page under source/<spec>/, newest first; plain files only."""
    found: list[tuple[str, Path]] = []
    if source is None or not source.is_dir() or source.is_symlink():
        return found
    for folder in sorted(p for p in source.iterdir() if p.is_dir() and not p.is_symlink() and PART.fullmatch(p.name)):
        for page_ in sorted(folder.iterdir(), reverse=True):
            if WATCH_PAGE.fullmatch(page_.name) and page_.is_file() and not page_.is_symlink():
                dest = root / "watch" / folder.name / page_.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(page_, dest)
                found.append((folder.name, dest))
    return found


def _build(engine: sa.Engine, root: Path, threshold: float, watch_source: Path | None = None) -> list[Path]:
    with engine.connect() as conn, readback.reading("sweeps"):
        sweep_rows = (
            conn.execute(sa.select(sweeps).order_by(sweeps.c.first_started.desc(), sweeps.c.name)).mappings().all()
        )
    pages: list[Path] = []
    summaries = []
    names = [row["name"] for row in sweep_rows]
    for row in sweep_rows:  # each run of a sweep on its own: (results root, name, start), never blended
        for name in ("name", "ingested_by", "first_started", "last_finished"):
            readback.text("sweeps", row["id"], name, row[name])
        run = {"sweep": [row["name"]], "results_root": [row["results_root"]], "sweep_started": [row["started"]]}
        cells = select.load(engine, select.Selection(run))
        if not cells:
            continue
        name = folder_name(row["name"]) + (_run_suffix(row) if names.count(row["name"]) > 1 else "")
        folder = inside(root, root / "sweeps" / name)
        data = judge(cells, threshold=threshold)
        write_judgement(data, folder)
        pages.append(folder / "report.html")
        summaries.append(_sweep_summary(dict(row), cells, data.provenance.verdicts, f"sweeps/{name}/report.html"))
    configs: dict[str, list[history.HistoryRow]] = {}
    for r in history.query(engine, select.Selection()):
        configs.setdefault(page_name(r.config_key), []).append(r)
    for key, members in configs.items():
        path = inside(root, root / "history" / f"{key}.html")
        _history_page(path, members)
        pages.append(path)
    watched = _watch_pages(watch_source, root)
    pages += [p for _, p in watched]
    index = root / "index.html"
    atomic.write_text(index, _index(summaries, configs, [(spec, p.relative_to(root)) for spec, p in watched]))
    return [index, *pages]


def _run_suffix(row: Any) -> str:
    """ "-20261201T1000-3f9a1c": a run's start and its results root, for a name several runs share."""
    start = "".join(ch for ch in str(row["started"]) if ch.isalnum())[:13]
    return f"-{start}-{hashlib.sha256(str(row['results_root']).encode()).hexdigest()[:6]}"


def _sweep_summary(
    row: dict[str, Any], cells: Sequence[dict[str, Any]], verdicts: dict[str, int], link: str
) -> dict[str, Any]:
    """One run's row of the index; its verdict counts are its judgement's (the report's Provenance says the same)."""
    return {
        "name": row["name"],
        "root": row.get("results_root", ""),
        "who": row["ingested_by"],
        "when": f"{row['first_started'][:16]} → {row['last_finished'][:16]}",
        "images": sorted({history._image_tag(str(c.get("config", {}).get("image", ""))) for c in cells}),
        "hosts": sorted({str(c.get("host", "")) for c in cells}),
        "counts": {v: verdicts.get(v, 0) for v in VERDICTS},
        "link": link,
    }


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], classes: Sequence[str] = ()) -> str:
    """Cells are HTML already (escaped by the caller)."""
    out = ['<div class="scroll"><table><tr>' + "".join(f"<th>{html(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cls = classes[i] if i < len(classes) else ""
        out.append(f'<tr class="{cls}">' + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    return "".join(out) + "</table></div>"


def _index(
    summaries: Sequence[dict[str, Any]],
    configs: dict[str, list[history.HistoryRow]],
    watched: Sequence[tuple[str, Path]] = (),
) -> str:
    sweep_rows = [
        [
            f'<a href="{html(s["link"])}">{html(s["name"])}</a>',
            html(s["root"]),
            html(s["who"]),
            html(s["when"]),
            html(", ".join(s["images"])),
            html(", ".join(s["hosts"])),
            *(str(s["counts"][v]) for v in VERDICTS),
        ]
        for s in summaries
    ]
    config_rows, classes = [], []
    for key, members in sorted(configs.items(), key=lambda kv: kv[1][0].config):
        bad = len(history.regressions(members))
        config_rows.append(
            [
                f'<a href="history/{html(key)}.html">{html(members[0].config)}</a>',
                html(", ".join(sorted({history._image_tag(m.image) for m in members}))),
                str(len({(m.sweep, m.sweep_started, m.results_root, m.host) for m in members})),
                f"<b>{bad} regression(s)</b>" if bad else "none",
            ]
        )
        classes.append("invalid" if bad else "")
    body = "<h1>spark-agent results</h1>"
    if watched:
        body += f"<h2>What changed: new images measured by watch ({len(watched)})</h2><ul>"
        body += "".join(
            f'<li><a href="{html(link.as_posix())}">{html(spec)}: {html(link.stem)}</a></li>' for spec, link in watched
        )
        body += "</ul>"
    body += f"<h2>Sweeps ({len(summaries)})</h2>"
    body += _table(
        ["sweep", "results folder", "ingested by", "measured (UTC)", "images", "hosts", *VERDICT_HEADS],
        sweep_rows,
    )
    body += f"<h2>Configurations across images ({len(configs)})</h2>"
    body += _table(["config", "images", "measured cells", "vs previous image"], config_rows, classes)
    return page("spark-agent results", body)


def _history_page(path: Path, rows: Sequence[history.HistoryRow]) -> None:
    first = rows[0]
    png = f"{path.stem}.png"
    atomic.write_bytes(path.parent / png, history.plot(rows))
    table_rows, classes = [], []
    for r in rows:
        change = f"{r.change} ({r.ratio:.3f}×)" if r.change else ""
        change += f"{'; ' if change else ''}change point: {r.change_point}" if r.change_point else ""
        table_rows.append(
            [
                html(r.host),
                str(r.concurrency),
                html(r.started_at[:16]),
                html(r.run),
                html(history._image_tag(r.image)),
                html(r.vllm_version or "?"),
                html(num(r.median) if r.verdict == "valid" else r.verdict.upper()),
                html(pct(r.spread)) if r.spread is not None else "–",
                str(len(r.values)),
                f"<b>{html(change)}</b>" if r.change == "regression" else html(change),
            ]
        )
        classes.append("invalid" if r.change == "regression" else "")
    body = f'<p><a href="../index.html">← all sweeps and configurations</a></p><h1>{html(first.config)}</h1>'
    body += (
        "<p>Median output tok/s of every measured cell of this configuration, oldest first. A regression is "
        "slower than the previous image's measurement (same host and concurrency) beyond the noise; "
        f"{html(stats.CANNOT_RANK)} means within it. A change point (dashed line on the plot) is where the "
        "series stepped to a new level and stayed there (one noisy image is never one).</p>"
    )
    body += f'<img alt="history of {html(first.config)}" src="{html(png)}">'
    body += _table(
        ["host", "c", "started", "sweep", "image", "vLLM", "tok/s", "spread", "n", "vs previous image"],
        table_rows,
        classes,
    )
    atomic.write_text(path, page(f"history: {first.config}", body))
