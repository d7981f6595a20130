"""The console tables are printed on: a terminal's own width, and when piped (a file, CI, `| less`) wide enough
that no name is ever cut to "flashinfer_…" (a reader or a grep needs the whole name)."""

from __future__ import annotations

import sys

from rich.console import Console

PIPED_WIDTH = 400  # rich sizes a table to its content: this is only the most a piped row may take


def console(stderr: bool = False, least: int = 0) -> Console:
    """A Console for tables: the terminal's width (at least `least`), or PIPED_WIDTH when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    if not stream.isatty():
        return Console(stderr=stderr, width=max(PIPED_WIDTH, least))
    c = Console(stderr=stderr)
    return Console(stderr=stderr, width=max(c.width, least)) if least > c.width else c
