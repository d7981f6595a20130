"""A bundle read without trusting it: its gzip inflated into a private file no larger than the cap (a tar bomb
stops there), then the tar read member by member (never `extractall`): only regular files at the layout's paths,
each capped, none twice, written with O_EXCL|O_NOFOLLOW under a folder of ours. Anything else refuses the whole
bundle with one reason (BadBundle); the folder is then removed by the caller's TemporaryDirectory.

Python's tarfile holds a pax header in memory whole; the inflated tar is capped (layout.MAX_UNPACKED_BYTES), so
that header is too.
"""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import IO

from agent.bundles import layout

CHUNK = 1 << 16


class BadBundle(ValueError):
    """The bundle is refused: message = why (names the member)."""


def unpack(bundle: Path, into: Path) -> dict[str, int]:
    """Every member of `bundle` under `into` (an empty folder of the caller's); member path -> size."""
    raw = _open(bundle)
    with raw, tempfile.TemporaryFile(prefix="spark-bundle-") as inflated:
        _inflate(raw, inflated)
        inflated.seek(0)
        try:
            with tarfile.open(fileobj=inflated, mode="r:") as tar:
                return _members(tar, into)
        except tarfile.TarError as exc:
            raise BadBundle(f"is not a tar inside its gzip ({str(exc)[:80]})") from None


def _open(bundle: Path) -> gzip.GzipFile:
    try:
        fd = os.open(bundle, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadBundle(f"cannot be opened ({exc.strerror}; a link is never followed)") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise BadBundle("is not a regular file")
    if info.st_size > layout.MAX_BUNDLE_BYTES:
        os.close(fd)
        raise BadBundle(f"is {info.st_size} bytes, more than a bundle may be ({layout.MAX_BUNDLE_BYTES})")
    return gzip.GzipFile(fileobj=os.fdopen(fd, "rb"), mode="rb")


def _inflate(raw: gzip.GzipFile, out: IO[bytes]) -> None:
    total = 0
    try:
        while chunk := raw.read(CHUNK):
            total += len(chunk)
            if total > layout.MAX_UNPACKED_BYTES:
                raise BadBundle(f"unpacks to more than {layout.MAX_UNPACKED_BYTES} bytes (a tar bomb); refused")
            out.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise BadBundle(f"is not a gzip-compressed bundle ({str(exc)[:80]})") from None
    finally:
        raw.fileobj.close()  # type: ignore[union-attr]


def _members(tar: tarfile.TarFile, into: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    for count, member in enumerate(tar, start=1):
        if count > layout.MAX_MEMBERS:
            raise BadBundle(f"has more than {layout.MAX_MEMBERS} members")
        name = member.name
        shown = repr(name)[:100]
        if not member.isreg() or member.issparse():
            raise BadBundle(f"member {shown} is {_kind(member)}; only regular files are accepted")
        problem = layout.path_problem(name)
        if problem:
            raise BadBundle(f"member {shown} {problem}")
        if name in found:
            raise BadBundle(f"member {shown} appears twice")
        if member.size > layout.cap(name):
            raise BadBundle(f"member {shown} is {member.size} bytes, more than {layout.cap(name)}")
        source = tar.extractfile(member)
        if source is None:
            raise BadBundle(f"member {shown} has no data")
        _write(source, member.size, into, name)
        found[name] = member.size
    return found


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link to {member.linkname[:60]!r}"
    if member.islnk():
        return f"a hard link to {member.linkname[:60]!r}"
    if member.isdir():
        return "a directory"
    if member.issparse():
        return "a sparse file"
    return "a device or fifo"


def _write(source: IO[bytes], size: int, into: Path, name: str) -> None:
    """Folders made one part at a time (never through a link); the file created new, never followed."""
    folder = into
    for part in name.split("/")[:-1]:
        folder = folder / part
        if not folder.exists():
            folder.mkdir(mode=0o700)
        elif folder.is_symlink() or not folder.is_dir():
            raise BadBundle(f"member {name!r} goes through something that is not a folder")
    fd = os.open(folder / name.rsplit("/", 1)[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        left = size
        while left:
            chunk = source.read(min(CHUNK, left))
            if not chunk:
                raise BadBundle(f"member {name!r} is truncated")
            out.write(chunk)
            left -= len(chunk)
