"""Server control on the host: one model per machine, a host-wide lock, start, health wait, stop.

The server of a cell runs under a small supervisor process that we fork off. The supervisor holds the host lock
(flock) for as long as the server lives, so a second controller reaching the same host is refused with the name
of the holder. Standard library only.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import atomic, docker, logparse  # imported up front: the forked supervisor must not import late
from .contracts import Failure, Holder, ServeStatus
from .errors import HostError

CELL_ENV = "SPARK_AGENT_CELL"  # marks every server process we start
WORKDIR_ENV = "SPARK_AGENT_WORKDIR"  # which host work dir started it (several test hosts can share a machine)


class HostBusy(HostError):
    """The host is taken: another controller holds the lock, or a foreign server runs."""

    def __init__(self, message: str, holder: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.holder = holder or {}  # as read from the host's holder.json: not trusted to be a Holder


# ---------------------------------------------------------------------------------------------- state files
def state_dir(workdir: str) -> Path:
    path = _state_path(workdir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _state_path(workdir: str) -> Path:
    """The state folder, not created: reading (status, check mode) leaves the host as it was."""
    return Path(os.path.expanduser(workdir)) / "state"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------------------------------------- the lock
def acquire_lock(workdir: str, holder: Holder) -> int:
    """Take the host lock without waiting; returns the fd (keep it open). Raises HostBusy naming the holder: the
    controller whose server runs, or the detached sweep's runner that has the host between its cells too."""
    runner = runner_holder(workdir)
    if runner and runner.get("runner_pid") != os.getpid():
        raise HostBusy("host is in use by " + describe_holder(runner), runner)
    sdir = state_dir(workdir)
    fd = os.open(str(sdir / "host.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        held = _read_json(sdir / "holder.json")
        raise HostBusy("host is in use by " + describe_holder(held), held) from None
    atomic.write_json(sdir / "holder.json", holder)
    return fd


def describe_holder(holder: Mapping[str, Any]) -> str:
    if not holder:
        return "another process (no holder record)"
    who = f"{holder.get('user', '?')}@{holder.get('controller_host', '?')} pid {holder.get('controller_pid', '?')}"
    if holder.get("runner_pid"):
        return (
            f"{who} since {holder.get('since', '?')} (detached sweep {holder.get('sweep', '?')}, runner pid "
            f"{holder['runner_pid']} on this host; `spark-agent status {holder.get('sweep', '?')}` shows it)"
        )
    return (
        f"{who} since {holder.get('since', '?')} (cell {holder.get('cell_id', '?')}, sweep {holder.get('sweep', '?')})"
    )


# ---------------------------------------------------------------------------------------------- the runner's lock
# A detached sweep's runner (hostside/runner.py) holds the host for the whole sweep, between cells too. It is a
# POSIX record lock (lockf): owned by the runner process alone, so the servers it forks do not inherit it, and gone
# the moment the runner dies. Testing it from another process never disturbs it.
RUNNER_LOCK = "runner.lock"
RUNNER_FILE = "runner.json"


def runner_holder(workdir: str) -> dict[str, Any]:
    """The holder record of the live detached-sweep runner on this host ({} when none runs)."""
    path = _state_path(workdir) / RUNNER_LOCK
    if not path.exists():
        return {}
    record = _read_json(_state_path(workdir) / RUNNER_FILE)
    if record.get("runner_pid") == os.getpid():
        return record  # we are the runner: opening and closing the lock file here would release our own lock
    fd = os.open(str(path), os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return record or {"runner_pid": -1, "sweep": "?"}
    finally:
        os.close(fd)  # closing releases the test lock we may have taken
    return {}


def acquire_runner_lock(workdir: str, holder: Holder, sweep: str) -> int:
    """Take the runner lock for this process without waiting (keep the fd open). Raises HostBusy naming the holder."""
    sdir = state_dir(workdir)
    fd = os.open(str(sdir / RUNNER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        held = _read_json(sdir / RUNNER_FILE)
        raise HostBusy("host is in use by " + describe_holder(held), held) from None
    atomic.write_json(sdir / RUNNER_FILE, {**holder, "sweep": sweep, "runner_pid": os.getpid()})
    return fd


# ---------------------------------------------------------------------------------------------- one model per machine
def _argv(pid: int) -> list:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_engine(argv: list) -> bool:
    """A model server by the shape of its command line, not by a word anywhere in it (an ansible-playbook
    command line that carries a server's argv as data is not a server)."""
    if not argv:
        return False
    if argv[0].startswith("VLLM::"):  # vLLM's renamed engine/worker processes
        return True
    for i, arg in enumerate(argv[:-1]):
        nxt = argv[i + 1]
        if os.path.basename(arg) == "vllm" and nxt == "serve":
            return True
        if arg == "-m" and (
            nxt.startswith("vllm.entrypoints") or (nxt == "agent.sim" and "serve" in argv[i + 2 : i + 3])
        ):
            return True
        if os.path.basename(arg) == "spark-agent" and argv[i + 1 : i + 3] == ["sim", "serve"]:
            return True
    return False


def _environ(pid: int) -> dict:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key in (CELL_ENV.encode(), WORKDIR_ENV.encode()):
            out[key.decode()] = value.decode(errors="replace")
    return out


def find_engines(workdir: str, scope: str = "machine") -> list[dict]:
    """vLLM or simulator processes on this machine. scope='workdir' only counts those started from `workdir`
    (for test hosts that share one machine); a process we started carries CELL_ENV in its environment."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        argv = _argv(int(entry))
        if not is_engine(argv):
            continue
        cmd = " ".join(argv)
        env = _environ(int(entry))
        ours = CELL_ENV in env
        same_workdir = env.get(WORKDIR_ENV) == str(Path(os.path.expanduser(workdir)))
        if scope == "workdir" and not same_workdir:
            continue
        found.append(
            {"pid": int(entry), "cmdline": cmd[:300], "ours": ours and same_workdir, "cell_id": env.get(CELL_ENV, "")}
        )
    return found


def gpu_processes() -> list[dict]:
    """GPU compute processes from nvidia-smi, where present (none on a host without NVIDIA)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            rows.append({"pid": int(parts[0]), "name": parts[1], "memory": parts[2] if len(parts) > 2 else ""})
    return rows


def occupants(workdir: str, scope: str, docker_present: bool) -> list[dict]:
    """Everything that would share the machine with a new server: processes, containers, GPU apps."""
    found = [dict(kind="process", **p) for p in find_engines(workdir, scope)]
    if docker_present:
        ours_prefix = container_prefix(workdir)
        try:
            containers = docker.list_vllm_like()
        except docker.DockerError:  # no daemon running: no containers either
            containers = []
        for c in containers:
            name = c.get("name", "")
            ours = name.startswith(ours_prefix)
            if scope == "workdir" and not ours:
                continue
            found.append(
                {
                    "kind": "container",
                    "name": name,
                    "image": c.get("image", ""),
                    "ours": ours,
                    "cmdline": c.get("image", ""),
                    "pid": 0,
                }
            )
    if scope == "machine":
        known = {p["pid"] for p in found}
        for g in gpu_processes():
            if g["pid"] not in known:
                found.append({"kind": "gpu", "pid": g["pid"], "cmdline": g["name"], "ours": False})
    return found


def container_prefix(workdir: str) -> str:
    """Container names carry a short tag of the work dir, so hosts sharing one docker never mix."""
    tag = zlib.crc32(str(Path(os.path.expanduser(workdir))).encode()) % 10**8
    return f"spark-agent-{tag:08d}-"


# ---------------------------------------------------------------------------------------------- start
def start(
    cell_id: str,
    workdir: str,
    runtime: str,
    argv: list,
    env: dict,
    log_path: str,
    holder: Holder,
    image: str = "",
    scope: str = "machine",
    evict: bool = False,
    docker_present: bool = False,
    url: str = "",
    volumes: list[str] | None = None,
) -> dict:
    """Take the lock, make sure we're alone, and fork the supervisor that runs the server. Returns server.json.
    `volumes`: what a container mounts (serving.volumes: the warm-start cache, the model cache, a model folder)."""
    lock_fd = acquire_lock(workdir, holder)
    try:
        _clear_the_machine(workdir, scope, evict, docker_present)
        if url:
            _port_must_be_free(url)
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_bytes(b"")
        info = {
            "cell_id": cell_id,
            "runtime": runtime,
            "log": log_path,
            "started": time.time(),
            "container": container_prefix(workdir) + cell_id if runtime == "docker" else "",
            "volumes": list(volumes or []),
        }
        pid = os.fork()
        if pid == 0:  # the supervisor: never returns
            _supervise(lock_fd, workdir, info, runtime, argv, env, image)
    finally:
        os.close(lock_fd)  # the supervisor keeps its own copy of the locked file description
    info["supervisor_pid"] = pid
    _wait_for_server_record(workdir, pid)
    return _read_json(state_dir(workdir) / "server.json") or info


def _clear_the_machine(workdir: str, scope: str, evict: bool, docker_present: bool) -> None:
    """Our own leftovers go; a foreign server is left alone unless evict is set."""
    for occ in occupants(workdir, scope, docker_present):
        if occ["ours"] or evict:
            _stop_occupant(occ)
            continue
        what = (
            f"container {occ['name']} ({occ['image']})"
            if occ["kind"] == "container"
            else f"{occ['kind']} pid {occ['pid']}: {occ['cmdline'][:120]}"
        )
        raise HostBusy(
            f"another model server is running here and we did not start it: {what}; "
            "stop it yourself or re-run with --evict"
        )


def _stop_occupant(occ: dict) -> None:
    if occ["kind"] == "container":
        docker.remove(occ["name"])
    elif occ.get("pid"):
        _terminate_tree(occ["pid"], grace=15)


def _port_must_be_free(url: str) -> None:
    """Something already answering on our port would pass our health check in our server's place.
    Checked after our own leftovers are gone and with the lock held."""
    parsed = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 80), timeout=1.0):
            pass
    except OSError:
        return
    raise HostBusy(
        f"{parsed.hostname}:{parsed.port} is already in use by another process; stop it or give this "
        "host another spark_port in the inventory"
    )


def _wait_for_server_record(workdir: str, pid: int, timeout: float = 30.0) -> None:
    path = state_dir(workdir) / "server.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _read_json(path).get("supervisor_pid") == pid:
            return
        if not _alive(pid):
            return
        time.sleep(0.02)


def _supervise(lock_fd: int, workdir: str, info: dict, runtime: str, argv: list, env: dict, image: str) -> None:
    """Runs in the forked child: detach, start the server, wait for it, stop it on SIGTERM, then exit."""
    code = 0
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        child_env = dict(os.environ)
        child_env.update({k: str(v) for k, v in env.items()})
        child_env[CELL_ENV] = info["cell_id"]
        child_env[WORKDIR_ENV] = str(Path(os.path.expanduser(workdir)))
        log = open(info["log"], "ab", buffering=0)  # noqa: SIM115 (the server's stdout: open for its whole life)
        if runtime == "docker":
            container = docker.run_server(
                image,
                info["container"],
                [str(a) for a in argv],
                env,
                label=info["cell_id"],
                log_path=info["log"],
                volumes=[str(v) for v in info.get("volumes", [])],
            )
            if container.log_follower is None:  # run_server follows the log whenever log_path is given
                raise RuntimeError("docker run gave no log follower")
            proc = container.log_follower  # `docker logs -f` ends when the container does
        else:
            proc = subprocess.Popen(
                [str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True
            )
        info.update({"supervisor_pid": os.getpid(), "server_pid": proc.pid})
        atomic.write_json(state_dir(workdir) / "server.json", info)

        def on_term(signum: int, frame: object) -> None:
            _stop_server(info, proc)
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        code = proc.wait()
        info["exited"] = time.time()  # on its own: a stop by us ends in on_term and records nothing
        if runtime == "docker":
            ended = docker.state(info["container"])
            info["exit_code"] = ended.get("exit_code", -1)
            info["oom_killed"] = bool(ended.get("oom_killed"))
            code = info["exit_code"] if isinstance(info["exit_code"], int) else 1
        else:
            info["exit_code"] = code
        # The log's last word, for logparse: a signal or the OOM killer leaves no line of the server's own.
        log.write(f"{logparse.SUPERVISOR_PREFIX}the server {exit_text(info)}\n".encode())
        atomic.write_json(state_dir(workdir) / "server.json", info)
    except SystemExit:
        pass
    except BaseException as exc:  # the supervisor must never leave a server behind
        with contextlib.suppress(OSError), Path(info["log"]).open("a") as out:
            out.write(f"{logparse.SUPERVISOR_PREFIX}error: {exc!r}\n")
        code = 1
    finally:
        os._exit(code & 0xFF)


def _stop_server(info: dict, proc: subprocess.Popen) -> None:
    if info.get("runtime") == "docker":
        docker.remove(info["container"])
        proc.terminate()
        return
    _terminate_tree(proc.pid, grace=20)


def _terminate_tree(pid: int, grace: float) -> None:
    """SIGTERM the server's process group (vLLM forks engine workers) if it leads one, else the process alone;
    SIGKILL what is left after `grace` s.
    Liveness is read from /proc, not Popen.poll(): inside a signal handler that interrupted Popen.wait(),
    poll() cannot take Popen's lock and always says "running"."""
    try:
        leads_group = os.getpgid(pid) == pid  # only a group the server leads is its own to signal
    except OSError:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            if leads_group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------- death
def exit_text(info: dict) -> str:
    """How a server ended on its own, from its server.json: "exited with code 1", "was killed by signal 9
    (SIGKILL)", "was OOM-killed (OOMKilled, container exit code 137)". A container's 128+N is signal N."""
    code = info.get("exit_code")
    if info.get("oom_killed"):
        return f"was OOM-killed (OOMKilled, container exit code {code})"
    if not isinstance(code, int):
        return "ended (exit status unknown)"
    sig = -code if code < 0 else (code - 128 if info.get("runtime") == "docker" and 128 < code < 160 else 0)
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {sig} ({name})"
    return f"exited with code {code}"


def gone(workdir: str, cell_id: str) -> dict:
    """{} while the server of `cell_id` runs, or when we started none here (a server started by hand); else
    {"how", "at" (epoch s), "exit_code"}. Cheap: one small file read and a kill(0); the load driver polls it."""
    info = _read_json(state_dir(workdir) / "server.json")
    if not info.get("supervisor_pid") or (cell_id and info.get("cell_id") != cell_id):
        return {}
    if info.get("exited"):
        return {"how": "the server " + exit_text(info), "at": float(info["exited"]), "exit_code": info.get("exit_code")}
    if not _alive(int(info["supervisor_pid"])):
        return {"how": "the server's supervisor is gone", "at": time.time(), "exit_code": None}
    return {}


# ---------------------------------------------------------------------------------------------- health wait
def wait_ready(workdir: str, url: str, timeout_s: float, poll_s: float = 0.1) -> ServeStatus:
    """Wait for /health while tailing the log. Stop at once on a fatal log line or a dead server.

    Returns {"ready": bool, "failure": {...} or {}, "facts": parsed log facts, "startup_s": float}.
    """
    info = _read_json(state_dir(workdir) / "server.json")
    follower = logparse.Follower()
    t0 = time.monotonic()
    offset = 0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character cut between two reads
    failure = Failure()
    ready = False
    while True:
        offset = _feed_new_lines(info.get("log", ""), offset, decoder, follower)
        if follower.fatal:
            failure = follower.fatal.copy()
            break
        if _health_ok(url):
            ready = True
            break
        if not _server_running(workdir, info):
            time.sleep(0.2)  # let the last lines reach the log
            offset = _feed_new_lines(info.get("log", ""), offset, decoder, follower)
            failure = (follower.fatal or _exit_failure(follower)).copy()
            break
        if time.monotonic() - t0 > timeout_s:
            failure = Failure(
                {
                    "class": "health_timeout",
                    "evidence": [f"/health not ready after {timeout_s:.0f} s"],
                    "root_cause": "the server neither became healthy nor died",
                }
            )
            break
        time.sleep(poll_s)
    follower.flush()
    return ServeStatus(ready=ready, failure=failure, facts=follower.facts(), startup_s=time.monotonic() - t0)


_TAIL_READ = 8 * 1024 * 1024  # per poll: a log that grows faster is caught up over the next polls


def _feed_new_lines(log_path: str, offset: int, decoder: codecs.IncrementalDecoder, follower: logparse.Follower) -> int:
    """Feed what the log gained since `offset`; returns the new offset. The follower keeps a cut-off last line
    (at most logparse.MAX_LINE characters of it), so a line that never ends costs no memory."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read(_TAIL_READ)
    except OSError:
        return offset
    follower.feed_chunk(decoder.decode(chunk))
    return offset + len(chunk)


def _exit_failure(follower: logparse.Follower) -> Failure:
    failure = logparse.classify_failure(follower.facts())
    if failure and failure.get("class"):
        return failure
    return Failure(
        {
            "class": "other",
            "evidence": ["the server process exited before it became healthy"],
            "root_cause": "server exited",
        }
    )


def _health_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _server_running(workdir: str, info: dict) -> bool:
    current = _read_json(state_dir(workdir) / "server.json")
    if current.get("exited"):
        return False
    pid = current.get("supervisor_pid") or info.get("supervisor_pid")
    return _alive(int(pid)) if pid else False


# ---------------------------------------------------------------------------------------------- stop / status
def stop(workdir: str, cell_id: str = "", holder: Mapping[str, Any] | None = None, grace: float = 30.0) -> dict:
    """Stop the server we started here (via its supervisor), if any. Idempotent: returns {"stopped": bool,
    "ended": how the cell's server ended on its own before this stop ({} if it did not; see gone())}.

    With cell_id, only that cell's server is stopped; with holder (a controller identity), only a server that
    controller started. A server of another controller is left alone."""
    path = state_dir(workdir) / "server.json"
    info = _read_json(path)
    ended = gone(workdir, cell_id) if cell_id else {}  # it died on its own before teardown came
    refusal = _not_ours_to_stop(workdir, info, cell_id, holder)
    if refusal:
        return {"stopped": False, "cell_id": info.get("cell_id", ""), "skipped": refusal}
    stopped = False
    sup = info.get("supervisor_pid")
    if sup and _alive(int(sup)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(sup), signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _alive(int(sup)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(int(sup)):
            os.kill(int(sup), signal.SIGKILL)
        stopped = True
    srv = info.get("server_pid")
    if srv and info.get("runtime") != "docker" and _alive(int(srv)) and CELL_ENV in _environ(int(srv)):
        _terminate_tree(int(srv), grace=10)
        stopped = True
    if info.get("container"):
        stopped = docker.remove(info["container"]) or stopped
    if path.exists():
        path.unlink()
    return {"stopped": stopped, "cell_id": info.get("cell_id", ""), "ended": ended}


def would_stop(workdir: str, cell_id: str = "", holder: Mapping[str, Any] | None = None) -> bool:
    """Whether stop() with these arguments would stop a running server (check mode: nothing is touched)."""
    info = _read_json(_state_path(workdir) / "server.json")
    return status(workdir)["running"] and not _not_ours_to_stop(workdir, info, cell_id, holder)


def _not_ours_to_stop(workdir: str, info: dict[str, Any], cell_id: str, holder: Mapping[str, Any] | None) -> str:
    """Why stop() must leave this server alone, or "" when it may stop it."""
    if cell_id and info.get("cell_id") and info["cell_id"] != cell_id:
        return "another cell's server"
    if holder and not _same_controller(holder, _read_json(_state_path(workdir) / "holder.json")):
        return "another controller's server"
    return ""


def _same_controller(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    keys = ("controller_host", "controller_pid")
    return all(str(a.get(k)) == str(b.get(k)) for k in keys)


def status(workdir: str) -> dict:
    sdir = _state_path(workdir)
    info = _read_json(sdir / "server.json")
    running = bool(info.get("supervisor_pid")) and _alive(int(info["supervisor_pid"])) and not info.get("exited")
    return {"running": running, "server": info, "holder": _read_json(sdir / "holder.json") if running else {}}
