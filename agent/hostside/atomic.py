"""Files written whole or not at all: a temp file in the same folder, then a rename. Standard library only.

A reader (or a re-run after a kill) sees the old file or the new one, never half of one; a failed write leaves
no temp file behind. The one implementation for the host (run results, server state, the cell's tar) and the
controller (the results tree, reports, the spec `pin` edits).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temp path beside `path`; once the block ends without error it becomes `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())  # the rename must not land before the data on a crash


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | os.PathLike, data: dict) -> None:
    write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
