"""Long outputs judged on the controller: where a long greedy generation degenerates (a loop, noise, a collapse of
its language) and where two of them first part, in tokens (docs/correctness.md).

`summarize` turns the host's long outputs (probe.json, validated) into the compact rows [[correctness.long]] keeps:
the sequence compared (the server's token ids, or the words' hashes when it sent none) packed, and the onset of
degeneration with an excerpt. `first_divergence` and `verdict` compare two rows when the tree is read.
"""

from __future__ import annotations

import base64
import bisect
import functools
import re
import struct
import unicodedata
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from agent.hostside.contracts import LongResult

MAX_PERIOD = 256  # the longest loop looked for, in units (a repeated paragraph of a few sentences)
NOISE_WINDOW = 64  # characters per window of the noise and collapse checks
EXCERPT = (60, 140)  # characters shown before and after an onset
GARBAGE = ("noise", "collapse")


def pack(values: Sequence[int]) -> str:
    """A sequence of 32-bit values as compact text for cell.toml."""
    return base64.b64encode(zlib.compress(struct.pack(f"<{len(values)}I", *values), 6)).decode()


def unpack(text: str) -> list[int]:
    raw = _raw(text)
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


@functools.lru_cache(maxsize=1024)
def _raw(text: str) -> bytes:
    """The packed values as bytes (cached: a report compares each row with many others), inflated within bounds
    by the one reader of packed rows (results/longrows.py: every row the tree or the store gives passed it)."""
    from agent.results import longrows

    return longrows.decode(text)


def _common(x: bytes, y: bytes) -> int:
    """How many leading 4-byte values two packed sequences share (slices compared in C, halving the range)."""
    low, high = 0, min(len(x), len(y)) // 4
    while low < high:
        mid = (low + high + 1) // 2
        if x[: 4 * mid] == y[: 4 * mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _words(text: str) -> tuple[list[int], list[int]]:
    """(hash of each word, character offset of each word)."""
    found = list(re.finditer(r"\S+", text))
    return [zlib.crc32(m.group().encode()) for m in found], [m.start() for m in found]


class Positions:
    """Character offset <-> token position, from the streamed chunks' running counts."""

    def __init__(self, chunk_tokens: Sequence[int], chunk_chars: Sequence[int], text_len: int, tokens: int):
        self.tokens, self.chars = list(chunk_tokens), list(chunk_chars)
        if not self.tokens:  # nothing streamed: proportional, the best there is
            self.tokens, self.chars = [max(tokens, 1)], [max(text_len, 1)]

    def token_at(self, char: int) -> int:
        """The position of the token whose text holds this character (the start of its chunk)."""
        i = bisect.bisect_right(self.chars, char)
        return self.tokens[i - 1] if i > 0 else 0

    def char_at(self, token: int) -> int:
        i = bisect.bisect_right(self.tokens, token)
        return self.chars[i - 1] if i > 0 else 0


def loop_onset(units: Sequence[int], min_units: int) -> int:
    """Where the output's tail starts repeating one block of at most MAX_PERIOD units to its end (at least three
    times and `min_units` long); -1 when it does not."""
    n, best = len(units), -1
    for period in range(1, min(MAX_PERIOD, n // 3) + 1):
        i = n - period - 1
        while i >= 0 and units[i] == units[i + period]:
            i -= 1
        start = i + 1
        if n - start >= max(3 * period, min_units) and (best < 0 or start < best):
            best = start
    return best


def _bad_char(ch: str) -> bool:
    return ch == "\ufffd" or (unicodedata.category(ch)[0] == "C" and ch not in "\n\t\r")


def _script(ch: str) -> str:
    """The writing system of a letter ("LATIN", "CJK", "CYRILLIC"...), from its Unicode name."""
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else ""


def _tail_onset(text: str, bad: Any, min_chars: int) -> int:
    """The start of the run of windows, reaching the end of the text, for which bad(window) holds; -1 when that
    run is shorter than min_chars."""
    start = len(text)
    for w in range(len(text) - NOISE_WINDOW, -NOISE_WINDOW, -NOISE_WINDOW):
        window = text[max(w, 0) : w + NOISE_WINDOW]
        if not bad(window):
            break
        start = max(w, 0)
    if len(text) - start < min_chars:
        return -1
    return start


def noise_onset(text: str, min_chars: int) -> int:
    """Where the text turns into non-printable noise to its end (more than 10% such characters per window)."""
    return _tail_onset(text, lambda w: sum(map(_bad_char, w)) > 0.1 * len(w), min_chars)


def collapse_onset(text: str, min_chars: int) -> int:
    """Where the text leaves its own language to its end: letters of another writing system than its opening's,
    or hardly any letters at all (symbols, digits, punctuation)."""
    head = [_script(ch) for ch in text[: max(len(text) // 4, 1)] if ch.isalpha()]
    if len(head) < 32:
        return -1
    home = max(set(head), key=head.count)

    def bad(window: str) -> bool:
        shown = [ch for ch in window if not ch.isspace()]
        letters = [ch for ch in shown if ch.isalpha()]
        if len(letters) < 0.3 * max(len(shown), 1):
            return True
        return sum(_script(ch) == home for ch in letters) < 0.5 * len(letters)

    return _tail_onset(text, bad, min_chars)


def summarize(output: Mapping[str, Any], min_tokens: int) -> LongResult:
    """One long output as [[correctness.long]] keeps it: what to compare, and where it degenerated."""
    text = str(output.get("text", ""))
    ids = list(output.get("token_ids") or [])
    chunk_tokens, chunk_chars = list(output.get("chunk_tokens") or []), list(output.get("chunk_chars") or [])
    tokens = len(ids) or (chunk_tokens[-1] if chunk_tokens else 0)
    pos = Positions(chunk_tokens, chunk_chars, len(text), tokens)
    row = LongResult(
        id=str(output.get("id", "")),
        path=str(output.get("path", "")),
        units="tokens" if ids else "words",
        tokens=tokens,
        seq="",
        at="",
        degenerate="",
        degenerate_at=-1,
        excerpt="",
        error=str(output.get("error", "")),
        seconds=float(output.get("seconds", 0.0)),
    )
    if ids:
        units, at_token = ids, None
    else:
        units, offsets = _words(text)
        at_token = [pos.token_at(c) for c in offsets]
        row["at"] = pack(at_token)
    row["seq"] = pack(units)
    min_chars = min_tokens * 2  # a token is at least a couple of characters of noise
    found: list[tuple[int, str, int]] = []  # (token position, kind, character offset)
    loop = loop_onset(units, min_tokens if ids else max(min_tokens * 3 // 4, 8))  # a word is ~1.3 tokens
    if loop >= 0:
        token = loop if at_token is None else at_token[loop]
        found.append((token, "loop", pos.char_at(token) if at_token is None else offsets[loop]))
    for kind, onset in (("noise", noise_onset(text, min_chars)), ("collapse", collapse_onset(text, min_chars))):
        if onset >= 0:
            found.append((pos.token_at(onset), kind, onset))
    if found and text:
        token, kind, char = min(found)
        row["degenerate"], row["degenerate_at"] = kind, token
        row["excerpt"] = text[max(char - EXCERPT[0], 0) : char + EXCERPT[1]]
    return row


def first_divergence(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[int, float]:
    """(the token position where two rows' outputs first part, -1 = never; the share of the longer one they share
    before it). Token ids when both have them, else words (by a hash of each: the same text, the same word)."""
    if a.get("units") == b.get("units") == "tokens":
        x, y, at = _raw(a["seq"]), _raw(b["seq"]), None
    else:
        x, y = (_word_seq(r) for r in (a, b))
        at = unpack(b["at"]) if b.get("at") else None
    n, longest = _common(x, y), max(len(x), len(y)) // 4
    if len(x) == len(y) == 4 * n:
        return -1, 1.0
    share = n / max(longest, 1)
    return (at[n] if at is not None and n < len(at) else n), share


def _word_seq(row: Mapping[str, Any]) -> bytes:
    """A row's words: its seq when it kept words; a row of token ids cannot be turned back into words, so it is
    compared on nothing against a row of words."""
    return _raw(row["seq"]) if row.get("units") == "words" else b""


def verdict(row: Mapping[str, Any], diverged: int) -> str:
    """What follows a divergence in `row`: a loop, garbage (noise or a collapsed language) or a plausible
    alternative (it goes on as text: kernels' numeric differences part greedy outputs somewhere)."""
    if diverged < 0:
        return "identical"
    kind = str(row.get("degenerate", ""))
    if kind == "loop":
        return "loop"
    if kind in GARBAGE:
        return "garbage"
    return "plausible alternative"
