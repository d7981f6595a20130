"""Issue 48, the attacks that need hosts (real sshd test hosts, real Ansible, a real docker-registry): a host that
answers an older digest of the tracked repository, one that answers something that is no digest (terminal escapes
and all), and two hosts that disagree where the controller cannot ask the registry. Each is exit 2 before any host
pulls the image.

The hosts' docker is a shell script on their PATH (spark_environment) that answers `pull` and `image inspect` as a
compromised host's docker would: the spark_image module on the host runs unchanged and reports what it was told."""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.request
from pathlib import Path

import pytest
import yaml

from agent.cli import main

from .fixtures_docker import REGISTRY, free_port, start_registry, stop_pid
from .sshd_hosts import inventory_for
from .test_pin import SPEC
from .test_sweep import write_spec

pytestmark = pytest.mark.integration

DOCKER = """#!/bin/sh
# a lying host's docker: every pull works, and the image's RepoDigests are whatever answer.json holds
case "$1" in
  pull) exit 0 ;;
  image) cat "$(dirname "$0")/answer.json" ;;
  *) exit 1 ;;
esac
"""


def _push_manifest(registry: str, repo: str, tag: str, note: str) -> str:
    """An image manifest (no layers) pushed to a real registry under `tag`; returns its digest."""
    config = json.dumps({"architecture": "arm64", "os": "linux", "note": note}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    with urllib.request.urlopen(urllib.request.Request(f"http://{registry}/v2/{repo}/blobs/uploads/", b"")) as r:
        location = r.headers["Location"]
    upload = urllib.request.Request(
        f"{location}{'&' if '?' in location else '?'}digest={config_digest}",
        config,
        method="PUT",
        headers={"Content-Type": "application/octet-stream"},
    )
    urllib.request.urlopen(upload).close()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [],
        }
    ).encode()
    put = urllib.request.Request(
        f"http://{registry}/v2/{repo}/manifests/{tag}",
        manifest,
        method="PUT",
        headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
    )
    urllib.request.urlopen(put).close()
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


@pytest.fixture()
def registry(tmp_path):
    if not Path(REGISTRY).exists():
        pytest.skip("docker-registry not installed (apt install docker-registry)")
    root = tmp_path / "reg"
    root.mkdir()
    proc, address = start_registry(root)
    try:
        yield address
    finally:
        stop_pid(proc.pid)


def _lying_fleet(ssh_fleet, tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    answers = {}
    host_vars = {}
    for h in ssh_fleet.hosts:
        bin_ = tmp_path / f"bin-{h.name}"
        bin_.mkdir()
        (bin_ / "docker").write_text(DOCKER)
        (bin_ / "docker").chmod(0o755)
        answers[h.name] = bin_ / "answer.json"
        host_vars[h.name] = {"spark_environment": {"PATH": f"{bin_}:/usr/bin:/bin"}}
    inv = inventory_for(ssh_fleet)
    for name, hv in inv["all"]["children"]["sparks"]["hosts"].items():
        hv.update(host_vars[name])
    path = tmp_path / "lying.yml"
    path.write_text(yaml.safe_dump(inv))
    return path, answers


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("spark-agent: error: ")]
    assert len(lines) == 1, err
    assert "\x1b" not in err and "Traceback" not in err, err
    return lines[0]


@pytest.mark.attack("pin/watch: a host answers an older digest, no digest at all, or disagrees with the other host")
def test_a_host_never_chooses_the_fleets_image(ssh_fleet, registry, tmp_path, capsys):
    inventory, answers = _lying_fleet(ssh_fleet, tmp_path)
    repo = f"{registry}/vllm-sim"
    old = _push_manifest(registry, "vllm-sim", "stable", "old")
    new = _push_manifest(registry, "vllm-sim", "stable", "new")  # the tag moved on; the host still says `old`
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    pin = ["pin", f"{repo}:stable", "--host", "spark-a", "-i", str(inventory), "--write", str(spec)]

    answers["spark-a"].write_text(json.dumps([f"{repo}@{old}"]))
    assert main(pin) == 2
    line = _one_error(capsys.readouterr().err)
    assert old in line and new in line and "the registry" in line, line  # both answers named
    assert spec.read_text() == SPEC  # nothing written

    answers["spark-a"].write_text(json.dumps([f"{repo}@{new[:20]}\x1b[2J/../../etc"]))
    assert main(pin) == 2
    assert "not name@sha256:<64 hex>" in _one_error(capsys.readouterr().err)
    assert spec.read_text() == SPEC

    # (an honest host confirmed by the registry: test_pin_docker.py, on a real dockerd)

    # The controller cannot ask this registry (nothing listens there): the second host is the second source.
    elsewhere = f"127.0.0.1:{free_port()}/vllm-sim"
    answers["spark-a"].write_text(json.dumps([f"{elsewhere}@{old}"]))
    answers["spark-b"].write_text(json.dumps([f"{elsewhere}@{new}"]))
    results = tmp_path / "results"
    watched = write_spec(tmp_path, "watched")
    watch = ["watch", str(watched), "-i", str(inventory), "--track", f"{elsewhere}:stable", "--results", str(results)]
    assert main(watch) == 2
    line = _one_error(capsys.readouterr().err)
    assert "spark-a answers " + old in line and "spark-b answers " + new in line, line
    assert not [p for p in results.iterdir() if p.name.startswith("watched")] if results.exists() else True
    shutil.rmtree(results, ignore_errors=True)
