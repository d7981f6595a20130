"""A hub checkpoint downloaded once for the fleet (issue 13 §5): one host downloads it from the hub (hostside/hub.py,
the hub's HTTP API), the others copy it over the fleet's links, verified; the token stays out of every result, log,
file and process list. The hub is tests/hub_server.py (no network here): the hub's two endpoints, its response
shapes, a token, and a count of every download. Three real sshd hosts, real Ansible."""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from agent.hostside import hub, share
from agent.planning.inventory import load_inventory
from agent.planning.spec import load_spec
from agent.running import hubcopy

from .hub_server import FakeHub
from .sshd_hosts import SIM_HOST_VARS, TEST_NET, inventory_for, start_fleet, stop_fleet
from .test_sweep import write_spec

pytestmark = pytest.mark.integration

REPO_ID = "tiny-org/tiny-moe"
TOKEN = "hf_TestTokenNeverShown0123456789abcdef"


def _safetensors(path: Path, values: bytes) -> None:
    header = json.dumps({"w": {"dtype": "F16", "shape": [len(values) // 2], "data_offsets": [0, len(values)]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + values)


@pytest.fixture(scope="module")
def fake_hub(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub") / REPO_ID
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["Qwen3MoeForCausalLM"]}\n')
    _safetensors(folder / "model-00001-of-00002.safetensors", b"\x01\x02" * 512)
    _safetensors(folder / "model-00002-of-00002.safetensors", b"\x03\x04" * 256)
    served = FakeHub(address=f"{TEST_NET}.9", repos={REPO_ID: folder}, token=TOKEN).start()
    try:
        yield served
    finally:
        served.stop()


def test_the_hub_client_downloads_into_the_cache_layout_once(tmp_path, fake_hub):
    cache = str(tmp_path / "hub")
    with pytest.raises(hub.HubError, match=r"answered 401 .*token") as bad:
        hub.download(fake_hub.url, REPO_ID, "main", cache, "hf_wrong")
    assert "hf_wrong" not in str(bad.value)
    before = sum(fake_hub.downloads.values())
    got = hub.download(fake_hub.url, REPO_ID, "main", cache, TOKEN)
    commit = FakeHub.commit(REPO_ID)
    assert got["commit"] == commit and got["files"] == 3 and got["downloaded"]
    assert got["path"] == f"{cache}/models--tiny-org--tiny-moe/snapshots/{commit}"
    assert Path(cache, "models--tiny-org--tiny-moe", "refs", "main").read_text() == commit
    assert share.manifest(got["path"])["files"] == share.manifest(fake_hub.repos[REPO_ID])["files"]
    again = hub.download(fake_hub.url, REPO_ID, "main", cache, TOKEN)
    assert not again["downloaded"] and sum(fake_hub.downloads.values()) - before == 3


def test_a_fleet_downloads_a_hub_checkpoint_once_and_the_token_stays_secret(tmp_path, fake_hub, capfd):
    fleet = start_fleet(tmp_path / "fleet", count=3)
    try:
        inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": 8104})
        for h in fleet.hosts:
            inv["all"]["children"]["sparks"]["hosts"][h.name]["spark_model_cache"] = str(h.workdir / "hf")
        inv["all"]["vars"] = {
            hubcopy.ENABLE: True,
            "spark_hub_endpoint": fake_hub.url,
            "spark_hub_token": TOKEN,  # a vaulted value in real inventories
        }
        inventory = tmp_path / "inventory.yml"
        inventory.write_text(yaml.safe_dump(inv))
        spec_path = write_spec(tmp_path, "hub", backends=("marlin",))
        spec_path.write_text(spec_path.read_text().replace('model = "uns-fast"', f'model = "{REPO_ID}"'))
        spec = load_spec(spec_path)
        hosts = load_inventory(inventory)

        seen: list[str] = []
        stop = threading.Event()

        def watch_ps() -> None:  # the token on any process's command line while the fleet downloads
            while not stop.is_set():
                ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
                seen.extend(line for line in ps.splitlines() if TOKEN in line)
                stop.wait(0.1)

        watcher = threading.Thread(target=watch_ps, daemon=True)
        watcher.start()
        before = dict(fake_hub.downloads)
        try:
            done = hubcopy.download_once(inventory, spec, hosts)
        finally:
            stop.set()
            watcher.join()

        commit = FakeHub.commit(REPO_ID)
        assert done["uns-fast"]["commit"] == commit and done["uns-fast"]["bytes"] > 0
        new = {k: v - before.get(k, 0) for k, v in fake_hub.downloads.items()}
        assert new == {f"{REPO_ID}/{f}": 1 for f in _files(fake_hub)}  # one download of each file for three hosts
        source = share.manifest(fake_hub.repos[REPO_ID])["files"]
        for h in fleet.hosts:  # every host: the same files, sizes and header hashes, and the revision's ref
            repo_dir = h.workdir / "hf" / "hub" / "models--tiny-org--tiny-moe"
            assert share.manifest(repo_dir / "snapshots" / commit)["files"] == source, h.name
            assert (repo_dir / "refs" / "main").read_text() == commit, h.name
        assert not seen, "the token was on a process's command line"
        out, err = capfd.readouterr()
        assert TOKEN not in out + err
        for path in tmp_path.rglob("*"):  # nothing written on any host or here holds it (inventory aside)
            if path.is_file() and path != inventory and not path.is_symlink():
                with contextlib.suppress(OSError):
                    assert TOKEN.encode() not in path.read_bytes(), path
    finally:
        for h in fleet.hosts:  # the share server stops by itself when idle; stop it now if one is left
            with contextlib.suppress(Exception):
                share.stop(str(h.workdir / "state" / "share.json"))
        stop_fleet(fleet)


def _files(served: FakeHub) -> list[str]:
    folder = served.repos[REPO_ID]
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
