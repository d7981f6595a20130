"""`spark-agent watch`: each tracked tag resolved on a host of the fleet; a digest new to the store measured as `tune`
measures a spec, ingested, compared with the last image measured for the spec, and said on one page.

Nothing here measures, compares or writes a report of its own: the tag is resolved by `pin`'s playbook, checked and
confirmed by a second source (running/imageref.resolve), the measurement is running/tune.run_tune, the store is
agent/store, the comparison is reporting/whatchanged.py (compare's regression rule inside). What this module adds is the order, the names and the
state: a watched digest's sweep is `<spec name>-<digest, 12 hex>`, so its cells never mix with another image's, and
"the last image measured for this spec" is the newest digest among the store's sweeps of that spec.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import stat
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agent.errors import UserError
from agent.escape import plain
from agent.hostside import atomic, redact
from agent.hostside.docker import is_tag
from agent.hostside.utc import iso
from agent.planning.spec import Spec
from agent.reporting import whatchanged
from agent.reporting.htmlpage import markdown_to_html, page
from agent.store import readback, select
from agent.store.schema import cells, sweeps

PAGES = "watch"  # <results>/watch/<spec>/<stamp>-<digest12>.md|.html: the "what changed" pages (site links them)
LOCK = ".watch.lock"  # <results>/.watch.lock: one watch at a time per results folder
WEBHOOK_VAR = "spark_watch_webhook"  # an inventory variable (ansible-vault welcome): where the summary goes
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
BUSY_WORDS = ("we did not start it", "host is in use by")  # a host's refusal (hostside/supervise.HostBusy)


class Busy(Exception):
    """Not now: another watch holds the lock, or a host serves a model the agent did not start."""


@dataclass(frozen=True)
class Tracked:
    tag: str
    pinned: str  # name@sha256:...

    @property
    def digest(self) -> str:
        return self.pinned.split("@", 1)[1]

    @property
    def short(self) -> str:
        return self.digest.removeprefix("sha256:")[:12]


@dataclass
class Result:
    page_md: Path | None = None
    page_html: Path | None = None
    measured: list[Tracked] = field(default_factory=list)
    changes: list[whatchanged.WhatChanged] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # why a measurement did not finish

    @property
    def regressed(self) -> bool:
        return any(c.regressed or c.newly_failing for c in self.changes)


def check_tracks(tracks: Sequence[str]) -> None:
    """Bad input, before any host is touched: each --track is a tag (a digest never changes, so it cannot be watched)."""
    for tag in tracks:
        if "@" in tag:
            raise UserError(
                f"--track {tag[:120]!r}: pinned by digest, which never changes; give the tag to follow "
                f"(e.g. {tag.split('@', 1)[0]}:latest)"
            )
        if not is_tag(tag):
            raise UserError(f"--track {tag[:120]!r}: not an image tag such as nvcr.io/nvidia/vllm:26.01-py3")


def check_spec(spec: Spec) -> None:
    if spec.design.images:
        raise UserError(f"{spec.path}: [matrix] image lists several images; watch puts each new image in [image] ref")


@contextmanager
def lock(results_root: Path) -> Iterator[None]:
    """flock on <results>/.watch.lock: a second watch (a timer tick while one still runs) is refused, not queued."""
    results_root.mkdir(parents=True, exist_ok=True)
    path = results_root / LOCK
    try:  # never through a link: its target would be truncated
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise UserError(f"{path}: cannot be the watch's lock ({exc.strerror}); remove it and run again") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{path}: not a plain file, so not the watch's lock; remove it and run again")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = os.pread(fd, 64, 0).decode(errors="replace").strip()
            raise Busy(f"another watch is running (pid {held or '?'}) on {results_root}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def sweep_name(spec: Spec, tracked: Tracked) -> str:
    return f"{spec.name}-{tracked.short}"


def _sweeps_of(spec: Spec) -> re.Pattern[str]:
    return re.compile(re.escape(spec.name) + r"(-[0-9a-f]{12})?")


def measured_images(engine: sa.Engine, spec: Spec) -> list[tuple[str, str, list[str]]]:
    """(digest, image, sweeps) the store holds for this spec (its own sweep and the watch's), newest last."""
    q = (
        sa.select(cells.c.image_digest, cells.c.image, sweeps.c.name, sa.func.max(cells.c.started_at))
        .select_from(cells.join(sweeps, sweeps.c.id == cells.c.sweep_id))
        .where(sweeps.c.name.like(spec.name.replace("%", r"\%").replace("_", r"\_") + "%", escape="\\"))
        .group_by(cells.c.image_digest, cells.c.image, sweeps.c.name)
    )
    pattern = _sweeps_of(spec)
    found: dict[str, tuple[str, str, list[str]]] = {}
    with engine.connect() as conn, readback.reading("cells"):
        rows = sorted((r for r in conn.execute(q) if _named(r[2], pattern) and r[0]), key=lambda r: str(r[3]))
    for digest, image, sweep, _ in rows:
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):  # it selects cells and names pages
            raise readback.bad("cells", "?", f"image_digest {plain(repr(digest))[:40]} is not sha256:<64 hex>")
        readback.text("cells", digest, "image", image)  # shown on the page
        old = found.pop(digest, (digest, image, []))
        found[digest] = (digest, image, [*old[2], sweep])  # re-inserted: ordered by its newest start
    return list(found.values())


def _named(name: Any, pattern: re.Pattern[str]) -> bool:
    return isinstance(name, str) and len(name) <= 256 and pattern.fullmatch(name) is not None


def cells_of(engine: sa.Engine, digest: str, sweep_names: Sequence[str]) -> list[dict[str, Any]]:
    return select.load(engine, select.Selection({"sweep": list(sweep_names), "image_digest": [digest]}))


def spec_for(spec: Spec, tracked: Tracked) -> Spec:
    """The spec with the new image in [image] ref, its own sweep name, and the vLLM version left to the log."""
    return dataclasses.replace(spec, image=tracked.pinned, name=sweep_name(spec, tracked), vllm_version="")


def busy_hosts(stopped: dict[str, str]) -> dict[str, str]:
    """host -> why, for the hosts that stopped because someone else's server holds them (never evicted)."""
    return {h: why for h, why in stopped.items() if any(w in why for w in BUSY_WORDS)}


def write_page(results_root: Path, spec: Spec, changes: Sequence[tuple[Tracked, whatchanged.WhatChanged]]) -> Path:
    """One page for this run (a section per new digest): <results>/watch/<spec>/<stamp>-<digest>.md and .html."""
    stamp = iso().replace(":", "").replace("-", "")[:15]
    folder = results_root / PAGES / spec.name
    base = folder / f"{stamp}-{changes[-1][0].short}"
    parts = [whatchanged.render_markdown(w, f"What changed: {spec.name}, {t.tag} is now {t.short}") for t, w in changes]
    text = "\n".join(parts)
    atomic.write_text(base.with_suffix(".md"), text)
    atomic.write_text(base.with_suffix(".html"), page(f"what changed: {spec.name}", markdown_to_html(text, {})))
    return base.with_suffix(".md")


def summary(spec: Spec, result: Result) -> dict[str, Any]:
    """The webhook's JSON: short, no host text beyond configuration labels, redacted."""
    data = {
        "spec": spec.name,
        "measured": [{"tag": t.tag, "digest": t.digest} for t in result.measured],
        "regressed": sorted({label for c in result.changes for label in c.regressed}),
        "newly_failing": sorted({label for c in result.changes for label in c.newly_failing}),
        "headlines": [unmarked(h.text)[:200] for c in result.changes for h in c.headlines][:20],
        "page": str(result.page_html or ""),
        "incomplete": result.incomplete,
    }
    return json.loads(redact.redact_text(json.dumps(data)))


def unmarked(markdown: str) -> str:
    """A headline as plain text: no bold, no code marks, no backslash escapes."""
    return plain(re.sub(r"\\(.)", r"\1", markdown.replace("**", "").replace("`", "")))


def webhook_url(host_vars: dict[str, Any]) -> str:
    value = host_vars.get(WEBHOOK_VAR)
    if value in (None, ""):
        return ""
    url = str(value)  # a vaulted value decrypts here (the inventory loader installed the secret)
    redact.remember([url])  # a URL with a token in it is a secret: never shown
    if not re.fullmatch(r"https?://[^\s]+", url):
        raise UserError(f"inventory variable {WEBHOOK_VAR}: not an http(s) URL")
    return url


def post(url: str, data: dict[str, Any], timeout: float = 10.0) -> str:
    """POST the summary; "" when it went, else why not (one line, the URL redacted): telling is best effort."""
    request = urllib.request.Request(
        url, data=json.dumps(data).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return "" if 200 <= resp.status < 300 else f"HTTP {resp.status}"
    except OSError as exc:
        return redact.redact_text(str(exc))[:200]
