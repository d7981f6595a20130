"""One escaping helper per place text is shown: Markdown, HTML, rich markup, a terminal line.

Strings in a cell record can come from a host (GPU name, log lines, error messages, what launch.txt says): they are
data, never markup. Every value a report or table interpolates goes through the helper of its target.
"""

from __future__ import annotations

import html as _html
import re

from agent.hostside import redact

# Characters that change how the text around them shows without showing themselves (hostside/redact.py: one list,
# which redaction also removes before it looks for a secret).
INVISIBLE = redact.INVISIBLE
# C0 and C1 control characters (newlines, ESC of terminal sequences, NUL), DEL, the Unicode line separators, and
# the invisible ones.
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{INVISIBLE}]")
# Markdown punctuation that can start markup anywhere in a line: code, emphasis, links, HTML, tables, entities.
_MD_PUNCT = re.compile(r"([\\`*\[\]<>|#~&])")
# "_" only opens or closes emphasis at a word boundary: flashinfer_b12x stays readable, _x_ does not italicise.
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What starts a block when it begins a line: list markers, an ordered list number, a setext rule.
_MD_LINE_START = re.compile(r"^(?:([-+])(?=\s|$)|[0-9]{1,9}([.)])(?=\s|$)|(=)=*\s*$)")
_BACKTICKS = re.compile(r"`+")


def plain(value: object) -> str:
    """One line of text without control characters (each becomes a space): safe on a terminal and in a table."""
    return _CONTROL.sub(" ", str(value))


def has_control(text: str) -> bool:
    """Does the text hold a character plain() would replace (a newline, an escape, an invisible one)?"""
    return _CONTROL.search(text) is not None


def md(value: object) -> str:
    """Text inside a Markdown line (a paragraph, list item, table cell or heading): shows as itself."""
    text = _MD_UNDERSCORE.sub(r"\\_", _MD_PUNCT.sub(r"\\\1", plain(value)))
    start = _MD_LINE_START.match(text)
    if start:  # a backslash before the marker character keeps it text
        at = next(start.start(g) for g in (1, 2, 3) if start.group(g))
        text = text[:at] + "\\" + text[at:]
    return text


def md_code(value: object) -> str:
    """An inline code span holding the text verbatim: its fence is longer than any run of backticks inside."""
    text = plain(value)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    # CommonMark strips one space from each end when both ends have one (unless it is all spaces): pad to undo it
    ends = text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" "))
    pad = " " if ends and text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(text: str, info: str = "") -> list[str]:
    """A fenced code block (lines) whose fence no line of `text` can close."""
    lines = [_CONTROL.sub(" ", line) for line in str(text).split("\n")]
    longest = max((len(run) for line in lines for run in _BACKTICKS.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *lines, fence]


def html(value: object) -> str:
    """Text in an HTML element or a quoted attribute value."""
    return _html.escape(plain(value), quote=True)


_NUMBER = re.compile(r"[-+]?[0-9.]+([eE][-+]?[0-9]+)?")


def csv_cell(value: object) -> object:
    """A CSV field a spreadsheet will not run: text starting like a formula (= + - @, tab, CR) gets a leading '.
    Numbers stay numbers; "-1.5" as text stays as it is."""
    if not isinstance(value, str):
        return value
    if value[:1] in ("=", "+", "-", "@", "\t", "\r") and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def rich(value: object) -> str:
    """Text in rich console markup (tables, progress bars): [bold] and friends stay literal."""
    from rich.markup import escape

    return escape(plain(value))
