"""A detached sweep's record (results/.fleet/<sweep>.json) is read back by `status` and `collect`, which hand its
inventory to Ansible, and Ansible *runs* an executable inventory. So the record is trusted only as far as it is
checked (issue 30): a regular file of this user that nobody else may write, holding exactly the record's fields
with their types, and naming an inventory that is no program and is byte for byte the one handed out (its hash is
kept beside the fields, under GUARD). detach.save_state/load_state are the only callers.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import types
import typing
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.planning.inventory import files_ansible_reads, refuse_program

GUARD = "_integrity"  # beside the record's fields in the JSON, never one of them
HOW = "start the sweep again (or restore the file)"


def inventory_digest(inventory: str | Path) -> str:
    """sha256 over every file Ansible reads for this inventory (names and bytes). UserError when one is a program
    or the inventory is gone."""
    path = Path(inventory)
    if not path.is_absolute() or not (path.is_file() or path.is_dir()):
        raise UserError(f"{path}: the sweep's inventory is not there (an absolute path to it is recorded); {HOW}")
    digest = hashlib.sha256()
    for f in sorted(files_ansible_reads(path)):
        refuse_program(f)
        digest.update(str(f.relative_to(path if path.is_dir() else path.parent)).encode() + b"\0")
        digest.update(f.read_bytes() + b"\0")
    return digest.hexdigest()


def guard(path: Path, inventory: str, handout: str) -> dict[str, str]:
    """What save_state writes under GUARD: the inventory's path and hash at hand-out. A later save of the same
    hand-out keeps the hash it found (an inventory edited meanwhile is not blessed by being saved over)."""
    try:
        check_file(path)
        data = json.loads(path.read_text())
        kept = data.get(GUARD) if isinstance(data, dict) and data.get("handout") == handout else None
    except (OSError, ValueError, UserError):
        kept = None
    if isinstance(kept, dict) and kept.get("inventory") == inventory and isinstance(kept.get("inventory_sha256"), str):
        return {"inventory": inventory, "inventory_sha256": kept["inventory_sha256"]}
    return {"inventory": inventory, "inventory_sha256": inventory_digest(inventory)}


def check_file(path: Path) -> None:
    """The record is a plain file of this user that nobody else may write (anyone who can write it picks what
    `status` runs)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path}: the sweep's record is not a plain file (a link?); {HOW}")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise UserError(
            f"{path}: the sweep's record belongs to uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}; only "
            f"this user (uid {os.geteuid()}) may write it: chown/chmod 600 it if it is yours, else {HOW}"
        )


def check_fields(path: Path, data: Any, record: type) -> dict[str, Any]:
    """The record's fields, each of its declared type (nested dicts and lists included); the guard kept apart.
    Fields with a default may be missing (a record from before they were added); unknown keys are refused."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a detached sweep record (not a JSON object); {HOW}")
    hints = typing.get_type_hints(record)
    fields = {k: v for k, v in data.items() if k != GUARD}
    unknown = sorted(set(fields) - set(hints))
    if unknown:
        raise UserError(f"{path}: not a detached sweep record (unknown field {unknown[0]!r}); {HOW}")
    for name, value in fields.items():
        if not _is(value, hints[name]):
            raise UserError(f"{path}: field {name!r} is not {_shown(hints[name])}; {HOW}")
    return fields


def check_inventory(path: Path, data: dict[str, Any], inventory: str) -> None:
    """The inventory named is the one handed out, unchanged, and no program."""
    kept = data.get(GUARD)
    if not isinstance(kept, dict) or not isinstance(kept.get("inventory_sha256"), str):
        raise UserError(f"{path}: the record has no hash of its inventory (an older or hand-made record); {HOW}")
    if kept.get("inventory") != inventory:
        raise UserError(f"{path}: the record's inventory was changed to {inventory!r} after hand-out; {HOW}")
    if inventory_digest(inventory) != kept["inventory_sha256"]:
        raise UserError(
            f"{inventory}: the inventory changed since the sweep was handed out; restore it, or start the sweep again"
        )


def write(path: Path, text: str) -> None:
    """Write the record 0600 (whatever the umask) at `path`: a temp file beside it, then a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        tmp.replace(path)  # whole or not at all: a killed controller never leaves half a record
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: the last whole record stays
        raise


def _is(value: Any, kind: Any) -> bool:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, a) for a in args)
    if origin is dict:
        return isinstance(value, dict) and all(_is(k, args[0]) and _is(v, args[1]) for k, v in value.items())
    if origin is list:
        return isinstance(value, list) and all(_is(v, args[0]) for v in value)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _shown(kind: Any) -> str:
    return str(getattr(kind, "__name__", kind)) if typing.get_origin(kind) is None else str(kind).replace("typing.", "")
