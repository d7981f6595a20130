"""calibration.toml: loading it, and the small lookups every other module shares."""

from __future__ import annotations

import bisect
import tomllib
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).with_name("calibration.toml")


@lru_cache(maxsize=1)
def load() -> dict:
    with open(PATH, "rb") as fh:
        return tomllib.load(fh)


def version_tuple(text: str) -> tuple[int, ...]:
    """'0.24.0' -> (0, 24, 0); '0.24' -> (0, 24, 0)."""
    parts = [int(p) for p in str(text).strip().lstrip("v").split(".")]
    return tuple((parts + [0, 0, 0])[:3])


def at_least(version: str, since: str) -> bool:
    return version_tuple(version) >= version_tuple(since)


def in_lifetime(version: str, lifetime: list[str]) -> bool:
    since, until = lifetime
    return at_least(version, since) and (not until or not at_least(version, until))


def interpolate(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear y(x), flat beyond the ends."""
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def resolve_checkpoint(model: str) -> str | None:
    """MODEL (a key, a hub id, or a path ending in either) -> checkpoint key, or None."""
    checkpoints = load()["checkpoints"]
    model = model.rstrip("/")
    for key, ckpt in checkpoints.items():  # exact names first: hub basenames are ambiguous (nv vs uns)
        if model == key or model in ckpt["hub_ids"] or any(model.endswith("/" + h) for h in ckpt["hub_ids"]):
            return key
    tail = model.rsplit("/", 1)[-1]
    for key, ckpt in checkpoints.items():
        if tail == key or tail in (h.rsplit("/", 1)[-1] for h in ckpt["hub_ids"]):
            return key
    return None
