"""Python reprs as vLLM logs them (its non-default args): `literal_dict` reads a clean one with ast.literal_eval
(never eval) and a damaged one with a small parser of one bounded pass.

Its own module because it is a parser, not a wording: the launch family hands it the text after "non-default args: "
and takes back a plain dict.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from .attestation import MAX_ITEMS


def literal_dict(text: str) -> dict:
    """The dict repr vLLM logs: ast.literal_eval (never eval) when it is clean, else the pairs `_Repr` reads whole
    ({} for nothing). Nested dicts stay nested (compilation_config's), whatever else the repr holds."""
    try:
        value = ast.literal_eval(text.strip())
        return _plain(value) if isinstance(value, dict) else {}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return _plain(_Repr(text).top_dict())
    except (_Stop, ValueError, SyntaxError, MemoryError, RecursionError):
        return {}


# --- Python reprs as vLLM logs them (non-default args) ------------------------------------------------
# ast.literal_eval reads a clean repr exactly. What it refuses (enum reprs `<X.Y: 1>`, `Config(...)` calls, a
# dict cut by the paste) is read by this small parser: one left-to-right pass, bounded depth, and only the pairs
# that are whole are kept, at the depth where they stand (a nested dict's keys never leak to the top).

_TOKEN = re.compile(
    r"\s*(?:('(?:[^'\\\n]|\\.){0,4000}'|\"(?:[^\"\\\n]|\\.){0,4000}\")"  # 1 string
    r"|(-?(?:\d[\d_]{0,40}(?:\.\d{0,40})?|\.\d{1,40})(?:[eE][-+]?\d{1,3})?)(?![\w.])"  # 2 number
    r"|([A-Za-z_][\w.]{0,200})"  # 3 name
    r"|(<[^<>\n]{0,400}>)"  # 4 an object's repr: <CUDAGraphMode.FULL: 2>
    r"|(\.\.\.|\u2026)"  # 5 the paste's cut
    r"|([{}\[\]():,=]))"  # 6 punctuation
)
_MAX_DEPTH = 24
_CLOSE = {"{": "}", "[": "]", "(": ")"}


class _Stop(Exception):
    """The repr ends here (cut, or something no repr holds): keep what was whole before it."""


class _Repr:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def token(self) -> re.Match[str]:
        m = _TOKEN.match(self.text, self.pos)
        if not m or m.lastindex is None or m.lastindex == 5:
            raise _Stop
        self.pos = m.end()
        return m

    def peek(self) -> str:
        m = _TOKEN.match(self.text, self.pos)
        return m.group(6) or "" if m and m.lastindex == 6 else ""

    def value(self, depth: int) -> Any:
        m = self.token()
        kind = m.lastindex
        if kind == 1:
            return ast.literal_eval(m.group(1))
        if kind == 2:
            number = m.group(2).replace("_", "")
            return float(number) if any(c in number for c in ".eE") else int(number)
        if kind == 3:
            name = m.group(3)
            if self.peek() == "(":  # a call, Config(a=1): kept as the text it was logged as
                start = m.start(3)
                self.token()
                self.items(")", depth + 1, keyed="=")
                return self.text[start : self.pos][:2000]
            return {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}.get(
                name, name
            )
        if kind == 4:
            return m.group(4)[1:-1]
        opener = m.group(6)
        if opener not in _CLOSE or depth >= _MAX_DEPTH:
            raise _Stop
        if opener == "{":
            return self.items("}", depth + 1, keyed=":")
        items = self.items(_CLOSE[opener], depth + 1, keyed="")
        return items

    def items(self, close: str, depth: int, keyed: str) -> Any:
        """The items of a container up to `close`: a dict when its items are `key: value` (or `key=value`)."""
        pairs: dict[str, Any] = {}
        values: list[Any] = []
        while len(pairs) + len(values) <= MAX_ITEMS * 4:
            if self.peek() == close:
                self.token()
                return pairs if pairs or (close == "}" and not values) else values
            first = self.value(depth)
            sep = self.peek()
            if keyed and sep == keyed:
                self.token()
                pairs[str(first)] = self.value(depth)
                sep = self.peek()
            else:
                values.append(first)
            if sep == ",":
                self.token()
            elif sep != close:
                raise _Stop
        raise _Stop

    def top_dict(self) -> dict[str, Any]:
        """The whole pairs of a dict repr, those before a cut or damage included."""
        out: dict[str, Any] = {}
        if self.token().group(6) != "{":
            return out
        try:
            while len(out) < MAX_ITEMS:
                if self.peek() == "}":
                    break
                key = self.value(0)
                if self.peek() != ":":
                    break
                self.token()
                value, sep = self.value(0), self.peek()
                if sep not in (",", "}"):  # a value counts only when it ends where the dict says: a cut 12 is no 1
                    break
                out[str(key)] = value
                if sep == "}":
                    break
                self.token()
        except (_Stop, ValueError, SyntaxError, MemoryError, RecursionError):
            pass
        return out


def _plain(value: Any) -> Any:
    """JSON/TOML-friendly: no None, no tuples/sets, string keys."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value if v is not None]
    if isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)
