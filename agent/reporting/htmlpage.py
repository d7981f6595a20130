"""report.html: the very markdown report.md holds, turned into one self-contained page (plots embedded as data:
URIs, so it works from file://). Only the markdown subset agent.reporting.document writes is understood: headings,
paragraphs, lists, pipe tables, fenced code, images, `code` spans (any fence length), **bold** and backslash escapes.
Every character of text is HTML-escaped; no markup from the markdown reaches the page except the tags made here."""

from __future__ import annotations

import base64
import re

from agent.escape import html
from agent.judging.judgement import Judgement
from agent.reporting.document import render_markdown

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1em auto; padding: 0 1em; max-width: 1200px; color: #222; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #eee; cursor: pointer; position: sticky; top: 0; }
th[aria-sort=ascending]::after { content: " ▲"; } th[aria-sort=descending]::after { content: " ▼"; }
code { overflow-wrap: anywhere; }
td:nth-child(-n+4) { text-align: left; }
pre { background: #f4f4f4; padding: 0.8em; overflow-x: auto; white-space: pre-wrap; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
tr.unstable td { background: #fff3cd; } tr.invalid td { background: #f8d7da; } tr.failed td { background: #e2e3e5; }
"""

# Click a column head to sort by it (numbers as numbers: "1,234.5", "3.3%", "2.4×"); click again to reverse.
SORT_SCRIPT = """
document.querySelectorAll("table").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.title = "sort";
    th.addEventListener("click", function () {
      var rows = Array.from(table.querySelectorAll("tr")).slice(1);
      var up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var key = function (tr) {
        var text = (tr.children[col] || {}).textContent || "";
        var n = parseFloat(text.replace(/,/g, ""));
        return isNaN(n) ? text.toLowerCase() : n;
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
        return up ? c : -c;
      });
      rows.forEach(function (tr) { tr.parentNode.appendChild(tr); });
    });
  });
});
"""


def page(title: str, body: str) -> str:
    """A whole page: escaped title, the style, a body made of tags built here, sortable tables."""
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n{body}\n<script>{SORT_SCRIPT}</script></body></html>\n"
    )


IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")
FENCE = re.compile(r"^(`{3,})[A-Za-z0-9_-]*$")
PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")  # what a backslash escapes (CommonMark)


def render(data: Judgement, images: dict[str, bytes]) -> str:
    body = markdown_to_html(render_markdown(data, images), images)
    return page("spark-agent report: " + (", ".join(data.provenance.sweeps) or "results"), body)


def markdown_to_html(text: str, images: dict[str, bytes]) -> str:
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:  # closed by a line of the same backticks (escape.md_fence makes it longer than any inside)
            closing = fence.group(1)
            end = next((j for j in range(i + 1, len(lines)) if lines[j] == closing), len(lines))
            out.append("<pre><code>" + "\n".join(html(x) for x in lines[i + 1 : end]) + "</code></pre>")
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
        return f'<img alt="{html(image.group(1))}" src="{html(src)}">'
    return f"<p>{_inline(line)}</p>" if line.strip() else ""


BOLD = object()  # a ** marker in _tokens' output


def _inline(text: str) -> str:
    """Code spans, backslash escapes and **bold**; everything else is text. Unpaired ** stays literal."""
    tokens = _tokens(text)
    markers = [i for i, t in enumerate(tokens) if t is BOLD]
    paired = set(markers[: len(markers) // 2 * 2])
    out, open_ = [], False
    for i, t in enumerate(tokens):
        if t is BOLD:
            if i in paired:
                out.append("</b>" if open_ else "<b>")
                open_ = not open_
            else:
                out.append("**")
        else:
            out.append(str(t))
    return "".join(out)


def _tokens(text: str) -> list[object]:
    """HTML pieces (already escaped) and BOLD markers."""
    out: list[object] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in PUNCTUATION:
            out.append(html(text[i + 1]))
            i += 2
        elif c == "`":
            run = len(text[i:]) - len(text[i:].lstrip("`"))
            close = _closing_run(text, i + run, run)
            if close < 0:
                out.append("`" * run)
                i += run
                continue
            code = text[i + run : close]
            if len(code) > 1 and code.startswith(" ") and code.endswith(" ") and code.strip():
                code = code[1:-1]
            out.append(f"<code>{html(code)}</code>")
            i = close + run
        elif text.startswith("**", i):
            out.append(BOLD)
            i += 2
        else:
            out.append(html(c))
            i += 1
    return out


def _closing_run(text: str, start: int, run: int) -> int:
    """Where a run of exactly `run` backticks starts at or after `start`; -1 if none."""
    for m in re.finditer(r"`+", text[start:]):
        if len(m.group(0)) == run:
            return start + m.start()
    return -1


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


def _cells(line: str) -> list[str]:
    """A table row's cells: split on | that is neither escaped nor inside a code span."""
    cells, cell, i, code = [], [], 0, 0
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cell.append(body[i : i + 2])
            i += 2
            continue
        if c == "`":
            run = len(body[i:]) - len(body[i:].lstrip("`"))
            code = 0 if code == run else (code or run)  # inside a span until the same run closes it
            cell.append("`" * run)
            i += run
            continue
        if c == "|" and not code:
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(c)
        i += 1
    if "".join(cell).strip():
        cells.append("".join(cell).strip())
    return cells


def _table(lines: list[str]) -> str:
    rows = [_cells(line) for line in lines if not line.startswith("|---")]
    head, body = rows[0], rows[1:]
    out = ['<div class="scroll"><table><tr>' + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"]
    for row in body:
        out.append(f'<tr class="{_row_class(row)}">' + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>")
    return "".join(out) + "</table></div>"


def _row_class(row: list[str]) -> str:
    text = " ".join(row)
    if "INVALID" in text or "WRONG OUTPUT" in text:
        return "invalid"
    if "FAILED" in text:
        return "failed"
    return "unstable" if "UNSTABLE" in text else ""
