"""`spark-agent watch`'s page: what changed between the last image measured and a new one, with the log's evidence.

Pure: two lists of cell tables (a results tree's or a store selection's) in, a `WhatChanged` out, then Markdown (and
the same as HTML through htmlpage.markdown_to_html). Everything compared was already parsed per cell: the
attestation (hostside/logparse.py: vLLM version, what loaded, unknown variables, with the first log line saying each),
the failure class and root cause, the startup breakdown, the probe's verdict. Speed is compare's
(judging/comparison.py: one decision per configuration, judging/regression.py); "what to run" is the judgement's
(judging/judgement.py). Every value from a host is escaped (escape.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.escape import md, md_code, md_fence
from agent.judging import comparison, judgement, regression, summary
from agent.reporting import compare as comparing
from agent.reporting.words import cell_name, serve_command

AXES = (("moe_backend", "moe", "MoE"), ("attention_backend", "attention", "attention"), ("linear_backend", "linear",
        "linear"))  # fmt: skip
FAILING = ("failed", "invalid", summary.WRONG_OUTPUT)  # a verdict that is not a measurement


@dataclass(frozen=True)
class Item:
    text: str  # Markdown, escaped already
    evidence: tuple[str, ...] = ()  # log lines (plain text: rendered as code)
    headline: bool = False


@dataclass
class WhatChanged:
    before: str  # image refs
    after: str
    versions: list[Item] = field(default_factory=list)
    loaded: list[Item] = field(default_factory=list)
    dead: list[Item] = field(default_factory=list)
    failing: list[Item] = field(default_factory=list)
    startup: list[Item] = field(default_factory=list)
    speed: list[Item] = field(default_factory=list)
    correctness: list[Item] = field(default_factory=list)
    to_run: list[Item] = field(default_factory=list)
    regressed: list[str] = field(default_factory=list)  # configurations slower beyond the noise
    newly_failing: list[str] = field(default_factory=list)  # configurations that ran before and do not now
    first: bool = False  # nothing measured before: a baseline only

    @property
    def headlines(self) -> list[Item]:
        return [i for s in self.sections().values() for i in s if i.headline]

    def sections(self) -> dict[str, list[Item]]:
        return {
            "vLLM inside the image": self.versions,
            "What loaded, per configuration": self.loaded,
            "Variables vLLM ignores (dead) or recognises": self.dead,
            "Cells that started or stopped failing": self.failing,
            "Startup, cold and warm": self.startup,
            "Speed per configuration (the regression rule)": self.speed,
            "Correctness verdicts": self.correctness,
            "What to run": self.to_run,
        }


def _table(cell: dict[str, Any], key: str) -> dict[str, Any]:
    value = cell.get(key)
    return value if isinstance(value, dict) else {}


def _attested(cell: dict[str, Any]) -> dict[str, Any]:
    return _table(cell, "attestation")


def _evidence(cell: dict[str, Any], axis: str) -> tuple[str, ...]:
    line = (_attested(cell).get("evidence") or {}).get(axis, "")
    return (str(line)[:300],) if line else ()


def _by_config(cells: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        out.setdefault(comparison.match_key(c, with_host=False), []).append(c)
    return out


def _label(cell: dict[str, Any]) -> str:
    return cell_name(summary.summarize_cell(cell)).split("/", 1)[-1]  # checkpoint/backend, escaped


def build(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], image_a: str, image_b: str) -> WhatChanged:
    out = WhatChanged(image_a, image_b, first=not before)
    if not before:
        out.versions = _versions([], after)
        out.to_run = _to_run([], after)
        return out
    a, b = _by_config(before), _by_config(after)
    both = [k for k in b if k in a]
    out.versions = _versions(before, after)
    out.loaded = [i for k in both for i in _loaded(a[k][0], b[k][0])]
    out.dead = _dead(before, after)
    out.failing = _failing(a, b, out)
    out.startup = _startup(before, after)
    out.speed = _speed(before, after, out)
    out.correctness = _correctness(a, b, both)
    out.to_run = _to_run(before, after)
    return out


def _versions(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> list[Item]:
    def seen(cells: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for c in cells:
            found.setdefault(str(_attested(c).get("vllm_version") or "?"), c)
        return found

    old, new = seen(before), seen(after)
    evidence = tuple(e for c in new.values() for e in _evidence(c, "version"))
    now = ", ".join(md(v) for v in sorted(new)) or "?"
    if not before:
        return [Item(f"The log says vLLM {now}.", evidence)]
    was = ", ".join(md(v) for v in sorted(old)) or "?"
    if sorted(old) == sorted(new):
        return [Item(f"vLLM {now}, as before.", evidence)]
    return [Item(f"**vLLM {was} → {now}** (as each server logged it).", evidence, headline=True)]


def _loaded(a: dict[str, Any], b: dict[str, Any]) -> list[Item]:
    items = []
    for key, axis, words in AXES:
        was, now = str(_attested(a).get(key) or ""), str(_attested(b).get(key) or "")
        if not now or was == now:
            if now and axis == "moe":  # the MoE backend is the article's question: said even when it held
                items.append(Item(f"{_label(b)}: {words} {md(now.upper())}, as before"))
            continue
        asked = str(a.get("config", {}).get(key) or "auto")
        headline = asked == "auto" and bool(was)
        text = f"{_label(b)}: {words} {md(was.upper() or 'nothing said')} → **{md(now.upper())}**"
        if headline:
            text += f" (asked: {md(asked)}; vLLM now chooses another backend)"
        items.append(Item(text, _evidence(a, axis) + _evidence(b, axis), headline=headline))
    return items


def _dead(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> list[Item]:
    def unknown(cells: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for c in cells:
            for var in _attested(c).get("unknown_env") or []:
                found.setdefault(str(var), c)
        return found

    old, new = unknown(before), unknown(after)
    items = [
        Item(f"{md_code(v)} became dead: vLLM logs it as unknown now", _evidence(new[v], "unknown_env:" + v), True)
        for v in sorted(new.keys() - old.keys())
    ]
    items += [
        Item(f"{md_code(v)} is recognised now (it was dead)", _evidence(old[v], "unknown_env:" + v))
        for v in sorted(old.keys() - new.keys())
    ]
    return items


def _why_failed(cell: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    verdict = summary.cell_verdict(cell)
    cls = str(cell.get("failure_class") or "")
    said = [str(cell.get("failure_root_cause") or "")] + [str(e) for e in cell.get("failure_evidence") or []]
    said += [str(r) for r in cell.get("verdict_reasons") or []]
    lines = tuple(dict.fromkeys(s[:300] for s in said if s))  # the root cause is often the first evidence too
    return verdict.upper() + (f" ({cls})" if cls else ""), lines[:2]


def _failing(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]], out: WhatChanged) -> list[Item]:
    items = []
    for key, cells in b.items():
        now = cells[0]
        was = a[key][0] if key in a else None
        bad_now = summary.cell_verdict(now) in FAILING
        bad_was = was is not None and summary.cell_verdict(was) in FAILING
        label = _label(now)
        if bad_now and not bad_was:
            why, evidence = _why_failed(now)
            ran = "ran before" if was is not None else "not measured before"
            items.append(Item(f"{label}: **started failing**: {md(why)} ({ran})", evidence, headline=True))
            if was is not None:
                out.newly_failing.append(label)
        elif bad_was and not bad_now and was is not None:
            why, evidence = _why_failed(was)
            items.append(Item(f"{label}: stopped failing (it was {md(why)})", evidence))
    return items


def startup_medians(cells: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Median seconds to ready per compile cache state (cold: compiled; warm: loaded from the cache)."""
    seen: dict[str, list[float]] = {}
    for c in cells:
        if summary.cell_verdict(c) == "failed":
            continue
        st = _table(c, "startup")
        kind = str(st.get("compile_cache") or "unknown")
        ready = float(st.get("ready_s", -1) or -1)
        seconds = ready if ready >= 0 else float(c.get("startup_s") or 0.0)
        if seconds > 0:
            seen.setdefault(kind, []).append(seconds)
    return {k: statistics.median(v) for k, v in seen.items()}


def _startup(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> list[Item]:
    old, new = startup_medians(before), startup_medians(after)
    items = []
    for kind in sorted(old.keys() | new.keys()):
        was = f"{old[kind]:.1f} s" if kind in old else "–"
        now = f"{new[kind]:.1f} s" if kind in new else "–"
        n = sum(1 for c in after if str(_table(c, "startup").get("compile_cache") or "unknown") == kind)
        items.append(Item(f"{md(kind)} start (median to ready): {was} → {now} ({n} server start(s) now)"))
    return items


def _speed(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], out: WhatChanged) -> list[Item]:
    cmp = comparison.compare(before, after)
    items = [Item(md(comparing.summary_line(cmp)) + ".")]
    for c in cmp.configs:
        if c.change is None:
            items.append(Item(f"{md(c.label)}: not decided ({md(c.why)})"))
            continue
        word = {comparison.REGRESSION: "**slower**", comparison.IMPROVEMENT: "faster"}.get(c.status, "within noise")
        items.append(Item(f"{md(c.label)}: {md(regression.describe(c.change))}: {word}", (),
                          headline=c.status == comparison.REGRESSION))  # fmt: skip
        if c.status == comparison.REGRESSION:
            out.regressed.append(c.label)
    items += [Item(f"not compared: {md(x)}") for x in cmp.not_compared]
    return items


def _correctness(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]], keys: list[str]) -> list[Item]:
    items = []
    for key in keys:
        was, now = summary.cell_verdict(a[key][0]), summary.cell_verdict(b[key][0])
        probe = _table(b[key][0], "correctness")
        score = f", probe score {float(probe['score']):.0%}" if probe.get("probed") and "score" in probe else ""
        same = " (unchanged)" if was == now else ""
        items.append(Item(f"{_label(b[key][0])}: {md(was.upper())} → {md(now.upper())}{same}{score}",
                          headline=now == summary.WRONG_OUTPUT and was != now))  # fmt: skip
    return items


def decisions(j: judgement.Judgement) -> dict[tuple[str, str], str]:
    """Per (hardware, quant), what to run ("run marlin", "undecided", ...): a change of image changed the answer
    only where one of these differs."""
    return {(rec.hardware, rec.quant): judgement.headline(rec)[0] for rec in j.recommendations}


def _to_run(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> list[Item]:
    new = judgement.judge(after)
    old = judgement.judge(before) if before else None
    now = list(new.what_to_run)
    was = list(old.what_to_run) if old else []
    changed = old is not None and decisions(new) != decisions(old)  # the answers, not their numbers or footnotes
    items = [Item(("**Changed.** " if changed else "") + "Now: " + md("; ".join(now) or "nothing ranked"))]
    if before:
        items.append(Item("Before: " + md("; ".join(was) or "nothing ranked")))
    commands = [serve_command(s.cell) for rec in new.recommendations for s in rec.winner_cells[:1]]
    items += [Item("The command now:", (c,)) for c in commands]
    if not commands:
        items.append(Item("No command now: nothing on this image won outside the noise."))
    if changed:
        items[0] = Item(items[0].text, (), headline=True)
    return items


def render_markdown(w: WhatChanged, title: str) -> str:
    lines = [f"# {md(title)}", "", f"Before: {md_code(w.before) if w.before else 'nothing measured'}  ",
             f"Now: {md_code(w.after)}", ""]  # fmt: skip
    if w.first:
        lines += ["The first image measured for this spec: nothing to compare with yet.", ""]
    if not w.first:
        heads = [f"- {i.text}" for i in w.headlines] or ["- nothing changed beyond the noise"]
        lines += ["## Headlines", "", *heads, ""]
    for title_, items in w.sections().items():
        if not items:
            continue
        lines += [f"## {title_}", ""]
        for i in items:
            lines.append(f"- {i.text}")
            for e in i.evidence:
                lines += ["", *md_fence(e, "text"), ""]
        lines.append("")
    return "\n".join(lines) + "\n"
