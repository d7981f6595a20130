"""Pure pieces of fleet provisioning and the SSH tools: the mirror's name for a pinned image, the known_hosts file a
host's ssh args name, and how a path on the host is quoted."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from agent.hostside import docker as sdocker
from agent.planning.inventory import Host
from agent.running import connection, hostkeys, serverlog

pytestmark = pytest.mark.unit

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("ref", "mirror", "expected"),
    [
        (f"nvcr.io/nvidia/vllm@{D}", "10.0.0.1:5000", f"10.0.0.1:5000/nvidia/vllm@{D}"),
        (f"vllm/vllm-openai@{D}", "spark-1:5000", f"spark-1:5000/vllm/vllm-openai@{D}"),
        (f"127.0.0.1:5000/vllm-sim@{D}", "127.0.0.1:6000", f"127.0.0.1:6000/vllm-sim@{D}"),
        (f"localhost/x@{D}", "m:1", f"m:1/x@{D}"),
    ],
)
def test_mirror_ref_keeps_the_repository_path_and_digest(ref, mirror, expected):
    assert sdocker.mirror_ref(ref, mirror) == expected


@pytest.mark.parametrize("mirror", ["", "a b:5000", "-oProxy:1", "host/path:5000", "x;y"])
def test_mirror_must_be_a_registry_address(mirror):
    with pytest.raises(ValueError, match="registry address"):
        sdocker.mirror_ref(f"nvcr.io/nvidia/vllm@{D}", mirror)


def test_known_hosts_comes_from_the_hosts_ssh_args(tmp_path):
    args = f"-o ControlMaster=auto -o UserKnownHostsFile={tmp_path}/kh -o StrictHostKeyChecking=yes"
    assert connection.known_hosts_file({"ansible_ssh_common_args": args}) == tmp_path / "kh"
    assert connection.known_hosts_file({"ansible_ssh_extra_args": f"-oUserKnownHostsFile={tmp_path}/x"}) == (
        tmp_path / "x"
    )
    assert connection.known_hosts_file({}) == Path("~/.ssh/known_hosts").expanduser()


def test_target_uses_the_inventory_vars_and_names_ports_as_openssh_does(tmp_path):
    host = Host("spark-1", {"ansible_host": "10.0.0.5", "ansible_port": 2222, "ansible_user": "me"})
    t = connection.target(host)
    assert (t.address, t.port, t.user, t.known_hosts_name) == ("10.0.0.5", 2222, "me", "[10.0.0.5]:2222")
    assert connection.target(Host("s", {"ansible_host": "10.0.0.6"})).known_hosts_name == "10.0.0.6"
    with pytest.raises(Exception, match="local"):
        connection.target(Host("l", {"ansible_connection": "local"}))


def test_fingerprint_is_openssh_sha256_form():
    assert hostkeys.fingerprint(b"") == "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"


@pytest.mark.parametrize(
    ("workdir", "shell_sees"),
    [
        ("~/.spark-agent", "~/.spark-agent/runs/x/server.log"),
        ("/srv/spark agent", "/srv/spark agent/runs/x/server.log"),
        ("/tmp/$(reboot)", "/tmp/$(reboot)/runs/x/server.log"),
    ],
)
def test_host_paths_are_one_shell_word(workdir, shell_sees):
    word = serverlog.host_path(workdir, "runs", "x", "server.log")
    literal = word.replace("~/", "HOME_/", 1) if word.startswith("~/") else word
    [parsed] = shlex.split(literal)
    assert parsed == shell_sees.replace("~/", "HOME_/", 1)
