"""Service-level objectives in `vllm bench serve --goodput` form, and goodput over finished requests.

`--goodput ttft:500 tpot:50 e2el:2000`: each KEY:VALUE names a metric and its bound in milliseconds (a plain
number). A request is "good" when every bound given holds for it; request_goodput = good requests / window
seconds. TPOT of a request is (e2el - ttft) / (output tokens - 1), as bench computes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

KEYS = ("ttft", "tpot", "e2el")


class SloError(ValueError):
    """An SLO that is not KEY:MILLISECONDS; the message says how to write it."""


def parse(items: Iterable[str]) -> dict[str, float]:
    """["ttft:500", "tpot:50"] -> {"ttft": 500.0, "tpot": 50.0} (milliseconds); SloError on anything else."""
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = str(item).partition(":")
        key = key.strip().lower()
        if not sep or key not in KEYS:
            raise SloError(f"SLO {item!r} must be KEY:MILLISECONDS with KEY one of {', '.join(KEYS)}, e.g. 'ttft:500'")
        try:
            ms = float(value)
        except ValueError:
            raise SloError(
                f"SLO {item!r}: the value is milliseconds, a plain number (vllm bench serve --goodput form), "
                f"e.g. '{key}:500' for half a second"
            ) from None
        if not math.isfinite(ms) or ms <= 0:
            raise SloError(f"SLO {item!r}: the bound must be a number of milliseconds > 0")
        if key in out:
            raise SloError(f"SLO {item!r}: {key} is given twice")
        out[key] = ms
    return out


def good(slos: Mapping[str, float], ttft_s: float, tpot_s: float, e2el_s: float) -> bool:
    """Does one finished request meet every SLO? (bench: `<=` each bound, bounds in ms)."""
    observed = {"ttft": ttft_s, "tpot": tpot_s, "e2el": e2el_s}
    return all(observed[k] * 1000.0 <= bound for k, bound in slos.items())
