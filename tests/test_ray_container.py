"""Issue 40, item 2: on the docker runtime a Ray node runs in its container as a non-root user and no Ray task finds
the cell's env file. Real parts: a private dockerd and local registry (tests/fixtures_docker.py), an image holding
this venv's Ray (built here, no download), the cell's env file written by provision's writer, a Ray head started
through agent/hostside/raynode.py exactly as the spark_ray module starts it. Then a driver holding the cell's token
(what a peer node holds) runs a task on the head that tries to read the env file. Slow (builds a ~300 MB image,
starts a Ray head): run alone."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from agent.hostside import docker as sdocker
from agent.hostside import raynode, serving

from .fixtures_docker import build_and_push_ray_image, free_port
from .sshd_hosts import host_address
from .test_multinode import _free_base

pytestmark = [pytest.mark.integration, pytest.mark.docker]

CELL = "c0ffee0040a2"
SECRET = "hf_" + "q" * 34  # an HF token's shape: the value must never be readable from a file in the container
# A driver holding the cell's token (a peer node holds it) runs one task on the head: who it runs as, where, and
# what it can open. Only names and outcomes come back, never a value.
PROBE = """
import json, os, sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote
def probe(paths):
    seen = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "home": os.environ.get("HOME"), "open": {}}
    for path in paths:
        try:
            with open(path) as handle:
                seen["open"][path] = "read %d bytes" % len(handle.read())
        except OSError as exc:
            seen["open"][path] = type(exc).__name__
    cache = os.path.join(os.environ["HOME"], ".cache", "vllm")  # vLLM's, FlashInfer's, Triton's caches: HOME
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "probe"), "w") as handle:
        handle.write("x")
    seen["env_names"] = sorted(os.environ)
    return seen

print("SEEN " + json.dumps(ray.get(probe.remote(json.loads(sys.argv[2])), timeout=120)))
"""


@pytest.fixture(scope="module")
def ray_image(dockerd) -> str:
    return build_and_push_ray_image(dockerd)


@pytest.fixture(scope="module")
def ray_node(dockerd, ray_image, tmp_path_factory):
    """The cell's Ray head in its container, on a test host's loopback address; its env file holds an HF token."""
    os.environ["DOCKER_HOST"] = dockerd.host  # raynode's docker calls and the node's `docker run` use this daemon
    workdir = tmp_path_factory.mktemp("ray-container-host")
    serving.write_env_files(str(workdir), [{"id": CELL, "env": {"HF_TOKEN": SECRET, "VLLM_LOGGING_LEVEL": "INFO"}}])
    env_file = workdir / "env" / f"{CELL}.env"
    root = tempfile.mkdtemp(prefix="sa-rcont-", dir="/tmp")  # short: Ray's sockets live under it
    address = host_address(41)
    head = f"{address}:{free_port(address)}"
    base = _free_base()
    user = raynode.container_user("" if os.getuid() else "65534:65534")  # a root login names a non-root user
    folder = str(raynode.cell_temp_dir(root, CELL))
    name = raynode.container_name(CELL, base)
    command = raynode.container_argv(
        ray_image, name, CELL, str(env_file), folder, False, user, f"{folder}/{raynode.TOKEN_FILE}"
    )
    command += raynode.argv(
        ["ray"], "head", address, head, base, str(raynode.ray_temp_dir(root, CELL)), 1, {"spark_sim_gpu": 1}, 80
    )
    try:
        started = raynode.start(
            workdir=str(workdir), cell_id=CELL, role="head", command=command, env={}, holder={}, timeout_s=240,
            image=ray_image, container=name, temp_root=root, token=secrets.token_hex(24), user=user,
        )  # fmt: skip
        assert started["user"] == user[0] != 0
        yield {"workdir": workdir, "env_file": env_file, "folder": folder, "name": name, "head": head}
    finally:
        raynode.stop(str(workdir))
        shutil.rmtree(root, ignore_errors=True)
        os.environ.pop("DOCKER_HOST", None)


def _probe(node: dict, paths: list[str]) -> dict:
    done = subprocess.run(
        ["docker", "exec", node["name"], "python3", "-c", PROBE, node["head"], json.dumps(paths)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("SEEN ")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(lines[-1][5:])


@pytest.mark.attack("multinode: a peer's Ray task on the head runs as root or reads the cell's env file (HF token)")
def test_a_ray_task_in_the_nodes_container_is_not_root_and_finds_no_env_file(dockerd, ray_node):
    env_file = ray_node["env_file"]
    run_folder = ray_node["workdir"] / "runs" / CELL
    st = env_file.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()  # on the host: the login user's only
    assert not str(env_file).startswith(ray_node["folder"])  # outside the one folder the container mounts
    climbed = ray_node["folder"] + "/.." * 8 + str(env_file)  # up from the mounted folder, then down the host's path
    seen = _probe(ray_node, [str(env_file), str(run_folder / ".." / ".." / "env" / env_file.name), climbed])
    assert seen["uid"] != 0 and seen["gid"] != 0
    assert seen["cwd"] == seen["home"] == f"{ray_node['folder']}/{raynode.HOME_DIR}"  # writable: caches go there
    assert set(seen["open"].values()) == {"FileNotFoundError"}, seen["open"]
    # What still holds (docs/security.md): the values are in the node's environment, as vLLM's workers need them.
    assert "HF_TOKEN" in seen["env_names"] and not any(SECRET in n for n in seen["env_names"])
    config = sdocker._docker(["inspect", "--format", "{{json .Config.User}}", ray_node["name"]], dockerd.env)
    assert json.loads(config) == f"{seen['uid']}:{seen['gid']}"


def test_the_nodes_folder_handed_to_its_user_goes_on_stop(dockerd, ray_node):
    folder = Path(ray_node["folder"])
    owner = folder.stat().st_uid
    assert owner != 0 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert (folder / raynode.TOKEN_FILE).stat().st_uid == owner  # Ray in the container reads its token
    assert raynode.stop(str(ray_node["workdir"]))["stopped"]
    assert not folder.exists()  # handed to another uid by root, still removed
    assert sdocker.state(ray_node["name"], dockerd.env)["status"] == "missing"
