"""The host's share of a detached sweep, run back to back with no controller connected. Standard library only.

The controller hands each host a plan file (`<workdir>/sweeps/<sweep>/plan.json`, mode 0600: it carries the
server's environment) and starts this runner, both through one spark_runner module run, which forks it off like the
cell supervisor (supervise.py). The runner re-reads the plan before each cell, so the controller can
append cells (those of a lost host) while it runs. Each cell is the same serve → bench → teardown + seal as
playbooks/cell.yml, through the same functions (serving.serve_cell, bench_level, teardown_cell); the sealed tar
waits in `runs/<cell>.tar` until a controller collects it.

While it runs, the runner holds `state/runner.lock` (a POSIX record lock: held by this process only, not inherited
by the servers it forks, released when it dies however it dies) and `state/runner.json` names the holder; any other
caller of supervise.acquire_lock is refused with that name. progress.json says what is done, failed and running.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import atomic, loadpoints, longdecode, serving, supervise, utc
from .contracts import CellDone, Holder, LiveWindow, RunnerProgress
from .errors import HostError

PLAN = "plan.json"
PROGRESS = "progress.json"
WINDOW_LIMIT = 4 * 1024 * 1024  # a window file is a few KB (its telemetry timeline included)
LOG = "runner.log"
MAX_WAIT_S = 60.0  # a look waits on the host at most this long (a bound on what a controller may ask)


def sweep_dir(workdir: str, sweep: str) -> Path:
    return Path(os.path.expanduser(workdir)) / "sweeps" / sweep


def read_progress(workdir: str, sweep: str) -> RunnerProgress:
    """What the runner wrote last: {state, pid, current, current_since, done: {id: outcome}, updated, ...};
    {} when no runner ever started for this sweep here. `alive` says whether the runner process still runs."""
    path = sweep_dir(workdir, sweep) / PROGRESS
    try:
        progress = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(progress, dict):
        return {}
    progress = RunnerProgress(**progress)  # type: ignore[typeddict-item]
    holder = supervise.runner_holder(workdir)
    progress["alive"] = bool(holder) and holder.get("sweep") == sweep
    sealed = {p.stem for p in (Path(os.path.expanduser(workdir)) / "runs").glob("*.tar")}
    # a tar left by an earlier sweep of the same cell id is not this run's answer: only what this runner sealed
    done = progress.get("done", {})
    progress["sealed"] = sorted(c for c, d in done.items() if c in sealed and d.get("outcome") == "sealed")
    current = progress.get("current", "")
    progress["window"] = latest_window(workdir, current) if isinstance(current, str) and current else {}
    return progress


def latest_window(workdir: str, cell_id: str) -> LiveWindow | dict[str, Any]:
    """The newest measured window of the running cell (the controller's live view); {} before the first."""
    folder = Path(os.path.expanduser(workdir)) / "runs" / Path(cell_id).name
    try:
        windows = [p for p in folder.iterdir() if p.suffix == ".json" and loadpoints.WINDOW.fullmatch(p.stem)]
        newest = max(windows, key=lambda p: p.stat().st_mtime) if windows else None
        if newest is None or newest.stat().st_size > WINDOW_LIMIT:
            return {}
        w = json.loads(newest.read_text())
        return LiveWindow(
            concurrency=int(w.get("concurrency", 0)),
            tok_s=float(w.get("output_throughput", 0.0)),
            ttft_ms=float(w.get("median_ttft_ms", 0.0)),
            tpot_ms=float(w.get("median_tpot_ms", 0.0)),
            at=newest.stat().st_mtime,
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def progress_token(progress: RunnerProgress) -> str:
    """What a look saw of the progress: it changes when a cell starts or ends, a window is written (the live view),
    and when the runner stops or dies."""
    seen = {k: progress.get(k) for k in ("state", "handout", "current", "done", "alive", "sealed", "window")}
    return hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:16]


def await_progress(
    workdir: str, sweep: str, seen: str = "", wait_s: float = 0.0, poll_s: float = 0.5, settle_s: float = 0.3
) -> RunnerProgress:
    """read_progress, as soon as it differs from what the caller saw last (`seen`, a progress_token), or after
    `wait_s`: a look that waits here returns the moment a cell ends, where looking again and again would cost an
    ansible-playbook run each time. It returns at once when the runner is not alive (nothing will change), and
    when its caller went away (the SSH session that started this process ended: its parent changed). A change is
    read again after `settle_s`: the runner writes "cell done" and "next cell" (or "finished") a moment apart."""
    deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
    parent = os.getppid()
    while True:
        progress = read_progress(workdir, sweep)
        if not seen or not progress.get("alive"):
            return progress
        if progress_token(progress) != seen:
            time.sleep(settle_s)
            return read_progress(workdir, sweep)
        if time.monotonic() >= deadline or os.getppid() != parent:
            return progress
        time.sleep(poll_s)


def write_plan(workdir: str, sweep: str, plan: dict[str, Any], serve_env: dict[str, str], check: bool = False) -> bool:
    """The host's plan as the controller handed it, with the server's plumbing env (it may hold a token) in its
    host part: `<workdir>/sweeps/<sweep>/plan.json`, owner-only, whole or not at all. Returns whether it changed."""
    if not isinstance(plan.get("cells"), list) or not isinstance(plan.get("host", {}), dict):
        raise HostError(f"sweep {sweep}: not a plan (no cells)")
    whole = {**plan, "host": {**plan.get("host", {}), "serve_env": dict(serve_env)}}
    path = sweep_dir(workdir, sweep) / PLAN
    try:
        same = json.loads(path.read_text()) == whole and (path.stat().st_mode & 0o777) == 0o600
    except (OSError, ValueError):
        same = False
    if same or check:
        return not same
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic.write_json(path, whole)  # mkstemp: owner-only (0600)
    return True


def start(workdir: str, sweep: str) -> dict[str, Any]:
    """Fork the runner unless one already runs this sweep here; returns {"started": bool, "pid": int}. Refuses
    (HostBusy, naming the holder) while another sweep's runner or a server of anyone else holds the host."""
    holder = supervise.runner_holder(workdir)
    if holder:
        if holder.get("sweep") == sweep:
            return {"started": False, "pid": holder.get("runner_pid", 0)}
        raise supervise.HostBusy("host is in use by " + supervise.describe_holder(holder), holder)
    plan = _read_plan(workdir, sweep)
    busy = supervise.status(workdir)
    if busy["running"]:
        raise supervise.HostBusy("host is in use by " + supervise.describe_holder(busy["holder"]), busy["holder"])
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the runner: detach from Ansible's session, never return
        os.close(read_fd)
        _daemon(workdir, sweep, plan, write_fd)
    os.close(write_fd)
    with os.fdopen(read_fd) as ready:  # the runner says when it holds the lock (or why it could not)
        word = ready.read()
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)  # the intermediate child exits at once; the runner itself is its child
    if not word.startswith("ok "):
        raise HostError(f"the runner did not start: {word or 'no word from it'}")
    return {"started": True, "pid": int(word.split()[1])}


def stop(workdir: str, sweep: str, grace: float = 60.0) -> bool:
    """SIGTERM this sweep's runner: it stops its current server and exits (that cell stays unsealed)."""
    holder = supervise.runner_holder(workdir)
    pid = int(holder.get("runner_pid", 0) or 0)
    if not pid or holder.get("sweep") != sweep:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while supervise.runner_holder(workdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def _read_plan(workdir: str, sweep: str) -> dict[str, Any]:
    path = sweep_dir(workdir, sweep) / PLAN
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HostError(f"no readable plan for sweep {sweep} at {path}: {exc}") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("cells"), list):
        raise HostError(f"{path}: not a plan (no cells)")
    return plan


def _daemon(workdir: str, sweep: str, plan: dict[str, Any], ready_fd: int) -> None:
    """Double fork: the runner is no child of Ansible's module process, and has no terminal and no session."""
    code = 0
    try:
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        log = os.open(str(sweep_dir(workdir, sweep) / LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        holder = Holder(**{**plan.get("holder", {}), "cell_id": ""})  # type: ignore[typeddict-item]
        try:
            lock_fd = supervise.acquire_runner_lock(workdir, holder, sweep)
        except supervise.HostBusy as exc:
            os.write(ready_fd, f"busy: {exc}".encode())
            os._exit(3)
        os.write(ready_fd, f"ok {os.getpid()}".encode())
        os.close(ready_fd)
        code = run(workdir, sweep)
        os.close(lock_fd)
    except BaseException as exc:
        print(f"{utc.iso()} runner error: {exc!r}", flush=True)
        code = 1
    finally:
        os._exit(code)


class _Stopped(Exception):
    pass


def _identity(workdir: str, sweep: str) -> tuple[tuple[int, int], ...]:
    """The work dir and this sweep's folder as the runner found them (device, inode); () when either is missing."""
    try:
        return tuple(
            (st.st_dev, st.st_ino) for st in (os.stat(os.path.expanduser(workdir)), sweep_dir(workdir, sweep).stat())
        )
    except OSError:
        return ()


def _vanished(workdir: str, sweep: str, found: tuple[tuple[int, int], ...]) -> bool:
    """The work dir (or this sweep's folder in it) is gone, or is another one now (removed by hand, a wiped disk;
    a write of the runner's own may have made the path again): its state files went with it, so the server it
    started would run on with no one to stop it."""
    return _identity(workdir, sweep) != found


def stop_orphans(workdir: str) -> list[int]:
    """Stop every server process started from this work dir (they carry its markers in their environment, which
    outlives the folder); returns their pids."""
    mine = str(Path(os.path.expanduser(workdir)))
    stopped = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = supervise._environ(int(entry))
        if env.get(supervise.WORKDIR_ENV) == mine and supervise.CELL_ENV in env and supervise._alive(int(entry)):
            supervise._terminate_tree(int(entry), grace=10)
            stopped.append(int(entry))
    return stopped


def run(workdir: str, sweep: str) -> int:
    """Run the plan's cells that are not done yet, one after another; re-read the plan before each cell."""
    progress_path = sweep_dir(workdir, sweep) / PROGRESS
    try:
        progress = json.loads(progress_path.read_text())
    except (OSError, ValueError):
        progress = {}
    progress.update(sweep=sweep, state="running", pid=os.getpid(), current="", current_since="")
    progress.setdefault("done", {})
    _same_handout(progress, _read_plan(workdir, sweep))
    progress.setdefault("started", utc.iso())
    found = _identity(workdir, sweep)

    def save() -> None:
        progress["updated"] = utc.iso()
        atomic.write_json(progress_path, progress)

    def on_term(signum: int, frame: object) -> None:
        raise _Stopped

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    save()
    try:
        while True:
            if _vanished(workdir, sweep, found):
                raise HostError("the work dir vanished")
            plan = _read_plan(workdir, sweep)
            if not _same_handout(progress, plan):
                save()
            todo = [c for c in plan["cells"] if isinstance(c, dict) and c.get("id") not in progress["done"]]
            if not todo:
                break
            cell = todo[0]
            progress.update(current=cell["id"], current_since=utc.iso())
            save()
            progress["done"][cell["id"]] = run_cell(workdir, plan, cell)
            print(f"{utc.iso()} cell {cell['id']}: {progress['done'][cell['id']]['outcome']}", flush=True)
            progress.update(current="", current_since="")
            save()
    except _Stopped:
        if progress.get("current"):
            serving.teardown_cell(workdir, progress["current"], None, seal_it=False)
        progress.update(state="stopped", stopped=progress.get("current", ""), current="", current_since="")
        save()
        return 130
    except (HostError, OSError):
        if not _vanished(workdir, sweep, found):
            raise
        pids = stop_orphans(workdir)  # its server.json went with the folder: found by their markers instead
        note = f"the work dir {workdir} vanished during cell {progress.get('current') or '-'}; stopped " + (
            f"its server (pid {', '.join(map(str, pids))})" if pids else "nothing (no server of ours ran)"
        )
        print(f"{utc.iso()} {note}", flush=True)
        progress.update(state="stopped", current="", current_since="", note=note)
        with contextlib.suppress(OSError):  # the last progress says so, in a folder made again for it
            progress_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            save()
        return 1
    progress["state"] = "finished"
    save()
    return 0


def _same_handout(progress: dict[str, Any], plan: dict[str, Any]) -> bool:
    """A plan from a new hand-out (a re-run, --fresh) starts from nothing: what this host did for an earlier one is
    in the results tree already or measured again. Appended cells (a lost host's) keep the same hand-out."""
    handout = str(plan.get("handout", ""))
    if progress.get("handout", "") == handout:
        return True
    progress.update(handout=handout, done={})
    return False


def run_cell(workdir: str, plan: dict[str, Any], cell: dict[str, Any]) -> CellDone:
    """serve → bench every level → teardown + seal, as cell.yml does. outcome "sealed": a result to collect,
    whatever the server did; "host_error": the host could not take the cell (nothing to collect; lost)."""
    started = time.time()
    measure_s = 0.0
    host = plan.get("host", {})
    holder = Holder(**{**plan.get("holder", {}), "cell_id": cell["id"]})  # type: ignore[typeddict-item]
    print(f"{utc.iso()} cell {cell['id']} starts", flush=True)
    try:
        served = serving.serve_cell(
            workdir=workdir,
            cell_id=cell["id"],
            runtime=host.get("runtime", "process"),
            argv=[str(a) for a in cell["argv"]],
            env_file=str(Path(os.path.expanduser(workdir)) / "env" / f"{cell['id']}.env"),  # written by provision
            extra_env={**host.get("serve_env", {}), **cell.get("host_env", {})},
            image=cell.get("image", ""),
            url=host["url"],
            health_timeout=float(host.get("health_timeout", 1800)),
            scope=host.get("scope", "machine"),
            evict=bool(host.get("evict", False)),
            holder=holder,
            model=str(cell.get("model", "")),
            model_cache=str(host.get("model_cache", "")),
        )
    except (HostError, OSError) as exc:
        return CellDone(
            outcome="host_error", error=str(exc)[:300], started=started, finished=time.time(), measure_s=0.0
        )
    probe_url = ""
    try:
        if served["ready"]:
            shape = _shape_options(cell.get("shape"), workdir)
            points = [] if cell.get("probe_only") else loadpoints.cell_points(cell["concurrency"], cell.get("shape"))
            for n, point in enumerate(points):  # a probe-only start (an eager one) goes straight to its checks
                result = serving.bench_level(
                    url=host["url"],
                    model=cell["model"],
                    level=point.concurrency,
                    duration=float(cell["duration_s"]),
                    warmup=int(cell["warmup"]),
                    warmup_max=int(cell.get("warmup_max", 0)),
                    warmup_tolerance=float(cell.get("warmup_tolerance", 0.0)),
                    repeats=int(cell["repeats"]),
                    prompt_len=int(cell["prompt_len"]),
                    output_len=int(cell["output_len"]),
                    profile=cell["profile"],
                    seed=int(cell.get("seed", 0)),
                    out_dir=str(serving.run_dir(workdir, cell["id"])),
                    workdir=workdir,
                    cell_id=cell["id"],
                    time_scale=float(cell.get("time_scale", 1.0)),  # the simulator's accelerated clock
                    shape={**shape, "request_rate": point.rate, "context_depth": point.depth},
                    telemetry_opts={
                        **_first_only(cell.get("telemetry") or {}, n),
                        "nvidia_smi": host.get("nvidia_smi"),
                    },
                )
                measure_s += result["elapsed_s"]
                if result["engine_died"]:
                    break
            probe_url = host["url"] if cell.get("probe") else ""  # windows over, no stop: ask the server
    except (HostError, ValueError, OSError) as exc:  # the load driver itself failed: the log says the rest
        print(f"{utc.iso()} cell {cell['id']}: bench error: {exc}", flush=True)
    finally:
        # A stop (SIGTERM) lands here too: the server goes, and an interrupted cell is sealed only if it got here.
        serving.teardown_cell(
            workdir,
            cell["id"],
            None,
            seal_it=True,
            probe_url=probe_url,
            probe_model=str(cell.get("model", "")),
            probe_long=longdecode.options(cell.get("probe_long")),
        )
    return CellDone(outcome="sealed", error="", started=started, finished=time.time(), measure_s=round(measure_s, 3))


def main(argv: list[str] | None = None) -> int:
    """python3 -m agent.hostside.runner WORKDIR SWEEP: run the plan in the foreground (debugging on a host)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python3 -m agent.hostside.runner WORKDIR SWEEP", file=sys.stderr)
        return 2
    return run(args[0], args[1])


def _shape_options(shape: dict[str, Any] | None, workdir: str) -> dict[str, Any]:
    """spark_bench's shape options from a plan's `cell.shape` (matrix.shape_vars), as playbooks/tasks/bench.yml
    maps them: a ShareGPT file is the copy named by its hash under the work dir."""
    if not shape:
        return {}
    opts = {k: v for k, v in shape.items() if k not in ("dataset_src", "dataset_sha256", *LIST_KEYS)}
    if shape.get("dataset_src"):
        opts["dataset_path"] = str(Path(os.path.expanduser(workdir)) / "datasets" / f"{shape['dataset_sha256']}.json")
    return opts


LIST_KEYS = ("request_rates", "context_depths")  # the load axes: one point's rate and depth go to each bench


def _first_only(telemetry: dict[str, Any], n: int) -> dict[str, Any]:
    """The cool-down happens before a cell's first point only (as bench.yml passes it)."""
    return telemetry if n == 0 else {**telemetry, "cooldown_s": 0.0, "cool_to_c": 0.0}


if __name__ == "__main__":
    sys.exit(main())
