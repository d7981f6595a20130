"""Bundles for the tests, made from one committed results tree (docs/runs/h100-graphs-eager/results: two cells of
real vLLM 0.24.0 on an H100, CUDA graphs against eager) with real ssh-keygen keys: no sweep runs."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import tomli_w

from agent.bundles import claims, layout, pack, signing

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "docs" / "runs" / "h100-graphs-eager"
TREE = RUN / "results"
SPEC = RUN / "gpu-graphs-eager.toml"
SWEEP = "gpu-graphs-eager"


def key(folder: Path, name: str) -> Path:
    """A passphrase-less ed25519 key `name` (its comment name@example); its allowed-signers line is name.allowed."""
    path = folder / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@example", "-f", str(path)], check=True
    )
    public = path.with_suffix(".pub").read_text().split()
    path.with_suffix(".allowed").write_text(f"{name}@example {public[0]} {public[1]}\n")
    return path


def results(folder: Path, host: str = "h200", scale: float = 1.0) -> Path:
    """A copy of the tree as `host` measured it; scale: every window's tokens and throughput times this (the
    server's cross-check dropped, as a host without /metrics writes it), the report left out (judged again)."""
    sweep = folder / SWEEP
    shutil.copytree(TREE, sweep, ignore=shutil.ignore_patterns("*.png", "*.html", "report.md", "verdicts.json"))
    if host != "h200":
        (sweep / "h200").rename(sweep / host)
    for cell_file in sweep.glob("*/*/cell.toml"):
        edit_toml(cell_file, lambda t: t.update(host=host))
        for window in cell_file.parent.glob("c*-r*.toml"):
            if scale != 1.0:
                edit_toml(window, lambda t: _scale(t, scale))
    return sweep


def _scale(t: dict, scale: float) -> None:
    t["total_output_tokens"] = round(t["total_output_tokens"] * scale)
    t["output_throughput"] = t["total_output_tokens"] / t["duration"]
    t["server"]["scraped"] = False


def edit_toml(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    table = tomllib.loads(path.read_text())
    change(table)
    path.write_text(tomli_w.dumps(table))


def share(sweep: Path, signer: Path, out: Path, spec: Path | None = SPEC) -> Path:
    return pack.write(pack.build(pack.plan(sweep, spec), signer), out)


def members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(bundle.read_bytes()))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


def repack(files: dict[str, bytes], out: Path, signer: Path | None = None, rejudge: bool = False) -> Path:
    """A bundle of these members; with a signer, a new manifest (and judgement, with rejudge) signed by it: what a
    forger holding a key writes. Without, the members as they are (the old signature stays)."""
    files = dict(files)
    if signer is not None:
        if rejudge:
            stage = out.with_suffix(".stage")
            for name, data in files.items():
                (stage / name).parent.mkdir(parents=True, exist_ok=True)
                (stage / name).write_bytes(data)
            files[layout.CLAIMS] = claims.dumps(claims.of_tree(stage / layout.TREE / SWEEP))
            shutil.rmtree(stage)
        manifest = json.loads(files[layout.MANIFEST])
        body = {n: d for n, d in files.items() if n not in (layout.MANIFEST, layout.SIGNATURE)}
        manifest["files"] = {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in body.items()}
        files[layout.MANIFEST] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
        files[layout.SIGNATURE] = signing.sign(files[layout.MANIFEST], signer)
    out.write_bytes(raw_tar([(n, d) for n, d in files.items()]))
    return out


def raw_tar(entries: list[tuple[str, bytes] | tarfile.TarInfo], compress: bool = True) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
                continue
            info = tarfile.TarInfo(entry[0])
            info.size = len(entry[1])
            tar.addfile(info, io.BytesIO(entry[1]))
    return gzip.compress(raw.getvalue()) if compress else raw.getvalue()
