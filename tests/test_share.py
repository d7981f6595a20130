"""Copying a checkpoint between hosts (agent/hostside/share.py), against its real HTTP server on loopback: the copy
is checked against the source's manifest, a wrong token gets nothing, and a copy that does not match leaves nothing
behind that could pass for a checkpoint."""

from __future__ import annotations

import json
import os
import secrets
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.hostside import share

from .test_inspect_build import build_qwen

pytestmark = pytest.mark.unit  # one forked stdlib HTTP server on 127.0.0.1, stopped by PID; no real parts


@pytest.fixture
def served(tmp_path):
    folder = build_qwen(str(tmp_path / "src" / "ckpt"), "uns")
    token = secrets.token_urlsafe(24)
    state = tmp_path / "state" / "share.json"
    info = share.serve(folder, "127.0.0.1", 0, token, idle_s=60, state_file=str(state))
    try:
        yield folder, token, info
    finally:
        share.stop(str(state))


def _tree(folder: str | Path) -> dict[str, bytes]:
    root = Path(folder)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_copy_is_byte_identical_and_idempotent(served, tmp_path):
    folder, token, info = served
    dest = tmp_path / "dst" / "ckpt"
    copied = share.fetch("127.0.0.1", info["port"], token, str(dest), info["manifest"])
    assert copied == info["manifest"]["total_bytes"] > 0
    assert _tree(dest) == _tree(folder)
    assert share.fetch("127.0.0.1", info["port"], token, str(dest), info["manifest"]) == 0, (
        "a matching folder is not copied again"
    )
    assert share.fetch_manifest("127.0.0.1", info["port"], token) == info["manifest"]


def test_wrong_token_and_unlisted_paths_get_nothing(served, tmp_path):
    folder, token, info = served
    (Path(folder).parent / "secret.txt").write_text("not part of the checkpoint")
    for path, tok in (("/manifest", "x" * 32), ("/file/config.json", "wrong"), ("/file/../secret.txt", token)):
        req = urllib.request.Request(info["url"] + path, headers={"Authorization": f"Bearer {tok}"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code in (403, 404)
    with pytest.raises(share.ShareError, match="no manifest"):
        share.fetch_manifest("127.0.0.1", info["port"], "wrong-token-wrong")


def test_a_copy_that_differs_from_the_manifest_leaves_nothing(served, tmp_path):
    folder, token, info = served
    shard = next(Path(folder).glob("*.safetensors"))
    raw = bytearray(shard.read_bytes())
    raw[10] ^= 0x20  # one byte of the JSON header changes: same size, different header hash
    shard.write_bytes(bytes(raw))
    dest = tmp_path / "dst" / "ckpt"
    with pytest.raises(share.ShareError, match="header differs"):
        share.fetch("127.0.0.1", info["port"], token, str(dest), info["manifest"])
    assert not dest.exists()
    assert not [p for p in dest.parent.iterdir() if ".partial-" in p.name], "no half copy is left"


def test_an_existing_different_folder_is_never_overwritten(served, tmp_path):
    _, token, info = served
    dest = tmp_path / "dst" / "ckpt"
    dest.mkdir(parents=True)
    (dest / "mine.txt").write_text("keep me")
    with pytest.raises(share.ShareError, match="move it away"):
        share.fetch("127.0.0.1", info["port"], token, str(dest), info["manifest"])
    assert (dest / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda m: m["files"][0].update(path="../../etc/passwd"),
        lambda m: m["files"][0].update(path="/etc/passwd"),
        lambda m: m["files"][0].update(size=-1),
        lambda m: m["files"].append(dict(m["files"][0])),
        lambda m: m.update(headers_sha256="zz"),
        lambda m: m.update(files=[]),
    ],
    ids=["dotdot", "absolute", "negative-size", "duplicate", "bad-hash", "empty"],
)
def test_a_hostile_manifest_is_refused(served, tmp_path, tamper):
    _, token, info = served
    bad = json.loads(json.dumps(info["manifest"]))
    tamper(bad)
    with pytest.raises(share.ShareError):
        share.fetch("127.0.0.1", info["port"], token, str(tmp_path / "dst" / "ckpt"), bad)
    assert not (tmp_path / "dst" / "ckpt").exists()


def test_a_symlink_out_of_the_folder_is_refused(tmp_path):
    folder = Path(build_qwen(str(tmp_path / "ckpt"), "nv"))
    (tmp_path / "outside").write_text("x")
    os.symlink(tmp_path / "outside", folder / "leak.json")
    with pytest.raises(share.ShareError, match="symlink out of the folder"):
        share.manifest(folder)


def test_the_server_stops_when_idle(tmp_path):
    folder = build_qwen(str(tmp_path / "ckpt"), "nv")
    state = tmp_path / "share.json"
    info = share.serve(folder, "127.0.0.1", 0, "t" * 20, idle_s=0.5, state_file=str(state))
    for _ in range(100):
        if not share._alive(info["pid"]):
            break
        time.sleep(0.05)
    else:
        share.stop(str(state))
        pytest.fail("the share server outlived its idle timeout")


@pytest.mark.attack("checkpoint copy: the source names a file:// URL or a path and the receiver copies its own file")
@pytest.mark.parametrize(
    ("address", "port"),
    [("file:///etc/passwd#", 80), ("127.0.0.1/file/../../x", 80), ("127.0.0.1", "8000/#"), ("[::1]", 80)],
)
def test_the_receiver_takes_no_url_or_path_from_a_host(tmp_path, address, port):
    victim = tmp_path / "victim.txt"
    victim.write_text("the receiver's own secret\n")
    expected = {"files": [{"path": "x", "size": victim.stat().st_size, "header_sha256": ""}], "total_bytes": 0}
    expected["total_bytes"] = expected["files"][0]["size"]
    with pytest.raises(share.ShareError, match="is not"):
        share.fetch(address, port, "t" * 20, str(tmp_path / "dst"), expected)
    assert not (tmp_path / "dst").exists()


@pytest.mark.attack("checkpoint copy: the source redirects the receiver to another server (its own loopback services)")
def test_the_receiver_follows_no_redirect(served, tmp_path):
    import http.server
    import threading

    _folder, token, info = served

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # every file is "over there": the honest server, or anything the receiver can reach
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{info['port']}{self.path}")
            self.end_headers()

        def log_message(self, *args):
            pass

    hostile = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=hostile.serve_forever, daemon=True).start()
    try:
        with pytest.raises(share.ShareError, match="not followed"):
            share.fetch("127.0.0.1", hostile.server_address[1], token, str(tmp_path / "dst"), info["manifest"])
    finally:
        hostile.shutdown()
        hostile.server_close()
    assert not (tmp_path / "dst").exists() and not list(tmp_path.glob(".dst.partial-*"))
