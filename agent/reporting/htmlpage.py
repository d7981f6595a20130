"""report.html: the very markdown report.md holds, turned into one self-contained page (plots embedded as data:
URIs, so it works from file://). Only the markdown subset agent.reporting.markdown writes is understood."""

from __future__ import annotations

import base64
import html
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.reporting.markdown import ReportData

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #eee; }
td:nth-child(-n+4) { text-align: left; }
pre { background: #f4f4f4; padding: 0.8em; overflow-x: auto; white-space: pre-wrap; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
tr.unstable td { background: #fff3cd; } tr.invalid td { background: #f8d7da; } tr.failed td { background: #e2e3e5; }
"""

IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")


def render(data: ReportData, images: dict[str, bytes]) -> str:
    from agent.reporting.markdown import render_markdown

    body = markdown_to_html(render_markdown(data, images), images)
    title = html.escape(", ".join(data.provenance["sweeps"]) or "results")
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>spark-agent report: {title}</title>'
        f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def markdown_to_html(text: str, images: dict[str, bytes]) -> str:
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = lines.index("```", i + 1) if "```" in lines[i + 1 :] else len(lines)
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1 : end])) + "</code></pre>")
            i = end + 1
            continue
        if line.startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            out.append(_table(lines[i:end]))
            i = end
            continue
        if line.lstrip().startswith("- "):
            end = i
            while end < len(lines) and lines[end].lstrip().startswith("- "):
                end += 1
            out.append(_list(lines[i:end]))
            i = end
            continue
        out.append(_block(line, images))
        i += 1
    return "\n".join(x for x in out if x)


def _block(line: str, images: dict[str, bytes]) -> str:
    heading = re.match(r"^(#{1,4}) (.*)$", line)
    if heading:
        level = len(heading.group(1))
        return f"<h{level}>{_inline(heading.group(2))}</h{level}>"
    image = IMAGE.match(line)
    if image:
        name = image.group(2)
        src = f"data:image/png;base64,{base64.b64encode(images[name]).decode()}" if name in images else name
        return f'<img alt="{html.escape(image.group(1))}" src="{src}">'
    return f"<p>{_inline(line)}</p>" if line.strip() else ""


def _inline(text: str) -> str:
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(part)))
    return "".join(out)


def _list(lines: list[str]) -> str:
    out, nested = ["<ul>"], False
    for line in lines:
        inner = line.startswith(" ")
        if inner and not nested:
            out.append("<ul>")
        if not inner and nested:
            out.append("</ul>")
        nested = inner
        out.append(f"<li>{_inline(line.lstrip()[2:])}</li>")
    out.append("</ul></ul>" if nested else "</ul>")
    return "".join(out)


def _table(lines: list[str]) -> str:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if not line.startswith("|---")]
    head, body = rows[0], rows[1:]
    out = ["<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"]
    for row in body:
        out.append(f'<tr class="{_row_class(row)}">' + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>")
    return "".join(out) + "</table>"


def _row_class(row: list[str]) -> str:
    text = " ".join(row)
    if "INVALID" in text:
        return "invalid"
    if "FAILED" in text:
        return "failed"
    return "unstable" if "UNSTABLE" in text else ""
