"""Serve one cell on this host: environment file in, server up and healthy (or classified dead) out.

The Ansible module spark_server is a thin shell over serve_cell(). Standard library only.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import atomic, docker, redact, supervise, warmcache
from .contracts import Holder
from .errors import HostError

DIED_FILE = "died.json"  # in the run folder when the server died mid-cell: when, how, in which window


class ServeError(HostError):
    """The cell cannot be served for a reason the user must fix (digest mismatch, no docker, ...)."""


def run_dir(workdir: str, cell_id: str) -> Path:
    path = Path(os.path.expanduser(workdir)) / "runs" / cell_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines, as docker --env-file reads them (no quoting, # comments)."""
    env: dict[str, str] = {}
    if not path:
        return env
    for line in Path(os.path.expanduser(path)).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            env[key.strip()] = value
    return env


def launch_command(
    runtime: str,
    argv: Sequence[object],
    env: Mapping[str, object],
    image: str = "",
    container: str = "spark-agent",
    cell_id: str = "",
    cache_dir: Path | None = None,
) -> str:
    """The exact command, copy-pasteable: env assignments + argv (docker: the docker run line).
    The one renderer of a serve command line: launch.txt, cell.toml's [launch] and the report all use it."""
    if runtime == "docker":
        cache = str(cache_dir) if cache_dir is not None else ""
        return docker.launch_line(image, container, [str(a) for a in argv], env, label=cell_id, cache_dir=cache)
    assigns = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(env.items()))
    return (assigns + " " if assigns else "") + shlex.join([str(a) for a in argv])


def serve_cell(
    *,
    workdir: str,
    cell_id: str,
    runtime: str,
    argv: list[str],
    env_file: str,
    extra_env: dict[str, str],
    image: str,
    url: str,
    health_timeout: float,
    scope: str,
    evict: bool,
    holder: Holder,
) -> dict[str, Any]:
    """Start the cell's server and wait until it is healthy, or until the log says it died (fail fast)."""
    rdir = run_dir(workdir, cell_id)
    clear_results(rdir)
    env = read_env_file(env_file)
    if runtime == "docker" and not shutil.which("docker"):
        raise ServeError(
            "the inventory says spark_runtime=docker but this host has no docker CLI; "
            "install docker (and the NVIDIA container toolkit) or set spark_runtime=process"
        )
    full_env = dict(env, **{k: str(v) for k, v in (extra_env or {}).items()})
    pinned = image
    if (
        runtime == "docker" and image
    ):  # the pinned digest may be here under a mirror's name: run that, verify the digest
        image = docker.local_ref(pinned) or pinned
    cache = warmcache.prepare(workdir, pinned)  # one per image digest: the second cell of an image starts warm
    if cache is not None:
        full_env = {**warmcache.environment(cache, runtime), **full_env}  # a spec's own setting wins
    container = supervise.container_prefix(workdir) + cell_id
    shown = launch_command(
        runtime, redact.redact_argv(argv), redact.redact_env(full_env), image, container, cell_id, cache_dir=cache
    )
    (rdir / "launch.txt").write_text(shown + "\n")  # redacted; the server below gets full_env as it is
    log_path = str(rdir / "server.log")
    supervise.start(
        cell_id,
        workdir,
        runtime,
        argv,
        full_env,
        log_path,
        holder,
        image=image,
        scope=scope,
        evict=evict,
        url=url,
        docker_present=bool(shutil.which("docker")),
        cache_dir=str(cache) if cache is not None else "",
    )
    outcome = supervise.wait_ready(workdir, url, health_timeout)
    if outcome["ready"] and runtime == "docker":
        info = supervise.status(workdir)["server"]
        try:
            docker.verify_running_digest(info["container"], pinned)
        except (HostError, ValueError) as exc:  # a mismatch aborts the cell with both digests shown
            supervise.stop(workdir)
            raise ServeError(str(exc)) from None
    if not outcome["ready"]:
        supervise.stop(workdir)
    (rdir / "serve.json").write_text(json.dumps(outcome, indent=1, default=str))
    return {
        "ready": outcome["ready"],
        "failure": outcome["failure"],
        "startup_s": round(outcome["startup_s"], 2),
        "attestation": outcome["facts"],
        "run_dir": str(rdir),
    }


def clear_results(rdir: Path) -> None:
    """A run folder holds one run: windows and a death record of an earlier run of this cell (a killed
    controller, --fresh) must not be collected with this one."""
    for path in [*rdir.glob("c[0-9][0-9][0-9]-r*.json"), rdir / DIED_FILE]:
        path.unlink(missing_ok=True)


def record_death(rdir: str, died: dict) -> bool:
    """Write died.json once: the first to see the death (the load driver, else teardown) says when and where."""
    path = Path(os.path.expanduser(rdir)) / DIED_FILE
    if path.exists():
        return False
    atomic.write_json(path, died)
    return True


def seal(workdir: str, cell_id: str) -> str:
    """Pack the cell's run folder (log, launch line, results) into one tar for collection; returns its path."""
    rdir = run_dir(workdir, cell_id)
    tar_path = str(rdir) + ".tar"
    with atomic.replacing(tar_path) as tmp, tarfile.open(tmp, "w") as tar:
        for path in sorted(rdir.iterdir()):
            tar.add(str(path), arcname=path.name)
    return tar_path
