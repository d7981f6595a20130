"""Seeding the fleet's mirror copies the image's manifests and blobs as they are (agent/hostside/registry.py): the
mirror serves the pinned digest byte for byte, with no docker and no recompression on the way. Real registries
(Debian's docker-registry, distribution v2) for the copy; a hostile "registry" that lies about a manifest."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.request

import pytest

from agent.hostside import registry
from tests.fixtures_docker import start_registry, stop_pid

pytestmark = pytest.mark.integration

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _put_blob(reg: str, repo: str, data: bytes) -> str:
    digest = _digest(data)
    post = urllib.request.Request(f"http://{reg}/v2/{repo}/blobs/uploads/", data=b"", method="POST")
    with urllib.request.urlopen(post) as resp:
        location = resp.headers["Location"]
    url = location if location.startswith("http") else f"http://{reg}{location}"
    url += ("&" if "?" in url else "?") + f"digest={digest}"
    put = urllib.request.Request(url, data=data, method="PUT", headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(put).close()
    return digest


def _put_manifest(reg: str, repo: str, ref: str, body: bytes, media_type: str) -> None:
    req = urllib.request.Request(
        f"http://{reg}/v2/{repo}/manifests/{ref}", data=body, method="PUT", headers={"Content-Type": media_type}
    )
    urllib.request.urlopen(req).close()


def _get(reg: str, repo: str, tail: str, accept: str = "") -> bytes:
    req = urllib.request.Request(f"http://{reg}/v2/{repo}/{tail}", headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req) as resp:
        return resp.read()


@pytest.fixture
def registries(tmp_path):
    procs = []
    (tmp_path / "source").mkdir()
    (tmp_path / "mirror").mkdir()
    try:
        source_proc, source = start_registry(tmp_path / "source")
        procs.append(source_proc)
        mirror_proc, mirror = start_registry(tmp_path / "mirror")
        procs.append(mirror_proc)
        yield source, mirror
    finally:
        for proc in procs:
            stop_pid(proc.pid)


def _image(reg: str, repo: str, layer: bytes) -> tuple[str, bytes, list[str]]:
    """An OCI image of one layer (gzip bytes the registry never recompresses) → its manifest digest."""
    config = json.dumps({"architecture": "arm64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
    blobs = [_put_blob(reg, repo, config.encode()), _put_blob(reg, repo, layer)]
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blobs[0], "size": 1},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blobs[1], "size": 1}],
        },
        indent=3,  # unusual formatting on purpose: a copy that re-serialises the JSON would change the digest
    ).encode()
    digest = _digest(body)
    _put_manifest(reg, repo, digest, body, MANIFEST)
    return digest, body, blobs


def test_the_mirror_serves_the_same_bytes_under_the_same_digest(registries):
    source, mirror = registries
    repo = "nvidia/vllm"
    arm, arm_body, arm_blobs = _image(source, repo, b"\x1f\x8barm-layer" * 5000)
    amd, _, amd_blobs = _image(source, repo, b"\x1f\x8bamd-layer" * 5000)
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [
                {"mediaType": MANIFEST, "digest": arm, "size": 1, "platform": {"architecture": "arm64", "os": "linux"}},
                {"mediaType": MANIFEST, "digest": amd, "size": 1, "platform": {"architecture": "amd64", "os": "linux"}},
            ],
        }
    ).encode()
    pinned = _digest(index)
    _put_manifest(source, repo, pinned, index, INDEX)

    assert registry.copy(f"{source}/{repo}", pinned, mirror) is True
    assert _get(mirror, repo, f"manifests/{pinned}", INDEX) == index  # the index itself, byte for byte
    assert _get(mirror, repo, f"manifests/{arm}", MANIFEST) == arm_body
    for blob in arm_blobs + amd_blobs:  # a registry serves an index only with every manifest it names
        assert _digest(_get(mirror, repo, f"blobs/{blob}")) == blob
    tags = json.loads(_get(mirror, repo, "tags/list"))["tags"]
    assert f"spark-agent-{pinned[7:19]}" in tags, "the copy is named on the mirror"
    assert registry.copy(f"{source}/{repo}", pinned, mirror) is False, "a seeded mirror is not copied again"


def test_a_digest_the_source_does_not_have_is_one_clear_error(registries):
    source, mirror = registries
    missing = "sha256:" + "0" * 64
    with pytest.raises(registry.RegistryError, match="not there"):
        registry.copy(f"{source}/nvidia/vllm", missing, mirror)


class _LyingRegistry(http.server.BaseHTTPRequestHandler):
    """Answers any manifest with a body whose digest is not the one asked for (a compromised or broken source)."""

    def do_GET(self):
        body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST, "config": {}, "layers": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", MANIFEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_source_that_sends_another_manifest_is_refused_before_the_mirror_is_written(registries):
    _, mirror = registries
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LyingRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        asked = "sha256:" + "1" * 64
        with pytest.raises(registry.RegistryError, match="another digest"):
            registry.copy(f"127.0.0.1:{server.server_port}/nvidia/vllm", asked, mirror)
    finally:
        server.shutdown()
        server.server_close()
    catalog = urllib.request.urlopen(f"http://{mirror}/v2/_catalog").read()
    assert json.loads(catalog)["repositories"] in ([], None), "nothing was written to the mirror"
