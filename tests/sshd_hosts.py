"""Real OpenSSH servers as test hosts on loopback addresses (127.0.0.11, 127.0.0.12, ...).

Each host has its own host key, accepts one client key, and gets its own working directory through the inventory
variable `spark_workdir`, so hosts that share this filesystem never collide. Every sshd is stopped by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests import priority

SSHD = "/usr/sbin/sshd"
USER_KEYS = "spark_test_authorized_keys"  # in a login_as_user account's ~/.ssh
REPO = Path(__file__).resolve().parent.parent


def worker_net(base: str, worker: str) -> str:
    """The first three octets of one test run's loopback addresses. Two test runs on one machine (parallel work
    trees) set different bases (e.g. SPARK_TEST_NET=127.0.3) so their hosts, servers (port 8000) and Ray nodes never
    meet; pytest-xdist worker gwN of a run takes the base's third octet + N (gw1 of 127.0.3 is 127.0.4), so a run
    with -n W uses W consecutive nets."""
    if not re.fullmatch(r"127\.\d{1,3}\.\d{1,3}", base) or max(int(o) for o in base.split(".")) > 255:
        raise RuntimeError(f"SPARK_TEST_NET={base!r}: give three octets inside 127.0.0.0/8, e.g. 127.0.3")
    if not worker:
        return base
    prefix, _, third = base.rpartition(".")
    shifted = int(third) + int(worker.removeprefix("gw"))
    if shifted > 255:
        raise RuntimeError(f"SPARK_TEST_NET={base} with worker {worker}: past 255; pick a lower base or fewer workers")
    return f"{prefix}.{shifted}"


# The base stays in SPARK_TEST_NET_BASE and the worker's own net in SPARK_TEST_NET, so a subprocess of a worker
# (which inherits both and PYTEST_XDIST_WORKER) lands on the same net, never one further.
_BASE = os.environ.setdefault("SPARK_TEST_NET_BASE", os.environ.get("SPARK_TEST_NET", "127.0.0"))
TEST_NET = os.environ["SPARK_TEST_NET"] = worker_net(_BASE, os.environ.get("PYTEST_XDIST_WORKER", ""))


def host_address(index: int) -> str:
    """The loopback address of test host number `index` (0 → .11, 1 → .12, ...)."""
    return f"{TEST_NET}.{11 + index}"


# The SSH test hosts as simulated GB10 Sparks: process runtime, the simulator as the engine.
SIM_HOST_VARS = {
    "spark_runtime": "process",
    "spark_simulate_gpu": "gb10",
    "spark_host_scope": "workdir",
    "spark_port": 8000,
    "spark_health_timeout": 60,
    "spark_serve_cmd": ["/usr/bin/python3", "-m", "agent.sim", "serve"],
    "spark_serve_env": {"PYTHONPATH": str(REPO)},
    "spark_nvidia_smi": [
        "/usr/bin/python3",
        str(REPO / "agent" / "sim" / "nvidia_smi.py"),
        "--sim-server",
        "{{ spark_bind_host }}:{{ spark_port }}",
    ],
}


@dataclass
class SshHost:
    name: str
    address: str
    port: int
    workdir: Path
    pid: int = 0
    proc: subprocess.Popen | None = None
    user: str = "root"  # the login user (login_as_user: a non-root account whose sudo asks for a password)


@dataclass
class SshFleet:
    root: Path
    client_key: Path
    known_hosts: Path
    hosts: list[SshHost] = field(default_factory=list)
    inventory: Path | None = None

    def host(self, name: str) -> SshHost:
        return next(h for h in self.hosts if h.name == name)

    def ssh(self, name: str, command: str) -> subprocess.CompletedProcess:
        """Run a shell command on a test host over real SSH."""
        h = self.host(name)
        return subprocess.run(
            [
                "ssh",
                "-i",
                str(self.client_key),
                "-p",
                str(h.port),
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"root@{h.address}",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )


def _keygen(path: Path, kind: str = "ed25519") -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)


def free_port(address: str) -> int:
    """A port nobody listens on at `address`: each fleet gets its own, so SSH control sockets never mix fleets."""
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _wait_port(address: str, port: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd for {address}:{port} exited with {proc.returncode} (port taken?)")
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd on {address}:{port} did not come up")


def _sshd_config(root: Path, host: SshHost, authorized: Path) -> Path:
    config = root / f"sshd_{host.name}.conf"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress {host.address}:{host.port}",
                f"HostKey {root / f'hostkey_{host.name}'}",
                f"PidFile {root / f'sshd_{host.name}.pid'}",
                # the second file: a non-root login's copy in its own home (sshd reads it as that user, and pytest's
                # folders are root's, 0700): login_as_user writes it
                f"AuthorizedKeysFile {authorized} .ssh/{USER_KEYS}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "MaxSessions 50",
                "MaxStartups 50:30:100",
                "Subsystem sftp /usr/lib/openssh/sftp-server",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    return config


def inventory_for(fleet: SshFleet, extra_host_vars: dict | None = None) -> dict:
    """An Ansible inventory (as a dict) for the fleet: real SSH, per-host work dirs, simulated GB10s."""
    hosts = {}
    for h in fleet.hosts:
        hosts[h.name] = {
            "ansible_host": h.address,
            "ansible_port": h.port,
            "ansible_user": h.user,
            "ansible_ssh_private_key_file": str(fleet.client_key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={fleet.known_hosts} -o StrictHostKeyChecking=yes",
            "ansible_python_interpreter": "/usr/bin/python3",
            "spark_workdir": str(h.workdir),
            "spark_bind_host": h.address,
            **(extra_host_vars or {}),
        }
    return {"all": {"children": {"sparks": {"hosts": hosts}}}}


@contextlib.contextmanager
def foreign_holder(workdir: Path) -> Iterator[subprocess.Popen]:
    """A host held by someone else's server (alice@lab-7): a live process stands for its supervisor (it only has to
    be alive). The process is checked to be alive at the end (nothing may evict it), then stopped and the state
    files removed."""
    state = workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        (state / "server.json").write_text(json.dumps({"supervisor_pid": holder.pid, "cell_id": "abc123"}))
        (state / "holder.json").write_text(json.dumps({"user": "alice", "controller_host": "lab-7", "since": "then"}))
        yield holder
        assert holder.poll() is None, "a server we did not start was stopped"
    finally:
        holder.kill()
        holder.wait()
        for name in ("server.json", "holder.json"):
            (state / name).unlink(missing_ok=True)


def start_fleet(root: Path, count: int = 2) -> SshFleet:
    if not os.path.exists(SSHD):
        raise RuntimeError("openssh-server is not installed (run .ci/run or apt-get install openssh-server)")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd refuses to start without its privsep dir
    root.mkdir(parents=True, exist_ok=True)
    client_key = root / "client_key"
    _keygen(client_key)
    authorized = root / "authorized_keys"
    shutil.copy(f"{client_key}.pub", authorized)
    fleet = SshFleet(root=root, client_key=client_key, known_hosts=root / "known_hosts")
    known = []
    names = "abcdefgh"
    try:
        for i in range(count):
            address = host_address(i)
            host = SshHost(
                name=f"spark-{names[i]}",
                address=address,
                port=free_port(address),
                workdir=root / "hosts" / f"spark-{names[i]}",
            )
            host.workdir.mkdir(parents=True, exist_ok=True)
            _keygen(root / f"hostkey_{host.name}")
            pub = (root / f"hostkey_{host.name}.pub").read_text().split()
            known.append(f"[{host.address}]:{host.port} {pub[0]} {pub[1]}")
            _sshd_config(root, host, authorized)
            _spawn_sshd(root, host)
            fleet.hosts.append(host)
        fleet.known_hosts.write_text("\n".join(known) + "\n")
        for host in fleet.hosts:
            _wait_port(host.address, host.port, host.proc)
        fleet.inventory = root / "inventory.yml"
        fleet.inventory.write_text(yaml.safe_dump(inventory_for(fleet), sort_keys=False))
    except BaseException:
        stop_fleet(fleet)
        raise
    return fleet


def _spawn_sshd(root: Path, host: SshHost) -> None:
    config = root / f"sshd_{host.name}.conf"
    host.proc = subprocess.Popen(
        [SSHD, "-D", "-f", str(config), "-E", str(root / f"sshd_{host.name}.log")], preexec_fn=priority.host_priority
    )
    host.pid = host.proc.pid


def lose_host(fleet: SshFleet, name: str) -> None:
    """The host drops off the network: its sshd and every SSH session it serves (Ansible's persistent connection
    included) are stopped, by PID. What runs on the host under its own session (a server) keeps running."""
    import psutil

    host = fleet.host(name)
    listener = psutil.Process(host.pid)
    sessions = [p for p in listener.children(recursive=True) if _named_sshd(p)]
    for proc in [listener, *sessions]:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs([listener, *sessions], timeout=10)
    host.pid = 0


def _named_sshd(proc) -> bool:
    """An SSH session of the host; False for one that ended between the listing and this look (a race, not a fault)."""
    import psutil

    try:
        return proc.name().startswith("sshd")
    except psutil.NoSuchProcess:
        return False


def restore_host(fleet: SshFleet, name: str) -> None:
    """The lost host comes back: the same sshd (same address, port and host key) again."""
    host = fleet.host(name)
    _spawn_sshd(fleet.root, host)
    assert host.proc is not None
    _wait_port(host.address, host.port, host.proc)


def login_as_user(fleet: SshFleet, names: list[str]) -> Callable[[], None]:
    """These hosts log in as a real non-root account of this machine (created here, one per fleet: sshd checks the
    passwd entry), whose sudo needs a password nobody gives: whatever needs root fails loudly. Their work dirs move
    to the account's home (pytest's folders are root's, mode 0700). Returns the clean-up, which removes the account,
    its home and its sudoers entry (call it after the fleet's servers are stopped)."""
    if not shutil.which("sudo") or not shutil.which("useradd"):
        raise RuntimeError("sudo and useradd are needed for the non-root login (scripts/setup.sh installs sudo)")
    user = f"spk{os.getpid() % 100000}{fleet.root.name[-6:]}".replace("-", "")[:30].lower()
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True, capture_output=True)
    sudoers = Path("/etc/sudoers.d") / user
    try:
        password = os.urandom(12).hex()
        subprocess.run(["chpasswd"], input=f"{user}:{password}\n", text=True, check=True)  # not locked: sshd
        sudoers.write_text(f"{user} ALL=(ALL) ALL\n")  # sudo, with a password
        sudoers.chmod(0o440)
        home = Path(pwd.getpwnam(user).pw_dir)
        keys = (fleet.root / "authorized_keys").read_text()
        subprocess.run(["runuser", "-u", user, "--", "mkdir", "-m", "700", "-p", str(home / ".ssh")], check=True)
        subprocess.run(
            ["runuser", "-u", user, "--", "sh", "-c", f"umask 077 && cat > {home / '.ssh' / USER_KEYS}"],
            input=keys,
            text=True,
            check=True,
        )
        for host in fleet.hosts:
            if host.name in names:
                host.user, host.workdir = user, home / "hosts" / host.name
                subprocess.run(["runuser", "-u", user, "--", "mkdir", "-p", str(host.workdir)], check=True)
    except BaseException:
        _remove_user(user, sudoers)
        raise
    return lambda: _remove_user(user, sudoers)


def _remove_user(user: str, sudoers: Path) -> None:
    """The account, its home and its sudoers entry. userdel refuses while a process runs as the account, and an SSH
    session's own sshd process outlives the fleet's listening sshd for a moment: those are stopped by PID first (every
    process of an account made for this fleet is ours), then userdel is tried again, for up to 10 s."""
    import psutil

    sudoers.unlink(missing_ok=True)
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        return
    for _ in range(50):
        for proc in psutil.process_iter(["uids"]):
            uids = proc.info["uids"]
            if uids is not None and uid in (uids.real, uids.effective):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        if subprocess.run(["userdel", "--remove", user], check=False, capture_output=True).returncode in (0, 6):
            return  # 6: no such user
        time.sleep(0.2)


def write_sim_inventory(fleet: SshFleet, port: int, serve_env: Callable[[str], dict[str, str]]) -> None:
    """The fleet's inventory as simulated GB10s on `port`, each host's simulator given serve_env(host name) more."""
    inv = inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": port})
    for name, host_vars in inv["all"]["children"]["sparks"]["hosts"].items():
        host_vars["spark_serve_env"] = {**SIM_HOST_VARS["spark_serve_env"], **serve_env(name)}
    assert fleet.inventory is not None
    fleet.inventory.write_text(yaml.safe_dump(inv))


@contextlib.contextmanager
def sim_fleet(root: Path, port: int, count: int = 3, non_root: tuple[str, ...] = ("spark-b", "spark-c")):
    """`count` hosts as simulated GB10s serving on `port` (one per module: never another test's), those named in
    `non_root` logging in as a non-root user whose sudo needs a password (nothing may need root); every server
    stopped, the hosts and the user removed afterwards."""
    fleet = start_fleet(root, count=count)
    remove_user = None
    try:
        remove_user = login_as_user(fleet, list(non_root))
        assert fleet.inventory is not None
        fleet.inventory.write_text(yaml.safe_dump(inventory_for(fleet, {**SIM_HOST_VARS, "spark_port": port})))
        yield fleet
    finally:
        stop_sim_fleet(fleet, remove_user)


def stop_fleet(fleet: SshFleet) -> None:
    for host in fleet.hosts:
        if host.pid:
            try:
                os.kill(host.pid, signal.SIGTERM)
                os.waitpid(host.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            host.pid = 0


def stop_sim_fleet(fleet: SshFleet, remove_user: Callable[[], None] | None = None) -> None:
    """A fleet of simulated Sparks after its tests: each host's servers (a lost host's may still run), its sshd,
    then the non-root account login_as_user made."""
    from agent.hostside import supervise

    for h in fleet.hosts:
        with contextlib.suppress(Exception):
            supervise.stop(str(h.workdir))
    stop_fleet(fleet)
    if remove_user is not None:
        remove_user()


if __name__ == "__main__":  # manual use: python tests/sshd_hosts.py DIR — starts hosts until Ctrl-C
    f = start_fleet(Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    print(f.inventory)
    try:
        signal.pause()
    finally:
        stop_fleet(f)
