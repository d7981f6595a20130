"""What the controller remembers of each host between sweeps: the image digest it held and the vLLM version its
server logged (results/.fleet/hosts/known.json).

A host's fingerprint (planning/groups.py) includes both, but neither is a host fact: the digest comes from
provisioning, the version only from a server log, after a cell ran. So they are remembered here, per host, and the
next sweep's groups use them. A version is kept with the image it was read under: when the spec pins another image,
the old version is forgotten (the new image may carry another vLLM).

The file is ours but lives in a folder users touch: it is read back validated and bounded, and a damaged one is
ignored (a warning), never trusted. Written whole or not at all; one writer at a time inside a controller.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import structlog

from agent.hostside import atomic, utc
from agent.planning.spec import VERSION
from agent.results import tree as results
from agent.results.records import CellRecord

log = structlog.get_logger("spark_agent.hostmemory")

FILE = Path(".fleet") / "hosts" / "known.json"  # beside the detached sweeps' records (.fleet/<sweep>.json)
MAX_HOSTS = 4096
MAX_TEXT = 300
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
FACTS_FINGERPRINT = re.compile(r"[0-9a-f]{8}")

_lock = threading.Lock()  # the attached sweep finalizes cells from one thread per host


@dataclass
class Known:
    """One host, as last seen. "" where not known."""

    image: str = ""  # the image reference the host was last provisioned with
    image_digest: str = ""  # the digest present for it ("" = process runtime: no image)
    vllm_version: str = ""  # what its server's log said, under `image`
    fingerprint: str = ""  # the host's facts fingerprint (8 hex) when the version was read
    sweep: str = ""  # the sweep that read the version
    seen_at: str = ""


def path(root: Path) -> Path:
    return Path(root) / FILE


def load(root: Path) -> dict[str, Known]:
    """Every remembered host; {} when there is no file or it is damaged (then a warning says so)."""
    file = path(root)
    if not file.is_file():
        return {}
    try:
        if file.stat().st_size > MAX_HOSTS * 2048:
            raise ValueError("too large")
        return _checked(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        log.warning("host_memory_ignored", file=str(file), error=str(exc)[:200])
        return {}


def _checked(data: Any) -> dict[str, Known]:
    if not isinstance(data, dict) or len(data) > MAX_HOSTS:
        raise ValueError(f"not a table of at most {MAX_HOSTS} hosts")
    out = {}
    names = {f.name for f in fields(Known)}
    for host, entry in data.items():
        results.path_part(host, "host")  # ValueError for a name that could not be an inventory host's
        if not isinstance(entry, dict) or set(entry) - names:
            raise ValueError(f"host {host}: not a host entry")
        if not all(isinstance(v, str) and len(v) <= MAX_TEXT and "\x00" not in v for v in entry.values()):
            raise ValueError(f"host {host}: values must be short strings")
        known = Known(**entry)
        for value, pattern in (
            (known.image_digest, DIGEST),
            (known.vllm_version, VERSION),
            (known.fingerprint, FACTS_FINGERPRINT),
        ):
            if value and not pattern.fullmatch(value):
                raise ValueError(f"host {host}: {value[:80]!r} is not a valid value")
        out[host] = known
    return out


def _save(root: Path, known: dict[str, Known]) -> None:
    atomic.write_json(path(root), {h: asdict(k) for h, k in sorted(known.items())})


def digests(known: dict[str, Known], image: str) -> dict[str, str]:
    """Host → the digest it held for `image` the last time it was provisioned with it."""
    return {h: k.image_digest for h, k in known.items() if k.image == image and k.image_digest}


def versions(known: dict[str, Known], image: str) -> dict[str, str]:
    """Host → the vLLM version its log gave under `image` ("" hosts left out)."""
    return {h: k.vllm_version for h, k in known.items() if k.image == image and k.vllm_version}


def remember_images(root: Path, image: str, present: dict[str, str], hosts: list[str]) -> None:
    """After provisioning: each host now holds `image` (at present[host], or none on the process runtime). A host
    moved to another image forgets the version its old image logged."""
    with _lock:
        known = load(root)
        for host in hosts:
            entry = known.setdefault(host, Known())
            if entry.image != image:
                entry.vllm_version, entry.fingerprint, entry.sweep = "", "", ""
            entry.image, entry.image_digest = image, present.get(host, "")
        _save(root, known)


def learn_version(root: Path, record: CellRecord) -> list[str]:
    """Remember the vLLM version a finished cell's log attested for its host. Returns a note for each host of the
    same sweep, facts and image whose log said another version (then their numbers are never ranked or replicated
    together: the report groups by the logged version too)."""
    version = str(record.attestation.get("vllm_version", "") or "")
    if not version or len(version) > 64 or not VERSION.fullmatch(version):
        return []
    fingerprint = str(record.facts.get("fingerprint", "") or "")
    if not FACTS_FINGERPRINT.fullmatch(fingerprint):
        fingerprint = ""
    with _lock:
        known = load(root)
        entry = known.setdefault(record.host, Known())
        entry.vllm_version, entry.fingerprint, entry.sweep, entry.seen_at = (
            version,
            fingerprint,
            record.sweep,
            utc.iso(),
        )
        _save(root, known)
    notes = []
    for other, k in sorted(known.items()):
        if other == record.host or k.sweep != record.sweep or not k.vllm_version or k.vllm_version == version:
            continue
        if k.fingerprint == fingerprint and k.image == entry.image:
            notes.append(
                f"vLLM {version} in the log of {record.host} vs {k.vllm_version} on {other} (same facts and image): "
                "their numbers are not ranked or replicated together"
            )
    for note in notes:
        log.warning("vllm_version_differs", host=record.host, note=note)
    return notes
