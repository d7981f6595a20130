"""Flag values checked while the command line is parsed: a bad one is argparse's one-line error, exit 2,
before anything is read, written or touched. Used as `type=` of add_argument."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path


def number(low: float, high: float, *, low_open: bool = True) -> Callable[[str], float]:
    """A finite number in (low, high] (or [low, high] with low_open=False): no inf, nan or absurd values."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        above = value > low if low_open else value >= low
        if not math.isfinite(value) or not above or value > high:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a finite number in {bracket}{low:g}, {high:g}]")
        return value

    parse.__name__ = "number"  # argparse names the type in its messages
    return parse


def folder(text: str) -> Path:
    """An existing folder to read (a results tree)."""
    path = Path(text)
    if not text or not path.is_dir():
        why = "is a file, not a folder" if path.is_file() else "no such results folder"
        raise argparse.ArgumentTypeError(f"{text!r}: {why}; pass a results folder a sweep wrote")
    return path


def writable_folder(text: str) -> Path:
    """A folder we may write into: it exists and is writable, or it can be made under a writable folder."""
    path = Path(text)
    if not text:
        raise argparse.ArgumentTypeError("an empty path; pass a folder")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    _check_writable(text, path)
    return path


def writable_file(text: str) -> Path:
    """A file we may write (atomically, so its folder must be writable); not a folder."""
    path = Path(text)
    if not text or path.is_dir() or text.endswith(os.sep):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; pass a file name")
    _check_writable(text, path.parent)
    return path


def _check_writable(text: str, path: Path) -> None:
    existing = path if path.exists() else next((p for p in path.absolute().parents if p.exists()), Path("/"))
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: {existing} is a file, so no folder can be made there")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: {existing} is not writable")


def add_rank_by(p: argparse.ArgumentParser) -> None:
    """--rank-by, as report and compare both take it (the metrics: agent.judging.stats.RANK_BY)."""
    from agent.judging import stats  # the judging layer loads only for the commands that rank

    p.add_argument(
        "--rank-by",
        choices=sorted(stats.RANK_BY),
        default="throughput",
        help="what is ranked: output throughput, or goodput under the sweep's SLOs "
        "(vLLM bench serve's request_goodput; default %(default)s)",
    )
