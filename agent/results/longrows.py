"""[[correctness.long]] rows as a results tree or the store hands them back: checked before anything reads them.

A row's `seq` and `at` are packed values (judging/longdecode.pack: base64 of zlib of 32-bit integers). Whoever can
write a cell.toml or a store row could put a KeyError, a zlib error, text that is not base64, or a compressed bomb
(a few KB that inflate to gigabytes) there. `problem` says what is wrong with a row in one line, "" when nothing;
`decode` is the bounded inflate: never more than an honest host's longest output (MAX_VALUES values).
"""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import Any

from agent.hostside import longdecode

MAX_VALUES = longdecode.MAX_TOKENS  # one value per token (or word) generated, at most
MAX_RAW = 4 * MAX_VALUES
MAX_PACKED = 256 * 1024  # base64 of zlib of MAX_RAW bytes that do not compress: about 176K characters
MAX_TEXT = 4096  # excerpt (200 characters), error (200), id, path
ROW: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "path": str,
    "units": str,
    "tokens": int,
    "seq": str,
    "at": str,
    "degenerate": str,
    "degenerate_at": int,
    "excerpt": str,
    "error": str,
    "seconds": (int, float),
}
REQUIRED = ("id", "path", "units", "seq")
UNITS = ("tokens", "words")
DEGENERATE = ("", "loop", "noise", "collapse")


class BadPacked(ValueError):
    pass


def decode(text: str) -> bytes:
    """The packed values as bytes, whole 32-bit values only; BadPacked for anything pack() would not have written."""
    if not text:
        return b""
    if len(text) > MAX_PACKED:
        raise BadPacked(f"{len(text)} characters, more than a packed sequence of {MAX_VALUES} values")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadPacked("not base64") from None
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(data, MAX_RAW + 1)
    except zlib.error as exc:
        raise BadPacked(f"not zlib data ({exc})") from None
    if len(raw) > MAX_RAW or inflate.unconsumed_tail:
        raise BadPacked(f"inflates past {MAX_RAW} bytes (a compressed bomb)")
    if not inflate.eof or inflate.unused_data:
        raise BadPacked("not one whole zlib stream")
    if len(raw) % 4:
        raise BadPacked("not whole 32-bit values")
    return raw


def problem(row: Any, where: str) -> str:
    """What is wrong with one [[correctness.long]] row (one line, naming `where`), "" when nothing."""
    if not isinstance(row, dict):
        return f"'{where}' is not a table"
    for key in REQUIRED:
        if key not in row:
            return f"'{where}' has no '{key}'"
    for key, want in ROW.items():
        if key not in row:
            continue
        value = row[key]
        if isinstance(value, bool) or not isinstance(value, want):
            return f"'{where}.{key}' has the wrong type ({type(value).__name__})"
        if isinstance(value, str) and key not in ("seq", "at") and len(value) > MAX_TEXT:
            return f"'{where}.{key}' is longer than {MAX_TEXT} characters"
    if row["units"] not in UNITS:
        return f"'{where}.units' must be one of {', '.join(UNITS)}"
    if row.get("degenerate", "") not in DEGENERATE:
        return f"'{where}.degenerate' must be one of loop, noise, collapse (or empty)"
    for key, low in (("tokens", 0), ("degenerate_at", -1)):
        if key in row and not low <= row[key] <= MAX_VALUES:
            return f"'{where}.{key}' is outside {low}..{MAX_VALUES}"
    if "seconds" in row and not 0 <= row["seconds"] <= 1e6:
        return f"'{where}.seconds' is outside 0..1e6"
    for key in ("seq", "at"):
        try:
            decode(row.get(key, ""))
        except BadPacked as exc:
            return f"'{where}.{key}': {exc}"
    return ""
