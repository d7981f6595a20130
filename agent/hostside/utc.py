"""Timestamps as the results tree writes them: UTC, ISO 8601, whole seconds, e.g. 2026-11-29T19:10:00Z."""

from __future__ import annotations

import time


def iso(ts: float | None = None) -> str:
    """`ts` (seconds since the epoch; now when None) as 2026-11-29T19:10:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
