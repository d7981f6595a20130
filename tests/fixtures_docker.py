"""A real, private dockerd and a local registry for tests; the simulator image pushed to it.

dockerd runs with no bridge and no iptables (containers use --network host), its own data root,
exec root, pidfile and unix socket under one temp folder. A stand-in `nvidia-container-runtime-hook`
on its PATH lets `--gpus all` work here (a real Spark has the real hook). The registry is Debian's
docker-registry on 127.0.0.1:<free port> (docker trusts 127.0.0.0/8 over plain HTTP). Everything is
stopped by PID and deleted afterwards, also when a test fails.

Use from conftest.py:  pytest_plugins = ["tests.fixtures_docker"]   (fixtures: dockerd, sim_image, docker_host)
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.hostside import docker as sdocker
from agent.sim import image as sim_image_builder
from tests import priority

DOCKERD = "/usr/sbin/dockerd"
REGISTRY = "/usr/bin/docker-registry"
HOOK_STANDIN = "#!/bin/sh\n# stand-in for NVIDIA's OCI prestart hook: --gpus all needs it on dockerd's PATH\nexit 0\n"


@dataclass
class DockerDaemon:
    root: Path
    host: str  # DOCKER_HOST value: unix:///…/docker.sock
    env: dict  # os.environ + DOCKER_HOST, for the docker CLI
    registry: str = ""  # 127.0.0.1:PORT
    pids: dict = field(default_factory=dict)  # "dockerd" / "registry" -> pid
    startup_s: float = 0.0  # dockerd + registry, until both answer

    # Helpers reached through the fixture, so test modules need not import this module (see pytest_plugins).
    def free_port(self) -> int:
        return free_port()

    def inventory(self, path: Path, hosts: dict[str, dict] | None = None) -> Path:
        return local_inventory(path, self, hosts)

    def push_sim_image(self, name: str, tag: str, settings: dict[str, str] | None = None) -> str:
        return build_and_push_sim_image(self, name, tag, settings)

    def sweep_vars(self) -> dict:
        """Host variables for sweeping simulated GB10s whose runtime is this docker (for sshd_hosts.inventory_for)."""
        return {
            "spark_runtime": "docker",
            "spark_simulate_gpu": "gb10",
            "spark_host_scope": "workdir",
            "spark_port": free_port(),
            "spark_health_timeout": 120,
            "spark_bind_host": "127.0.0.1",
            "spark_docker_host": self.host,
            "spark_environment": {"DOCKER_HOST": self.host},
        }


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def _ping_unix(sock_path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1)
            sock.connect(sock_path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b" 200 " in sock.recv(64).split(b"\r\n", 1)[0] + b" "
    except OSError:
        return False


def _ping_http(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def _wait(ready, proc: subprocess.Popen, log: Path, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"{what} not ready after {timeout}s:\n{log.read_text()[-3000:]}")


def start_registry(root: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = root / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'registry'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = root / "registry.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [REGISTRY, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    _wait(lambda: _ping_http(f"http://127.0.0.1:{port}/v2/"), proc, log, "docker-registry")
    return proc, f"127.0.0.1:{port}"


def start_dockerd(root: Path) -> subprocess.Popen:
    bin_dir = root / "bin"
    bin_dir.mkdir()
    hook = bin_dir / "nvidia-container-runtime-hook"
    hook.write_text(HOOK_STANDIN)
    hook.chmod(0o755)
    sock = root / "docker.sock"
    argv = [
        DOCKERD,
        "--iptables=false",
        "--ip-masq=false",
        "--bridge=none",
        "--shutdown-timeout=2",
        "--data-root",
        str(root / "data"),
        "--exec-root",
        str(root / "exec"),
        "--pidfile",
        str(root / "docker.pid"),
        "-H",
        f"unix://{sock}",
    ]
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = root / "dockerd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=priority.host_priority,  # its containers are the hosts' side (tests/priority.py)
        )
    _wait(lambda: _ping_unix(str(sock)), proc, log, "dockerd")
    return proc


def stop_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM one process we started, SIGKILL if it lingers."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # not our child (containerd): poll for its exit
            if not _alive(pid):
                return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _shims_of(root: Path) -> list[int]:
    """PIDs of containerd shims that serve this daemon's containerd (their -address is under `root`)."""
    address = str(root / "exec" / "containerd" / "containerd.sock").encode()
    pids = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0") if entry.isdigit() else []
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address in argv:
            pids.append(int(entry))
    return pids


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _kill(pid: int) -> None:
    """SIGKILL: a container's init ignores SIGTERM."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _unmount_under(root: Path) -> None:
    """Lazily unmount whatever a killed dockerd left mounted under `root`, deepest first."""
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(str(root) + "/")]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def stop_daemon(daemon: DockerDaemon) -> None:
    """Remove every container of this private daemon, stop dockerd and the registry by PID, delete it all."""
    containerd_pid_file = daemon.root / "exec" / "containerd" / "containerd.pid"
    containerd_pid = int(containerd_pid_file.read_text()) if containerd_pid_file.exists() else 0
    if "dockerd" in daemon.pids:
        ids = subprocess.run(["docker", "ps", "-aq"], env=daemon.env, capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], env=daemon.env, capture_output=True)
    for name in ("dockerd", "registry"):
        if name in daemon.pids:
            stop_pid(daemon.pids[name])
    if containerd_pid and _alive(containerd_pid):  # dockerd's child; orphaned only if dockerd was killed
        stop_pid(containerd_pid)
    for shim in _shims_of(daemon.root):  # likewise: a shim and its container outlive a killed dockerd
        for child in _children(shim):
            _kill(child)
        _kill(shim)
    _unmount_under(daemon.root)
    shutil.rmtree(daemon.root, ignore_errors=True)


def start_daemon() -> DockerDaemon:
    """dockerd + registry under a short temp folder (unix socket paths are limited to 108 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="sa-dockerd-", dir="/tmp"))
    host = f"unix://{root / 'docker.sock'}"
    daemon = DockerDaemon(root=root, host=host, env=sdocker.docker_env_for(host))
    started = time.monotonic()
    try:
        registry, daemon.registry = start_registry(root)
        daemon.pids["registry"] = registry.pid
        daemon.pids["dockerd"] = start_dockerd(root).pid
    except BaseException:
        stop_daemon(daemon)
        raise
    daemon.startup_s = time.monotonic() - started
    return daemon


def build_and_push_sim_image(
    daemon: DockerDaemon, name: str = "vllm-sim", tag: str = "test", settings: dict[str, str] | None = None
) -> str:
    """Build the simulator image (SPARK_SIM_* `settings` baked in), push it to the local registry; return its pinned
    ref (name@sha256:…)."""
    ref = f"{daemon.registry}/{name}:{tag}"
    sim_image_builder.build_image(ref, daemon.env, settings=settings)
    return sdocker.push(ref, daemon.env)


RAY_SITE = "/opt/site"  # where the Ray image holds this venv's `ray` and its requirements (PYTHONPATH)
RAY_SCRIPT = '#!/bin/sh\nexec python3 -c "import sys; from ray.scripts.scripts import main; sys.exit(main())" "$@"\n'


def _requirements(name: str, seen: set[str]) -> set[str]:
    """`name` and what it requires, recursively (no extras: `pip install ray`, the minimal Ray)."""
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return seen
    seen.add(key)
    for req in md.requires(name) or []:
        if "extra ==" not in req:
            _requirements(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0], seen)
    return seen


def _site_files(names: set[str]) -> dict[str, str]:
    plan: dict[str, str] = {}
    for name in names:
        dist = md.distribution(name)
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f))).resolve()
            if src.is_file() and "__pycache__" not in f.parts and not str(f).startswith(".."):
                plan[f"{RAY_SITE}/{f}"] = str(src)
                if src.suffix == ".so" or (os.access(src, os.X_OK) and _elf(src)):
                    plan.update({lib: lib for lib in sim_image_builder.shared_libraries(str(src))})
    return plan


def _elf(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"\x7fELF"


def build_and_push_ray_image(daemon: DockerDaemon) -> str:
    """The simulator's image plus this venv's `ray` and its requirements (no download), pushed; its pinned ref.
    ~300 MB: about a minute on a busy 2-core machine."""
    image = sim_image_builder
    names = _requirements("ray", set())
    plan = {**image.rootfs_plan(), **_site_files(names)}
    site = f"PYTHONPATH={image.SITE}"
    changes = [c.replace(site, f"{site}:{RAY_SITE}") for c in image.IMAGE_CHANGES]
    # No bytecode in the image (the builder prunes __pycache__), and a non-root user cannot write it beside the
    # root-owned sources: every Ray process would compile Ray afresh, and the raylet gives its agents 15 s. A
    # shared cache in /tmp compiles it once per container (pip-installed images, NVIDIA's too, ship bytecode).
    changes.append("ENV PYTHONPYCACHEPREFIX=/tmp/pycache")
    with tempfile.TemporaryDirectory(prefix="sa-rayimg-") as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        image._write_tar(tar_path, plan, image.PYTHON, image.BUSYBOX)
        with tarfile.open(tar_path, "a") as tar:
            image._add_text(tar, "/usr/local/bin/ray", RAY_SCRIPT, mode=0o755)
        ref = f"{daemon.registry}/vllm-sim-ray:proof"
        sdocker.import_image(tar_path, ref, changes, daemon.env)
        return sdocker.push(ref, daemon.env)


@pytest.fixture(scope="session")
def dockerd():
    """A private dockerd (no bridge, --network host only) and a local registry; DockerDaemon."""
    for binary in (DOCKERD, REGISTRY):
        if not os.path.exists(binary):
            pytest.skip(f"{binary} not installed (apt install docker.io docker-registry)")
    daemon = start_daemon()
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


@pytest.fixture(scope="session")
def sim_image(dockerd) -> str:
    """The simulator image, pushed to the local registry: its pinned ref `127.0.0.1:P/vllm-sim@sha256:…`."""
    return build_and_push_sim_image(dockerd)


@pytest.fixture
def docker_host(dockerd, monkeypatch):
    """DOCKER_HOST points at the private daemon for this test (for code that reads the environment)."""
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    return dockerd


def local_inventory(path: Path, daemon: DockerDaemon, hosts: dict[str, dict] | None = None) -> Path:
    """An inventory of hosts reached by Ansible's local connection, whose docker is `daemon`.

    `hosts`: name -> extra host variables (default: one host, spark-local)."""
    lines = ["all:", "  hosts:"]
    for name, extra in (hosts or {"spark-local": {}}).items():
        variables = {
            "ansible_connection": "local",
            "ansible_python_interpreter": "/usr/bin/python3",
            "spark_docker_host": daemon.host,
            **extra,
        }
        lines.append(f"    {name}:")
        lines += [f"      {key}: {json.dumps(value)}" for key, value in variables.items()]  # JSON is YAML
    path.write_text("\n".join(lines) + "\n")
    return path
