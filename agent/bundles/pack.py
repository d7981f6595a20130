"""`spark-agent share RESULTS/SWEEP`: one bundle file of a sweep, redacted, hashed, judged and signed.

The tree is copied file by file into a private staging folder (only the files of layout.py; links, temp files,
plots and anything else are left out and listed), every text masked again by hostside/redact (the results are
masked as written; a secret remembered since, or a pattern added since, is masked here too), judged there
(claims.py), hashed into the manifest, and the manifest signed with the owner's SSH key.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent import __version__
from agent.bundles import claims, layout, signing
from agent.errors import UserError
from agent.hostside import atomic, redact, utc
from agent.results import tree

DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_ed25519_sk", "id_ecdsa_sk", "id_rsa")


@dataclass
class Plan:
    """What would go out: bundle path -> source file, and what is left out with why."""

    sweep: str
    files: dict[str, Path] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)


def default_key() -> Path:
    ssh = Path.home() / ".ssh"
    for name in DEFAULT_KEYS:
        if (ssh / name).is_file():
            return ssh / name
    raise UserError(
        f"no SSH key in {ssh} ({', '.join(DEFAULT_KEYS)}); pass --key FILE (ssh-keygen -t ed25519 makes one)"
    )


def plan(sweep_folder: Path, spec: Path | None = None) -> Plan:
    """The files of a sweep folder that go out; UserError (one line) when it is not a sweep's folder."""
    folder = Path(sweep_folder)
    if not folder.is_dir() or folder.is_symlink():
        raise UserError(f"{folder}: no such sweep folder (pass results/<sweep>, the folder a sweep wrote)")
    name = folder.resolve().name
    if not tree.PART.fullmatch(name):
        raise UserError(f"{folder}: {name!r} is not a sweep's folder name")
    out = Plan(name)
    base = f"{layout.TREE}/{name}"
    for entry in sorted(folder.iterdir()):
        rel = f"{base}/{entry.name}"
        if _is_file(entry) and entry.name in layout.SWEEP_FILES:
            out.files[rel] = entry
        elif _is_dir(entry) and tree.PART.fullmatch(entry.name):
            _host(entry, rel, out)
        else:
            out.left_out.append(f"{entry}: {_why(entry)}")
    if not any(p.endswith("/" + tree.CELL_FILE) for p in out.files):
        raise UserError(f"{folder}: no finished cell (no <host>/<cell>/cell.toml); pass the folder of one sweep")
    if spec is not None:
        if not _is_file(spec) or spec.stat().st_size > layout.MAX_FILE_BYTES:
            raise UserError(f"{spec}: not a spec file (--spec takes the sweep's TOML spec)")
        out.files[layout.SPEC] = spec
    return out


def _host(folder: Path, rel: str, out: Plan) -> None:
    for cell in sorted(folder.iterdir()):
        if not (_is_dir(cell) and tree.CELL_ID.fullmatch(cell.name) and _is_file(cell / tree.CELL_FILE)):
            out.left_out.append(f"{cell}: {_why(cell) if not _is_dir(cell) else 'not a finished cell folder'}")
            continue
        for f in sorted(cell.iterdir()):
            if _is_file(f) and layout.cell_file_allowed(f.name):
                out.files[f"{rel}/{cell.name}/{f.name}"] = f
            else:
                out.left_out.append(f"{f}: {_why(f)}")


def _is_file(p: Path) -> bool:
    return stat.S_ISREG(p.lstat().st_mode)


def _is_dir(p: Path) -> bool:
    return stat.S_ISDIR(p.lstat().st_mode)


def _why(p: Path) -> str:
    if p.is_symlink():
        return "a link (links never go out)"
    if p.name.startswith("."):
        return "hidden or temporary"
    if p.suffix in (".png", ".html"):
        return "a rendering (the report's numbers travel in report.md, verdicts.json and judgement.json)"
    return "not a file of the results tree"


def stage(p: Plan, into: Path) -> dict[str, bytes]:
    """Every file of the plan, masked (hostside/redact), written under `into` as the bundle will hold it; returns
    the bytes of each, by bundle path."""
    out: dict[str, bytes] = {}
    for rel, src in p.files.items():
        limit = layout.cap(rel)
        if src.stat().st_size > limit:
            raise UserError(f"{src}: {src.stat().st_size} bytes, more than a bundle takes ({limit}); leave it out")
        data = _masked(src.read_bytes())
        dest = into / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        out[rel] = data
    return out


def _masked(data: bytes) -> bytes:
    """Line by line, every byte that is not a secret kept (a log cut mid-character stays as it is)."""
    text = data.decode("utf-8", errors="surrogateescape")
    return redact.redact_text(text).encode("utf-8", errors="surrogateescape")


def build(p: Plan, key: Path, principal: str = "") -> bytes:
    """The bundle's bytes: staged, judged, hashed and signed."""
    fingerprint, comment = signing.key_fingerprint(key)
    with tempfile.TemporaryDirectory(prefix="spark-share-") as tmp:
        files = stage(p, Path(tmp))
        try:
            judged = claims.of_tree(Path(tmp) / layout.TREE / p.sweep)
        except ValueError as exc:
            raise UserError(
                f"{p.sweep}: a file of the tree cannot be read ({exc}); fix or remove it, then share"
            ) from None
        files[layout.CLAIMS] = claims.dumps(judged)
        _drop_stale_report(p, files, judged)
    manifest = layout.Manifest(
        format=layout.FORMAT,
        schema=layout.SCHEMA,
        created_at=utc.iso(),
        agent_version=__version__,
        sweep=p.sweep,
        signer=principal or comment or fingerprint,
        files={
            rel: layout.FileEntry(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
            for rel, data in sorted(files.items())
        },
    )
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    signature = signing.sign(manifest_bytes, key)
    return _tar({layout.MANIFEST: manifest_bytes, layout.SIGNATURE: signature, **files})


def _drop_stale_report(p: Plan, files: dict[str, bytes], judged: dict[str, Any]) -> None:
    """A report written by an earlier judgement (another version, other settings) would fail verify's report
    check: it stays home, said, and `spark-agent report` then `share` again brings it along."""
    report = f"{layout.TREE}/{p.sweep}/verdicts.json"
    if report not in files:
        return
    try:
        questions = json.loads(files[report]).get("questions")
    except (ValueError, AttributeError):
        questions = None
    if claims.differences(questions, judged["verdicts"]):
        for name in ("verdicts.json", "report.md"):
            if files.pop(f"{layout.TREE}/{p.sweep}/{name}", None) is not None:
                p.left_out.append(
                    f"{p.files.pop(f'{layout.TREE}/{p.sweep}/{name}')}: written by an earlier judgement than this "
                    "one; run `spark-agent report` on the sweep, then share again to include it"
                )


def _tar(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def write(bundle: bytes, out: Path) -> Path:
    if len(bundle) > layout.MAX_BUNDLE_BYTES:
        raise UserError(f"the bundle would be {len(bundle)} bytes, more than {layout.MAX_BUNDLE_BYTES} (verify's cap)")
    atomic.write_bytes(out, bundle)
    os.chmod(out, 0o644)
    return out
