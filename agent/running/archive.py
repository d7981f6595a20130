"""Read a cell's archive from a host without trusting it: a small tar reader, never `extractall`.

The host packs its run folder (hostside/serving.py seal) into a plain tar. Only regular files with flat names from
an allow-list are accepted, each capped, the whole archive capped; links, devices, fifos, directories, sparse
members, long-name extensions, duplicates and anything else reject the whole archive. Members stream into files in
a staging folder the caller chooses, so memory stays bounded whatever the host sends.

Why not `tarfile`: it reads pax and sparse headers into memory whole, before any check of ours can run. The subset
here (ustar headers, pax `x` records for path/size/mtime) is what Python's tarfile and GNU tar write for these files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from agent.hostside import loadpoints
from agent.hostside.probe import PROBE_FILE
from agent.hostside.serving import DIED_FILE
from agent.running.hostdata import BadHostData, one_line

MiB = 1 << 20
MAX_LOG_BYTES = 256 * MiB  # server.log: generous, a long debug log of a big model stays well below
MAX_FILE_BYTES = 1 * MiB  # launch.txt, serve.json, one measurement window
MAX_ARCHIVE_BYTES = 512 * MiB  # the tar file as a whole
MAX_MEMBERS = 4096  # levels × repeats of a large matrix is a few hundred
MAX_PAX_BYTES = 64 * 1024  # one pax extended header (we only need path, size, mtime from it)
BLOCK = 512
CHUNK = 64 * 1024

RUN_FILE = re.compile(loadpoints.WINDOW.pattern + r"\.json")  # a window, named by its load point: exactly that grammar
LEFTOVER = re.compile(r"\.tmp-[A-Za-z0-9_]{1,32}\.json")  # the load driver's temp file, when it was killed mid-write
FIXED = {
    "server.log": MAX_LOG_BYTES,
    "launch.txt": MAX_FILE_BYTES,
    "serve.json": MAX_FILE_BYTES,
    DIED_FILE: MAX_FILE_BYTES,  # only when the server died mid-cell
    PROBE_FILE: 32 * MiB,  # the correctness probe's outputs with the long decodes' text and token ids
    "ray-node.log": MAX_LOG_BYTES,  # a multi-node cell: this node's `ray start` log (hostside/raynode.py)
}
REGULAR = (b"0", b"\0")
PAX = b"x"
TYPE_NAMES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a directory",
    b"6": "a fifo",
    b"7": "a contiguous file",
    b"g": "a global pax header",
    b"L": "a GNU long name",
    b"K": "a GNU long link name",
    b"S": "a GNU sparse file",
    b"D": "a GNU directory dump",
    b"M": "a GNU multi-volume part",
    b"V": "a volume label",
}


def file_cap(name: str) -> int | None:
    """The size cap of an allowed member name; None when the name is not allowed."""
    if name in FIXED:
        return FIXED[name]
    if RUN_FILE.fullmatch(name) or LEFTOVER.fullmatch(name):
        return MAX_FILE_BYTES
    return None


def is_leftover(name: str) -> bool:
    return bool(LEFTOVER.fullmatch(name))


@dataclass(frozen=True)
class Member:
    name: str
    size: int


def unpack(tar_path: Path, staging: Path) -> list[Member]:
    """Check the whole archive and write its members into `staging` (an empty folder of the caller's).
    Raises BadHostData naming the first problem; `staging` may then hold partial files the caller removes."""
    fd = _open_regular(tar_path)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_ARCHIVE_BYTES:
            raise BadHostData(f"archive is {size} bytes, more than {MAX_ARCHIVE_BYTES}")
        members: list[Member] = []
        seen: set[str] = set()
        for name, length in _members(fh):
            if name in seen:
                raise BadHostData(f"archive member {_quote(name)} appears twice")
            seen.add(name)
            if len(seen) > MAX_MEMBERS:
                raise BadHostData(f"archive has more than {MAX_MEMBERS} members")
            _copy(fh, length, staging / name)
            members.append(Member(name, length))
        return members


def _open_regular(path: Path) -> int:
    """The incoming tar itself must be a regular file, not a link to somewhere else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadHostData(f"archive cannot be opened ({exc.strerror})") from None
    import stat

    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadHostData("archive is not a regular file")
    return fd


def _members(fh: BinaryIO) -> Iterator[tuple[str, int]]:
    """(name, size) of each accepted member; the file position is then at its data. Rejects everything else."""
    pax: dict[str, str] = {}
    while True:
        header = _read_exact(fh, BLOCK, "header")
        if header is None or header == bytes(BLOCK):
            if pax:
                raise BadHostData("archive ends after a pax header without its member")
            return  # end of archive (one zero block is enough: nothing after it is read)
        _check_sum(header)
        kind = header[156:157]
        size = _octal(header[124:136], "size")
        if kind == PAX:
            if pax:
                raise BadHostData("archive has two pax headers in a row")
            if size > MAX_PAX_BYTES:
                raise BadHostData(f"pax header of {size} bytes, more than {MAX_PAX_BYTES}")
            pax = _pax_records(_read_data(fh, size))
            continue
        if kind not in REGULAR:  # before the name: a GNU header keeps other data where ustar has its prefix
            what = TYPE_NAMES.get(kind, f"member type {kind!r}")
            shown = _quote(_field(header[0:100]).decode("utf-8", "replace"))
            raise BadHostData(f"archive member {shown} is {what}; only regular files are accepted")
        if header[257:263] == b"ustar\0" and header[345:500].strip(b"\0"):
            raise BadHostData("archive member with a ustar prefix (a path with a folder)")
        name = pax.pop("path", None) or _text(_field(header[0:100]), "member name")
        if "size" in pax:
            size = _pax_size(pax.pop("size"))
        pax = {}
        cap = file_cap(name)
        if cap is None:
            raise BadHostData(f"archive member {_quote(name)} is not an expected file name")
        if size > cap:
            raise BadHostData(f"archive member {_quote(name)} is {size} bytes, more than {cap}")
        yield name, size


def _check_sum(header: bytes) -> None:
    stored = _octal(header[148:156], "checksum")
    blanked = header[:148] + b" " * 8 + header[156:]
    if stored not in (sum(blanked), sum(b - 256 if b > 127 else b for b in blanked)):
        raise BadHostData("archive header checksum does not match (not a tar, or damaged)")


def _field(raw: bytes) -> bytes:
    return raw.split(b"\0", 1)[0]


def _octal(raw: bytes, what: str) -> int:
    if raw[:1] and raw[0] & 0x80:
        raise BadHostData(f"archive header {what} in base-256 (a member larger than any allowed)")
    digits = _field(raw).strip(b" ")
    if not re.fullmatch(rb"[0-7]{1,12}", digits or b"0"):
        raise BadHostData(f"archive header {what} is not an octal number")
    return int(digits or b"0", 8)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadHostData(f"archive {what} is not UTF-8") from None


def _quote(name: str) -> str:
    return one_line(repr(name), 80)


def _pax_records(data: bytes) -> dict[str, str]:
    """`<len> <key>=<value>\\n` records. Sparse maps (GNU.sparse.*) and anything that could rename a link or
    smuggle a second name are refused; unknown keys are ignored."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        match = re.match(rb"([0-9]{1,5}) ", data[pos : pos + 6])
        if not match:
            raise BadHostData("pax header is malformed")
        length = int(match.group(1))
        record = data[pos : pos + length]
        if length <= len(match.group(0)) or len(record) != length or not record.endswith(b"\n"):
            raise BadHostData("pax header is malformed")
        key, eq, value = record[len(match.group(0)) : -1].partition(b"=")
        if not eq:
            raise BadHostData("pax header is malformed")
        name = _text(key, "pax key")
        if name.startswith("GNU.sparse"):
            raise BadHostData("archive has a sparse member (GNU.sparse pax records)")
        if name in records:
            raise BadHostData(f"pax header repeats {_quote(name)}")
        records[name] = _text(value, f"pax {name}")
        pos += length
    return records


def _pax_size(value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,12}", value):
        raise BadHostData("pax size is not a number")
    return int(value)


def _read_exact(fh: BinaryIO, n: int, what: str) -> bytes | None:
    data = fh.read(n)
    if not data:
        return None
    if len(data) != n:
        raise BadHostData(f"archive is truncated (in a {what})")
    return data


def _read_data(fh: BinaryIO, size: int) -> bytes:
    """A small payload (pax records), with its padding to the next block."""
    padded = -(-size // BLOCK) * BLOCK
    data = _read_exact(fh, padded, "pax header") if padded else b""
    if data is None:
        raise BadHostData("archive is truncated (in a pax header)")
    return data[:size]


def _copy(fh: BinaryIO, size: int, dest: Path) -> None:
    """Stream one member's data (and its padding) into dest, chunk by chunk."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        left = size
        while left:
            chunk = fh.read(min(CHUNK, left))
            if not chunk:
                raise BadHostData(f"archive is truncated (in {_quote(dest.name)})")
            out.write(chunk)
            left -= len(chunk)
    pad = -size % BLOCK
    if pad and len(fh.read(pad)) != pad:
        raise BadHostData(f"archive is truncated (after {_quote(dest.name)})")
