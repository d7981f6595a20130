"""One Ray node of a multi-node cell on this host: start (head or worker), check the cluster, stop. Stdlib only.

`ray start --block` runs in a session of its own with its own temp dir and ports, bound to the node's link address;
every Ray process it starts stays in its process group, so stop ends the whole node by that group (never
`ray stop`, which ends every Ray process of the user on the machine). A worker node holds the host lock for as
long as it lives (the lock's file descriptor passes to `ray start`): one model per machine on every node. The head's
lock is taken by the cell's server (spark_server) right after. state/ray.json says which group is ours, so a node
left by a killed controller is stopped by the next start or teardown.

The docker runtime runs `ray start --block` in a container of the cell's pinned image (vLLM's documented path: the
same image on every node), attached, so the container's output is the node's log; the running container's digest
is verified against the pin before the node counts as started, and the container (named in state/ray.json) is
removed on stop, also after a kill of everything else. The container runs as a non-root uid:gid (the login user's,
or spark_ray_container_user), with HOME in the cell's folder (vLLM's, FlashInfer's, Triton's and Hugging Face's
caches live under it), and mounts nothing but that folder: the env file is read by the docker CLI on the host, so a
Ray task in the container finds no file of it (its values are in the container's environment: vLLM needs them).

Nobody else may join (issue 30): every node runs with Ray's token authentication (RAY_AUTH_MODE=token, Ray 2.52+),
the cell's token (made by the controller, one per cell) in a 0600 file in the node's own folder for the cell, mode
0700, which also holds Ray's temp dir and the node's working dir, under a root that must be ours and writable by
nobody else. On the process runtime Ray runs as the SSH login user (no play becomes root for it): its tasks start
in that folder, not the run folder, but can read every file of that user, the env file too (docs/security.md). Ray 2.60 binds the runtime-env agent to the node's address, but its GCS, raylet, object
manager and worker ports to every interface and has no option to change that: those answer only a client that
holds the token (an unauthenticated join or submit is refused: tests/test_ray_auth.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import atomic, docker, supervise
from .contracts import Holder
from .errors import HostError
from .logparse import cluster

STATE_FILE = "ray.json"
NODE_LOG = "ray-node.log"  # in the cell's run folder on every node
_STARTED = ("Ray runtime started", "This command will now block forever")
STOP_GRACE_S = 3.0  # a head drains for up to 30 s on SIGTERM; after this it is killed
TOKEN_FILE = "auth_token"  # in the cell's temp dir, mode 0600
MIN_TOKEN_LEN = 32
AUTH_MODE = {"RAY_AUTH_MODE": "token"}  # Ray's token authentication, on every node and every client
_RAY_TOKEN_VARS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # whatever the login env holds is not the cell's


class RayError(HostError):
    """The Ray node did not start or the cluster is not complete."""


def argv(
    ray_cmd: list[str],
    role: str,
    node_address: str,
    head_address: str,
    port_base: int,
    temp_dir: str,
    num_gpus: int,
    resources: Mapping[str, float],
    object_store_mb: int,
) -> list[str]:
    """The `ray start` command of one node: every port from port_base, so nodes sharing a machine never meet."""
    args = [*ray_cmd, "start", "--block", "--node-ip-address", node_address, "--temp-dir", temp_dir]
    args += [
        "--disable-usage-stats",
        "--node-manager-port",
        str(port_base),
        "--object-manager-port",
        str(port_base + 1),
    ]
    args += ["--dashboard-agent-listen-port", str(port_base + 2), "--metrics-export-port", str(port_base + 3)]
    args += ["--runtime-env-agent-port", str(port_base + 4), "--dashboard-agent-grpc-port", str(port_base + 5)]
    args += ["--min-worker-port", str(port_base + 10), "--max-worker-port", str(port_base + 99)]
    if role == "head":
        port = head_address.rpartition(":")[2]
        args += ["--head", "--port", port, "--include-dashboard", "false"]
    else:
        args += ["--address", head_address]
    if num_gpus > 0:  # a real Spark's GPU is found by Ray; a simulated one is declared, with its custom resource
        args += ["--num-gpus", str(num_gpus)]
    if resources:
        args += ["--resources", json.dumps(dict(resources), sort_keys=True)]
    if object_store_mb > 0:
        args += ["--object-store-memory", str(object_store_mb * 1024 * 1024)]
    return args


CONTAINER_PREFIX = "spark-agent-ray-"
RAY_LABEL = "spark-agent.ray"  # a Ray node's container, beside docker.py's spark-agent=1 and spark-agent.cell=ID
RAY_TEMP = "r"  # Ray's --temp-dir in the cell's folder; one letter: Ray's unix sockets live under it (107 characters)
HOME_DIR = "home"  # in the cell's folder: the container user's HOME and working dir (caches, Ray's tasks' cwd)
CONTAINER_LOGIN = "spark-agent"  # USER/LOGNAME in the container: a uid without a passwd entry still has a name
MAX_ID = 2**31 - 1


def parse_user(spec: str) -> tuple[int, int]:
    """spark_ray_container_user as (uid, gid): "UID:GID", numbers (a name means nothing across host and image),
    never root. The controller checks the inventory with it too."""
    uid_s, sep, gid_s = spec.partition(":")
    if not (sep and uid_s.isdigit() and gid_s.isdigit() and int(uid_s) <= MAX_ID and int(gid_s) <= MAX_ID):
        raise RayError(f"spark_ray_container_user {spec[:40]!r} is not UID:GID (two numbers, e.g. 1000:1000)")
    if int(uid_s) == 0:
        raise RayError("spark_ray_container_user is root (uid 0): name a non-root UID:GID, e.g. 1000:1000")
    return int(uid_s), int(gid_s)


def container_user(spec: str) -> tuple[int, int]:
    """The uid:gid a node's container runs as: spec (parse_user), else the login user's. Never root; another
    user's only when we are root (the cell's folder is handed over)."""
    uid, gid = parse_user(spec) if spec else (os.getuid(), os.getgid())
    if uid == 0:
        raise RayError(
            "Ray's container would run as root (the login user is root): set spark_ray_container_user to a "
            "non-root UID:GID (e.g. 1000:1000), or log in as an unprivileged user"
        )
    if uid != os.getuid() and os.getuid() != 0:
        raise RayError(
            f"spark_ray_container_user {uid}:{gid}: the login user (uid {os.getuid()}) cannot hand the cell's "
            "folder to another uid; leave it empty (the container runs as the login user)"
        )
    return uid, gid


def container_name(cell_id: str, port_base: int) -> str:
    """One container per node: the cell and the node's own port base (test nodes share a machine and a daemon)."""
    return f"{CONTAINER_PREFIX}{cell_id}-{port_base}"


def container_argv(
    image: str,
    name: str,
    cell_id: str,
    env_file: str,
    temp_dir: str,
    gpus: bool,
    user: tuple[int, int],
    token_path: str = "",
) -> list[str]:
    """The `docker run` that wraps a node's `ray start` (argv() follows it, the image's entrypoint runs it): host
    network (Ray and NCCL bind the link address), host IPC (vLLM's shared-memory workers), the node's env file (read
    by the docker CLI on the host: no value on a command line, no file in the container), the cell's folder from the
    host and nothing else (Ray's temp dir: its logs stay on the host, short socket paths; HOME), token mode with the
    token's file there (its path only), a non-root user (container_user). ValueError when the image is not pinned by
    digest; RayError when the env file would be inside the mounted folder."""
    docker.parse_ref(image)
    if env_file and Path(os.path.abspath(os.path.expanduser(env_file))).is_relative_to(temp_dir):
        raise RayError(f"the env file {env_file} is inside {temp_dir}, which the node's container mounts; keep it out")
    home = f"{temp_dir}/{HOME_DIR}"
    args = [
        "docker",
        "run",
        "--name",
        name,
        "--label",
        f"{docker.OUR_LABEL}=1",
        "--label",
        f"{docker.CELL_LABEL}={cell_id}",
    ]
    args += ["--label", f"{RAY_LABEL}=1", "--network", "host", "--ipc", "host", "--volume", f"{temp_dir}:{temp_dir}"]
    args += ["--user", f"{user[0]}:{user[1]}", "--workdir", home]
    args += ["--env-file", env_file] if env_file else []
    for name_, value in {"HOME": home, "USER": CONTAINER_LOGIN, "LOGNAME": CONTAINER_LOGIN}.items():
        args += ["--env", f"{name_}={value}"]
    for name_, value in (auth_env(token_path) if token_path else {}).items():
        args += ["--env", f"{name_}={value}"]
    return args + (["--gpus", "all"] if gpus else []) + [image]


def cell_temp_dir(root: str, cell_id: str) -> Path:
    """The node's own folder for one cell: ROOT/<cell id>, mode 0700 (its token; Ray's temp dir inside)."""
    if not cell_id or not cell_id.isalnum():
        raise RayError(f"cell id {cell_id!r} is not a plain name")
    return Path(os.path.expanduser(root)) / cell_id


def ray_temp_dir(root: str, cell_id: str) -> Path:
    """Ray's --temp-dir, inside the cell's 0700 folder: Ray opens its temp dir to everyone (0777) when it starts,
    so privacy comes from the folder around it."""
    return cell_temp_dir(root, cell_id) / RAY_TEMP


def private_temp_dir(root: str, cell_id: str) -> Path:
    """Make the cell's folder afresh, mode 0700, with Ray's temp dir and the node's home in it, under a root that is
    ours and that nobody else can write: a root made by another user (a fixed /tmp path is anyone's to make first) or
    writable by others lets them swap our folder for theirs."""
    base = Path(os.path.expanduser(root))
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700, parents=True)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise RayError(
            f"Ray's temp root {base} is not a folder of this user that nobody else can write "
            f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); chmod 700 it, remove it or set "
            "spark_ray_temp_dir"
        )
    cell = cell_temp_dir(root, cell_id)
    if cell.is_symlink():
        cell.unlink()
    shutil.rmtree(cell, ignore_errors=True)  # a folder left by a killed run of this cell: ours (the root is)
    cell.mkdir(mode=0o700)
    os.chmod(cell, 0o700)  # whatever the umask
    ray_temp_dir(root, cell_id).mkdir(mode=0o700)
    (cell / HOME_DIR).mkdir(mode=0o700)  # the node's working dir (its tasks' too): nothing of the work dir around
    return cell


def write_token(cell_dir: Path, token: str) -> Path:
    """The cell's token into cell_dir/auth_token, 0600, never through an existing file or link."""
    if len(token) < MIN_TOKEN_LEN:
        raise RayError(f"the cell's Ray token is too short ({MIN_TOKEN_LEN} characters at least)")
    path = cell_dir / TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    return path


def hand_over(cell_dir: Path, user: tuple[int, int]) -> None:
    """Give the container's user the cell's folder, Ray's temp dir, HOME and the token (nothing to do when it is
    the login user; another uid only when we are root: container_user checked)."""
    if user != (os.getuid(), os.getgid()):
        for path in (cell_dir, cell_dir / RAY_TEMP, cell_dir / HOME_DIR, cell_dir / TOKEN_FILE):
            os.chown(path, *user, follow_symlinks=False)


def auth_env(token_path: str = "", token: str = "") -> dict[str, str]:
    """The env of a Ray process of the cell: token mode, and the token by file (a node) or by value (a client)."""
    return {**AUTH_MODE, **({"RAY_AUTH_TOKEN_PATH": token_path} if token_path else {"RAY_AUTH_TOKEN": token})}


def _state(workdir: str) -> Path:
    return supervise.state_dir(workdir) / STATE_FILE


def _read(workdir: str) -> dict[str, Any]:
    try:
        data = json.loads(_state(workdir).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def start(
    *,
    workdir: str,
    cell_id: str,
    role: str,
    command: list[str],
    env: Mapping[str, str],
    holder: Holder,
    drop_page_cache: str = "",
    timeout_s: float = 60.0,
    image: str = "",
    container: str = "",
    temp_root: str = "",
    token: str = "",
    user: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Start this node (stopping a node of ours left behind first). drop_page_cache: "" (no), "drop" or
    "simulated" (recorded, nothing dropped). image/container: the docker runtime (`command` is then the docker run
    of container_argv given cell_temp_dir(temp_root, cell_id) and `user`, then the ray argv given ray_temp_dir).
    token: the cell's Ray token, written into that dir made afresh (private_temp_dir, write_token); the dir goes on
    stop. Returns {pid, log, page_cache, image, user}."""
    if len(token) < MIN_TOKEN_LEN:
        raise RayError(f"a Ray node starts only with the cell's token ({MIN_TOKEN_LEN} characters at least)")
    previous = stop(workdir)
    temp_dir = private_temp_dir(temp_root, cell_id)
    token_path = str(write_token(temp_dir, token))
    if user is not None:
        hand_over(temp_dir, user)
    digest = docker.parse_ref(image)[1] if image else ""
    if container:  # one of ours by its name (this cell, this node's ports) whose state file was lost
        docker.remove(container)
    rdir = Path(os.path.expanduser(workdir)) / "runs" / cell_id
    rdir.mkdir(parents=True, exist_ok=True)
    log_path = rdir / NODE_LOG
    lock_fd = supervise.acquire_lock(workdir, holder)  # raises HostBusy naming the holder
    try:
        page_cache = _drop_page_cache(drop_page_cache)
        with open(log_path, "wb") as log:
            log.write((cluster.node_header(role, cell_id, page_cache, digest) + "\n").encode())
            log.flush()
            full_env = {k: v for k, v in os.environ.items() if k not in _RAY_TOKEN_VARS}
            full_env.update(env)
            full_env.update(auth_env(token_path))
            full_env[supervise.CELL_ENV] = cell_id
            full_env[supervise.WORKDIR_ENV] = str(Path(os.path.expanduser(workdir)))
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=str(temp_dir / HOME_DIR),  # not the run folder: a task starts nowhere near the env file
                start_new_session=True,
                pass_fds=(lock_fd,) if role == "worker" else (),  # a worker holds the lock while it lives
            )
    finally:
        os.close(lock_fd)  # the head's lock is the server's to take next
    state = {
        "pid": proc.pid,
        "cell_id": cell_id,
        "role": role,
        "started": time.time(),
        "container": container,
        "temp_dir": str(temp_dir),
        "temp_owner": user[0] if user is not None else os.getuid(),
    }
    atomic.write_json(_state(workdir), state)
    try:
        _wait_started(proc, log_path, timeout_s)
        if image:  # the node runs the pinned image, or it does not count as started
            docker.verify_running_digest(container, image)
    except (RayError, docker.DockerError, OSError) as exc:
        stop(workdir)
        raise RayError(str(exc)) from None
    return {
        "pid": proc.pid,
        "log": str(log_path),
        "page_cache": page_cache,
        "image": digest,
        "stopped_previous": previous["stopped"],
        "user": user[0] if user is not None else os.getuid(),
    }


def _wait_started(proc: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if any(marker in text for marker in _STARTED):
            return
        if proc.poll() is not None:
            raise RayError(f"ray start exited with {proc.returncode}: {_last_line(text)}")
        time.sleep(0.2)
    _kill_group(proc.pid)
    raise RayError(
        f"ray start did not report a running node within {timeout_s:.0f} s: {_last_line(log_path.read_text(errors='replace'))}"
    )


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _drop_page_cache(how: str) -> str:
    """Page cache left by the last model starves the next load on unified memory: drop it when asked."""
    if not how:
        return "kept"
    if how == "simulated":
        return "simulated host: not dropped"
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return "dropped"
    except OSError as exc:
        return f"not dropped ({exc.strerror or exc}; needs root)"


def stop(workdir: str, cell_id: str = "") -> dict[str, Any]:
    """Stop our Ray node on this host (any cell's, or only `cell_id`'s). Idempotent: nothing running, no change."""
    info = _read(workdir)
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 1 or (cell_id and info.get("cell_id") != cell_id):
        return {"stopped": False}
    if _ours(pid, workdir):
        _kill_group(pid)  # the docker runtime: the attached `docker run` client; the container goes next
    container = info.get("container")
    if isinstance(container, str) and container.startswith(CONTAINER_PREFIX):
        docker.remove(container)  # gone with everything in it, whatever killed the client
    _kill_stragglers(workdir)
    _remove_temp_dir(info)
    _state(workdir).unlink(missing_ok=True)
    return {"stopped": True, "pid": pid}


def _remove_temp_dir(info: Mapping[str, Any]) -> None:
    """The cell's temp dir (its token, Ray's sockets and logs) goes with the node: only a folder of ours named for
    the node's cell, whatever the state file says."""
    temp, cell_id = info.get("temp_dir"), info.get("cell_id")
    if not isinstance(temp, str) or not temp or not isinstance(cell_id, str) or Path(temp).name != cell_id:
        return
    owners = {os.getuid(), info.get("temp_owner")} if os.getuid() == 0 else {os.getuid()}  # root handed it over
    with contextlib.suppress(OSError):
        st = os.lstat(temp)
        if stat.S_ISDIR(st.st_mode) and st.st_uid in owners:
            shutil.rmtree(temp, ignore_errors=True)


def _ours(pid: int, workdir: str) -> bool:
    """The process is still the node we started (a recycled pid is left alone)."""
    env = supervise._environ(pid)
    return env.get(supervise.WORKDIR_ENV) == str(Path(os.path.expanduser(workdir))) and supervise.CELL_ENV in env


def _kill_stragglers(workdir: str) -> None:
    """Ray's worker processes (ray::IDLE, ray::RayWorkerWrapper) leave the node's process group; they carry our
    markers in their environment (inherited from `ray start`), so each is found and killed by its pid."""
    mine = str(Path(os.path.expanduser(workdir)))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        argv = supervise._argv(int(entry))
        if not argv or not (argv[0].startswith("ray::") or any("/ray/" in a for a in argv[:2])):
            continue
        env = supervise._environ(int(entry))
        if env.get(supervise.WORKDIR_ENV) == mine and supervise.CELL_ENV in env:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGKILL)


def _kill_group(pid: int) -> None:
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
                return True
    return False


def status_cmd(workdir: str, ray_cmd: list[str]) -> list[str]:
    """`ray` as the head sees it: inside the node's container on the docker runtime (the host may have no Ray)."""
    container = _read(workdir).get("container")
    if isinstance(container, str) and container.startswith(CONTAINER_PREFIX):
        return ["docker", "exec", container, *ray_cmd]
    return list(ray_cmd)


def check(
    ray_cmd: list[str], head_address: str, nodes: int, gpus: float, timeout_s: float = 60.0, token: str = ""
) -> dict[str, Any]:
    """Wait until `ray status` shows `nodes` alive nodes and `gpus` GPUs (as a client holding the cell's token).
    Returns {ok, nodes, gpus, status}."""
    env = {k: v for k, v in os.environ.items() if k not in _RAY_TOKEN_VARS}
    env.update(auth_env(token=token) if token else {})
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Any] = {"ok": False, "nodes": 0, "gpus": 0.0, "status": ""}
    while time.monotonic() < deadline:
        try:
            done = subprocess.run(
                [*ray_cmd, "status", "--address", head_address], capture_output=True, text=True, timeout=30, env=env
            )
            text = done.stdout + done.stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            text = str(exc)
        seen = {"ok": False, **parse_status(text), "status": text[-2000:]}
        if seen["nodes"] >= nodes and seen["gpus"] >= gpus:
            seen["ok"] = True
            return seen
        time.sleep(1.0)
    return seen


def parse_status(text: str) -> dict[str, Any]:
    """Active node count and total GPUs from `ray status` output."""
    active, section, total_gpus = 0, "", 0.0
    for line in text.splitlines():
        s = line.strip()
        if s in ("Active:", "Pending:", "Recent failures:"):
            section = s
            continue
        if section == "Active:" and " node_" in f" {s}":
            count = s.split()[0]
            active += int(count) if count.isdigit() else 0
        if s.endswith(" GPU") and "/" in s:
            with contextlib.suppress(IndexError, ValueError):
                total_gpus = float(s.split()[0].split("/")[1])
    return {"nodes": active, "gpus": total_gpus}
