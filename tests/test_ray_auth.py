"""Issue 30, item 1: a multi-node cell's Ray cluster is closed to everyone but the cell. A real Ray head is started
through agent/hostside/raynode.py exactly as the spark_ray module starts it (process runtime, its own loopback
address); then a second Ray process on another loopback address tries to join and to run a task without the cell's
token, and with a wrong one: both are refused, while a client holding the token runs its task (the control). The
node's temp dir is private to the login user, the token never reaches a command line, and a temp root that another
user could swap is refused before anything starts. Slow (a Ray head): run alone."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agent.hostside import raynode, supervise

from .sshd_hosts import host_address
from .test_multinode import RAY, _free_base

pytestmark = pytest.mark.integration

CELL = "a1b2c3d4e5f6"
HOLDER = {"user": "t", "controller_host": "t", "controller_pid": 1, "since": "", "sweep": "t", "cell_id": CELL}
JOIN = """
import ray, sys
try:
    ray.init(address=sys.argv[1], log_to_driver=False)
    print("RAN", ray.get(ray.remote(lambda: 6 * 7).remote(), timeout=30))
except Exception as exc:
    print("REFUSED", type(exc).__name__)
"""


def _client_env(home: Path, **extra: str) -> dict[str, str]:
    """Another process on the machine: none of the node's Ray variables, an empty home (no ~/.ray/auth_token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), **extra}


def _join(address: str, home: Path, **extra: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", JOIN, address], env=_client_env(home, **extra), capture_output=True, text=True,
        timeout=180, cwd=home,
    )  # fmt: skip
    return (done.stdout.strip().splitlines() or ["(nothing)"])[-1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ray-auth-host")
    root = tempfile.mkdtemp(prefix="sa-rauth-", dir="/tmp")  # short: Ray's sockets live under it
    address = host_address(40)
    gcs = _free_base()
    head = f"{address}:{gcs}"
    token = secrets.token_hex(24)
    temp = str(raynode.cell_temp_dir(root, CELL))
    ray_temp = str(raynode.ray_temp_dir(root, CELL))
    command = raynode.argv([RAY], "head", address, head, _free_base(), ray_temp, 1, {"spark_sim_gpu": 1}, 80)
    try:
        started = raynode.start(
            workdir=str(workdir), cell_id=CELL, role="head", command=command, env={}, holder=HOLDER,
            timeout_s=120, temp_root=root, token=token,
        )  # fmt: skip
        yield {"address": head, "token": token, "root": root, "temp": temp, "started": started, "workdir": workdir}
    finally:
        raynode.stop(str(workdir))
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root + "-x", ignore_errors=True)


@pytest.mark.attack("ray: a process without the cell's token joins the cluster and runs a task")
def test_a_ray_process_without_the_token_cannot_join_or_submit(ray_head, tmp_path):
    assert _join(ray_head["address"], tmp_path) == "REFUSED ConnectionError"
    wrong = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(24)}
    assert _join(ray_head["address"], tmp_path, **wrong) == "REFUSED ConnectionError"
    # the control: the cell's own token gets in (what the server does with spark_ray_auth_env)
    right = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": ray_head["token"]}
    assert _join(ray_head["address"], tmp_path, **right) == "RAN 42"


@pytest.mark.attack("ray: a second node joins the cell's cluster without the token, or with another one")
def test_a_ray_node_without_the_token_cannot_join(ray_head, tmp_path):
    # without any token: `ray start` as a worker, in a session of its own, its processes marked as ours to stop
    temp = tempfile.mkdtemp(prefix="sa-rjoin-", dir="/tmp")
    workdir = tmp_path / "intruder"
    marks = {supervise.CELL_ENV: CELL, supervise.WORKDIR_ENV: str(workdir)}
    argv = raynode.argv([RAY], "worker", host_address(41), ray_head["address"], _free_base(), temp, 1, {}, 0)
    proc = subprocess.Popen(
        argv, env=_client_env(tmp_path, **marks), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        try:
            out = proc.communicate(timeout=120)[0]
        except subprocess.TimeoutExpired:
            out = "(still running after 120 s)"
        seen = raynode.check([RAY], ray_head["address"], 2, 0, timeout_s=5, token=ray_head["token"])
        assert seen["nodes"] == 1 and proc.returncode not in (None, 0), out[-1500:]
    finally:
        raynode._kill_group(proc.pid)
        raynode._kill_stragglers(str(workdir))

        shutil.rmtree(temp, ignore_errors=True)
    # with another cell's token: a node started exactly as ours is, which never counts as started
    with pytest.raises(raynode.RayError):
        other = str(raynode.ray_temp_dir(ray_head["root"] + "-x", CELL))
        raynode.start(
            workdir=str(tmp_path / "other"), cell_id=CELL, role="worker",
            command=raynode.argv([RAY], "worker", host_address(41), ray_head["address"], _free_base(), other, 1, {}, 0),
            env={}, holder=HOLDER, timeout_s=90, temp_root=ray_head["root"] + "-x", token=secrets.token_hex(24),
        )  # fmt: skip
    raynode.stop(str(tmp_path / "other"))
    assert raynode.check([RAY], ray_head["address"], 2, 0, timeout_s=5, token=ray_head["token"])["nodes"] == 1


@pytest.mark.attack("ray: the cell's temp dir and token are readable by other users, or the token is on a command line")
def test_the_nodes_temp_dir_is_private_and_the_token_is_in_no_command_line(ray_head):
    temp = Path(ray_head["temp"])
    st = temp.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    token_file = temp / raynode.TOKEN_FILE
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and token_file.read_text() == ray_head["token"]
    assert list((temp / "r").glob("session_*/sockets"))  # Ray's own temp dir is the one inside the private folder
    pid = ray_head["started"]["pid"]
    assert ray_head["started"]["user"] == os.getuid() == os.stat(f"/proc/{pid}").st_uid  # the login user's node
    for entry in os.listdir("/proc"):
        if entry.isdigit() and supervise._environ(int(entry)).get(supervise.CELL_ENV) == CELL:
            assert ray_head["token"] not in " ".join(supervise._argv(int(entry)))


@pytest.mark.attack("ray: a temp root made by someone else (or writable by others) hosts the cell's temp dir")
def test_a_temp_root_another_user_could_swap_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o1777)  # /tmp-like: anyone can make the fixed path first
    with pytest.raises(raynode.RayError, match="nobody else can write"):
        raynode.private_temp_dir(str(shared), CELL)
    if os.getuid() == 0:  # another user's folder (the test machine is root: it can make one)
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(raynode.RayError, match="owner uid 65534"):
            raynode.private_temp_dir(str(theirs), CELL)
    mine = raynode.private_temp_dir(str(tmp_path / "mine"), CELL)  # a root of ours: made 0700, as the cell's folder
    assert [stat.S_IMODE(p.stat().st_mode) for p in (mine.parent, mine, mine / "r")] == [0o700] * 3
    with pytest.raises(raynode.RayError, match="only with the cell's token"):
        raynode.start(
            workdir=str(tmp_path), cell_id=CELL, role="head", command=["true"], env={}, holder=HOLDER,
            temp_root=str(tmp_path / "mine"), token="short",
        )  # fmt: skip
