"""Serve one cell on this host: environment file in, server up and healthy (or classified dead) out.

The Ansible module spark_server is a thin shell over serve_cell(). Standard library only.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import atomic, docker, loadgen, loadpoints, probe, redact, steady, supervise, telemetry, warmcache
from .contracts import Holder, LongOptions, Measurement
from .errors import HostError

HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"  # huggingface_hub's default for the images' root user

SERVER_LOG = "server.log"  # the server's output, in its run folder
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


ENV_HEADER = "# spark-agent: environment of cell {id} (rules + overrides; see cell.toml [[env_provenance]])\n"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CELL_ID = re.compile(r"^[0-9a-f]{12}$")


def env_file_text(cell_id: str, env: Mapping[str, object]) -> str:
    """The text of a cell's env file: what read_env_file (and docker --env-file) reads back, keys sorted."""
    lines = [ENV_HEADER.format(id=cell_id)]
    for key, value in sorted(env.items()):
        text = str(value)
        if not _ENV_NAME.match(key) or "\n" in text or "\r" in text:
            raise ServeError(f"cell {cell_id}: variable {key!r} cannot go into an env file (bad name or a newline)")
        lines.append(f"{key}={text}\n")
    return "".join(lines)


def write_env_files(workdir: str, cells: Sequence[Mapping[str, Any]], check: bool = False) -> list[str]:
    """Every cell's env file under <workdir>/env, owner-only, whole or not at all; only those whose text changed
    are written. One call for all of a host's cells (a loop of Ansible copies cost a module run per cell).
    Returns the ids written (or that would be, with check)."""
    folder = Path(os.path.expanduser(workdir)) / "env"
    changed = []
    for cell in cells:
        cell_id = str(cell.get("id", ""))
        if not _CELL_ID.match(cell_id):
            raise ServeError(f"{cell_id[:40]!r} is not a cell id (12 hex)")
        text = env_file_text(cell_id, cell.get("env") or {})
        path = folder / f"{cell_id}.env"
        try:
            same = path.read_text() == text and (path.stat().st_mode & 0o777) == 0o600
        except OSError:
            same = False
        if same:
            continue
        changed.append(cell_id)
        if not check:
            folder.mkdir(parents=True, exist_ok=True)
            atomic.write_text(path, text)  # mkstemp: owner-only (0600)
    return changed


def launch_command(
    runtime: str,
    argv: Sequence[object],
    env: Mapping[str, object],
    image: str = "",
    container: str = "spark-agent",
    cell_id: str = "",
    volumes: Sequence[str] = (),
) -> str:
    """The exact command, copy-pasteable: env assignments + argv (docker: the docker run line).
    The one renderer of a serve command line: launch.txt, cell.toml's [launch] and the report all use it."""
    if runtime == "docker":
        return docker.launch_line(image, container, [str(a) for a in argv], env, label=cell_id, volumes=volumes)
    assigns = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(env.items()))
    return (assigns + " " if assigns else "") + shlex.join([str(a) for a in argv])


def volumes(cache: Path | None, model_cache: str, model: str) -> list[str]:
    """What a server container mounts from its host: the image's warm-start cache (warmcache.CONTAINER_ROOT), the
    host's Hugging Face cache where the image's root user looks for it (vLLM's docker docs mount
    ~/.cache/huggingface the same way, so a hub checkpoint is downloaded once per host, not once per container),
    and a checkpoint folder given by absolute path, read-only at the same path (the argv names it as it is)."""
    out = [f"{cache}:{warmcache.CONTAINER_ROOT}"] if cache is not None else []
    if model_cache:
        hf = Path(os.path.expanduser(model_cache))
        hf.mkdir(parents=True, exist_ok=True)  # docker would make a missing one root-owned
        out.append(f"{hf}:{HF_CACHE_IN_CONTAINER}")
    if model.startswith("/") and ":" not in model and Path(model).is_dir():  # a colon would split docker's -v
        out.append(f"{model}:{model}:ro")
    return out


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
    model: str = "",
    model_cache: str = "",
) -> dict[str, Any]:
    """Start the cell's server and wait until it is healthy, or until the log says it died (fail fast).
    A container sees the host's model cache and a local checkpoint folder (`volumes`)."""
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
    mounts = volumes(cache, model_cache, model) if runtime == "docker" else []
    shown = launch_command(
        runtime, redact.redact_argv(argv), redact.redact_env(full_env), image, container, cell_id, volumes=mounts
    )
    (rdir / "launch.txt").write_text(shown + "\n")  # redacted; the server below gets full_env as it is
    log_path = str(rdir / SERVER_LOG)
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
        volumes=mounts,
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
    windows = [p for p in rdir.glob("*-r*.json") if loadpoints.WINDOW.fullmatch(p.stem)]
    for path in [*windows, rdir / DIED_FILE, rdir / probe.PROBE_FILE]:
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


def bench_level(
    *,
    url: str,
    model: str,
    level: int,
    duration: float,
    warmup: int,
    repeats: int,
    prompt_len: int,
    output_len: int,
    profile: str,
    seed: int,
    out_dir: str,
    workdir: str = "",
    cell_id: str = "",
    time_scale: float = 1.0,
    shape: Mapping[str, Any] | None = None,
    telemetry_opts: Mapping[str, Any] | None = None,
    warmup_max: int = 0,
    warmup_tolerance: float = 0.0,
) -> dict[str, Any]:
    """One load point (concurrency `level`; the rate and context depth are shape's request_rate and context_depth):
    warmups, then measured windows, each saved as soon as it is over under its point's name (loadpoints.WINDOW).
    A server that dies ends the bench at once (died.json says when and where). The one implementation behind the
    spark_bench module and the detached runner. Raises HostError/ValueError/OSError on bad input.
    warmup_tolerance > 0: warm up until steady, `warmup` to `warmup_max` windows (hostside/steady.py); with the
    cell's server log at hand every measured window is also checked for JIT lines."""
    os.makedirs(out_dir, exist_ok=True)

    def save(result: Measurement) -> None:
        point = loadpoints.of_window(result)
        name = loadgen.result_filename(point.concurrency, result["repeat"], point.rate, point.depth)
        atomic.write_json(os.path.join(out_dir, name), result)

    watched = workdir and cell_id
    gone = functools.partial(supervise.gone, workdir=workdir, cell_id=cell_id) if watched else None
    watch = loadgen.EngineWatch(url=url, gone=gone)
    started = time.monotonic()
    opts = dict(shape or {})  # spark_bench's load-shape options (loadgen.make_shape), request_rate among them
    load_shape = loadgen.make_shape(
        prompt_len=prompt_len, output_len=output_len, profile=profile, rate=float(opts.pop("request_rate", 0.0)), **opts
    )
    t = dict(telemetry_opts or {})
    sampler = telemetry.Sampler(
        interval_s=float(t.get("interval_s", 1.0)),
        command=[str(a) for a in t.get("nvidia_smi") or ["nvidia-smi"]],
        metrics_url=url,
        throttle_share=float(t.get("throttle_threshold", 5.0)),
    )
    with sampler:
        if sampler.note and t.get("required"):
            raise HostError(f"telemetry is required ([telemetry] required = true): {sampler.note}")
        if float(t.get("cooldown_s", 0)) > 0 or float(t.get("cool_to_c", 0)) > 0:
            sampler.cool_down(
                float(t.get("cooldown_s", 0)), float(t.get("cool_to_c", 0)), float(t.get("cool_timeout_s", 600))
            )
        runs = loadgen.run_levels(
            url=url,
            model=model,
            levels=[level],
            duration_s=duration,
            warmup_s=warmup * duration,
            repeats=repeats,
            prompt_len=prompt_len,
            output_len=output_len,
            profile=profile,
            seed=seed,
            on_result=save,
            watch=watch,
            shape=load_shape,
            clock=loadgen.scaled_clock(time_scale),
            sampler=sampler,
            rule=steady.Warmup(warmup, warmup_max, warmup_tolerance),
            log=steady.LogWatch(str(run_dir(workdir, cell_id) / SERVER_LOG)) if watched else None,
        )
    if watch.died:
        record_death(rdir=out_dir, died=watch.died)
    summary = [
        {
            "repeat": r.get("repeat"),
            "ok": r.get("ok"),
            "output_throughput": r.get("output_throughput"),
            "error": r.get("error", ""),
        }
        for r in runs
    ]
    return {
        "level": level,
        "runs": summary,
        "engine_died": bool(watch.died),
        "died": watch.died,
        "elapsed_s": round(time.monotonic() - started, 3),
    }


def probe_cell(workdir: str, cell_id: str, url: str, model: str, long: LongOptions | None = None) -> bool:
    """The correctness probe (hostside/probe.py) against the cell's server after its windows, into probe.json.
    Only a server of this cell that still runs and did not die mid-cell is asked; returns whether it was."""
    rdir = run_dir(workdir, cell_id)
    info = supervise.status(workdir)
    if not info["running"] or info["server"].get("cell_id") != cell_id or (rdir / DIED_FILE).exists():
        return False
    if supervise.gone(workdir, cell_id):
        return False
    atomic.write_json(rdir / probe.PROBE_FILE, probe.run(url, model, long=long))
    return True


def teardown_cell(
    workdir: str,
    cell_id: str,
    holder: Mapping[str, Any] | None,
    seal_it: bool,
    probe_url: str = "",
    probe_model: str = "",
    probe_long: LongOptions | None = None,
) -> dict[str, Any]:
    """Probe the server's outputs when given its url (a cell run to its end), stop it (idempotent), record a death
    seen only now, and pack the run folder when asked. The one implementation behind spark_server state=stopped
    and the detached runner, so both paths probe alike."""
    probed = bool(seal_it and cell_id and probe_url) and probe_cell(
        workdir, cell_id, probe_url, probe_model, probe_long
    )
    result = supervise.stop(workdir=workdir, cell_id=cell_id, holder=holder)
    result["probed"] = probed
    if result.get("ended") and cell_id:  # it died after the load driver last looked: still a death
        died = dict(result["ended"], detected_at=time.time(), window="at teardown")
        record_death(rdir=str(run_dir(workdir, cell_id)), died=died)
    if seal_it and cell_id:  # the log is final now: pack the run folder for collect
        result["sealed"] = seal(workdir=workdir, cell_id=cell_id)
    return result
