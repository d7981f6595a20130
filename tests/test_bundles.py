"""Signed bundles (agent/bundles): share then verify with real ssh-keygen keys, and a generated set of tampered
bundles, one change each, each caught by the check that should catch it. Built from one committed results tree
(tests/bundle_fixtures.py); no sweep, no sshd."""

from __future__ import annotations

import gzip
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.bundles import layout, verify
from agent.cli import main
from tests import bundle_fixtures as bf

pytestmark = pytest.mark.unit

CELL = f"{layout.TREE}/{bf.SWEEP}/h200/8138d5d16072"  # graphs
OTHER = f"{layout.TREE}/{bf.SWEEP}/h200/d3248fd1cee6"  # eager
Files = dict[str, bytes]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("bundles")
    alice, mallory = bf.key(tmp, "alice"), bf.key(tmp, "mallory")
    sweep = bf.results(tmp / "results")
    return {"tmp": tmp, "alice": alice, "mallory": mallory, "bundle": bf.share(sweep, alice, tmp / "a.tgz")}


def _sub(name: str, old: str, new: str, count: int = 1) -> Callable[[Files], Files]:
    def change(files: Files) -> Files:
        text = files[name].decode()
        assert old in text, (name, old)
        return {**files, name: text.replace(old, new, count).encode()}

    return change


def _swap_logs(files: Files) -> Files:
    return {**files, f"{CELL}/server.log": files[f"{OTHER}/server.log"]}


def _add(name: str, data: bytes) -> Callable[[Files], Files]:
    return lambda files: {**files, name: data}


def _drop(name: str) -> Callable[[Files], Files]:
    return lambda files: {k: v for k, v in files.items() if k != name}


def _manifest_hash(files: Files) -> Files:
    text = files[layout.MANIFEST].decode()
    digest = re.search(r'"sha256": "([0-9a-f]{64})"', text)[1]  # type: ignore[index]
    return {**files, layout.MANIFEST: text.replace(digest, "0" * 64, 1).encode()}


def _signature(files: Files) -> Files:
    lines = files[layout.SIGNATURE].decode().splitlines()
    lines[3] = lines[3][:10] + ("A" if lines[3][10] != "A" else "B") + lines[3][11:]
    return {**files, layout.SIGNATURE: ("\n".join(lines) + "\n").encode()}


# (what changes, the change, who re-signs: None = nobody (the old signature stays), "mallory" = a forger with a key
# of their own, who also judges the tree again; the check that must catch it)
TAMPERED = [
    (
        "a window's number",
        _sub(f"{CELL}/c001-r1.toml", "output_throughput = 176.0", "output_throughput = 276.0"),
        None,
        "hashes",
    ),
    ("a log line", _sub(f"{CELL}/server.log", "Using TRITON Fp8 MoE", "Using MARLIN Fp8 MoE"), None, "hashes"),
    ("a hash in the manifest", _manifest_hash, None, "signature"),
    ("the signature", _signature, None, "signature"),
    ("a file the manifest does not list", _add(f"{CELL}/c064-r1.toml", b"concurrency = 64\n"), None, "hashes"),
    ("a file the manifest lists, gone", _drop(f"{CELL}/c032-r2.toml"), None, "hashes"),
    (
        "a forged window, re-signed",
        _sub(f"{CELL}/c001-r1.toml", "total_output_tokens = 1408", "total_output_tokens = 2208"),
        "mallory",
        "plausibility",
    ),
    (
        "a window's throughput alone, re-signed",
        _sub(f"{CELL}/c001-r1.toml", "output_throughput = 176.0", "output_throughput = 276.0"),
        "mallory",
        "plausibility",
    ),
    (
        "the MoE backend in the log, re-signed",
        _sub(f"{CELL}/server.log", "Using TRITON Fp8 MoE", "Using MARLIN Fp8 MoE"),
        "mallory",
        "attestation",
    ),
    ("a log swapped from another cell, re-signed", _swap_logs, "mallory", "attestation"),
    (
        "the attested backend in cell.toml, re-signed",
        _sub(f"{CELL}/cell.toml", 'moe_backend = "triton"', 'moe_backend = "marlin"'),
        "mallory",
        "attestation",
    ),
    (
        "an image by tag, re-signed",
        _sub(f"{CELL}/cell.toml", "@sha256:67b0d6f3", ":latest#67b0d6f3"),
        "mallory",
        "plausibility",
    ),
    (
        "the spec's vLLM version, re-signed",
        _sub(layout.SPEC, 'vllm_version = "0.24.0"', 'vllm_version = "0.25.0"'),
        "mallory",
        "plausibility",
    ),
    (
        "a cell that finished before it started, re-signed",
        _sub(f"{CELL}/cell.toml", 'finished_at = "2026-12-07T15:37:3', 'finished_at = "2026-12-07T15:30:3'),
        "mallory",
        "plausibility",
    ),
    (
        "single-stream decode above the bandwidth ceiling, re-signed",
        _sub(f"{CELL}/cell.toml", "[checkpoint_info]\n", "[checkpoint_info]\nbytes_per_token = 900000000000\n"),
        "mallory",
        "plausibility",
    ),
]
# a report (verdicts.json, judgement.json) that disagrees with its windows: re-signed, not judged again
DISAGREES = [
    ("a median in judgement.json", _sub(layout.CLAIMS, '"median": 176.0625', '"median": 186.0625'), "judgement"),
    ("a verdict in judgement.json", _sub(layout.CLAIMS, '"verdict": "faster"', '"verdict": "equivalent"'), "judgement"),
    ("the noise in judgement.json", _sub(layout.CLAIMS, '"windows": 2', '"windows": 3'), "judgement"),
]


def test_shared_bundle_verifies_re_derived_and_names_its_signer(made, capsys):
    with verify.opened(made["bundle"]) as v:
        assert v.tier == verify.REDERIVED and v.ok, [f.line() for f in v.findings]
        assert len(v.cells) == 2 and v.signer and not v.signer.trusted
    assert main(["verify", str(made["bundle"]), "--allowed-signers", str(made["alice"].with_suffix(".allowed"))]) == 0
    assert "tier re-derived, signed by alice@example" in capsys.readouterr().out
    assert main(["verify", str(made["bundle"]), "--allowed-signers", str(made["mallory"].with_suffix(".allowed"))]) == 1
    out = capsys.readouterr().out
    assert "signature: manifest.sig:" in out and "does not name" in out and "tier none" in out


def test_dry_run_lists_what_goes_out_and_signs_nothing(made, capsys, tmp_path):
    sweep = bf.results(tmp_path)
    (sweep / "h200" / "8138d5d16072" / "notes.txt").write_text("private")
    (sweep / "link.toml").symlink_to("/etc/passwd")
    assert main(["share", str(sweep), "--key", str(made["alice"]), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{CELL}/server.log" in out and re.search(r"\d+ file\(s\) would go out, signed by SHA256:", out)
    assert "notes.txt: not a file of the results tree" in out and "link.toml: a link" in out
    assert not list(Path.cwd().glob("*.spark-bundle.tgz")) and not list(tmp_path.glob("*.tgz"))


@pytest.mark.attack("a bundle with one number, log line, hash, signature or file changed passes verify")
@pytest.mark.parametrize(("what", "change", "resign", "check"), TAMPERED, ids=[t[0] for t in TAMPERED])
def test_each_tampered_bundle_is_caught_by_its_check(made, tmp_path, what, change, resign, check):
    files = change(bf.members(made["bundle"]))
    bundle = bf.repack(files, tmp_path / "t.tgz", made[resign] if resign else None, rejudge=bool(resign))
    with verify.opened(bundle) as v:
        assert check in {f.check for f in v.findings}, (what, [f.line() for f in v.findings])
        assert v.tier == (verify.SIGNED if resign else verify.NONE)


@pytest.mark.attack("a report that disagrees with its windows passes verify")
@pytest.mark.parametrize(("what", "change", "check"), DISAGREES, ids=[t[0] for t in DISAGREES])
def test_a_judgement_that_disagrees_with_its_windows_is_caught(made, tmp_path, what, change, check):
    bundle = bf.repack(change(bf.members(made["bundle"])), tmp_path / "t.tgz", made["mallory"])
    with verify.opened(bundle) as v:
        assert {f.check for f in v.findings} == {check}, [f.line() for f in v.findings]


def test_a_verdicts_json_that_disagrees_is_caught(made, tmp_path):
    files = bf.members(made["bundle"])
    report = f"{layout.TREE}/{bf.SWEEP}/verdicts.json"
    files[report] = b'{"schema": 1, "questions": [{"verdict": "equivalent"}]}\n'
    with verify.opened(bf.repack(files, tmp_path / "t.tgz", made["mallory"])) as v:
        assert [(f.check, f.file) for f in v.findings] == [("report", report)], [f.line() for f in v.findings]


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


HOSTILE = [
    ("a path out of the bundle", [("tree/../../escaped.txt", b"x")], "not a plain name"),
    ("an absolute path", [("/tmp/escaped-bundle.txt", b"x")], "not a path of the bundle's layout"),
    ("a symbolic link", [_link(f"{CELL}/server.log", "/etc/passwd")], "symbolic link"),
    ("a hard link", [_link(f"{CELL}/server.log", "/etc/passwd", tarfile.LNKTYPE)], "hard link"),
    ("a member twice", [(layout.SPEC, b"a"), (layout.SPEC, b"b")], "appears twice"),
    ("a hidden file", [(f"{CELL}/.cell.toml.tmp", b"x")], "not a plain name"),
]


@pytest.mark.attack("a hostile bundle (links, paths out, bombs, huge files) writes outside the store or is read")
@pytest.mark.parametrize(("what", "entries", "said"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bundles_are_refused_in_one_line_and_write_nothing_outside(tmp_path, capsys, what, entries, said):
    bundle = tmp_path / "h.tgz"
    bundle.write_bytes(bf.raw_tar(entries))
    assert main(["verify", str(bundle)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and out[0].startswith("bundle: h.tgz: ") and said in out[0] and "tier none" in out[1], out
    assert not (tmp_path.parent / "escaped.txt").exists() and not Path("/tmp/escaped-bundle.txt").exists()


def test_tar_bombs_huge_files_and_non_bundles_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "MAX_UNPACKED_BYTES", 1 << 20)  # the caps, made small: the same code paths
    cases = {
        "bomb": (bf.raw_tar([(layout.SPEC, bytes(4 << 20))]), "a tar bomb"),
        "not gzip": (b"PK\x03\x04 a zip file", "not a gzip"),
        "not tar": (gzip.compress(b"x" * 1000), "not a tar"),
    }
    for name, (data, said) in cases.items():
        (tmp_path / name).write_bytes(data)
        with verify.opened(tmp_path / name) as v:
            assert v.findings and v.findings[0].check == "bundle" and said in v.findings[0].why, (name, v.findings)
    monkeypatch.setattr(layout, "MAX_UNPACKED_BYTES", 256 << 20)
    monkeypatch.setattr(layout, "MAX_LOG_BYTES", 1 << 20)
    (tmp_path / "huge").write_bytes(bf.raw_tar([(f"{CELL}/server.log", bytes(2 << 20))]))  # over its cap
    with verify.opened(tmp_path / "huge") as v:
        assert "more than 1048576" in v.findings[0].why
