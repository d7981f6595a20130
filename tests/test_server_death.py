"""A server that dies mid-cell: the log's root cause, the supervisor's record, the load driver's watch, the cell
record and the report. Real parts: the simulated Spark as a process, the real supervisor (run these under the
shared lock: they start simulators). The end-to-end sweep over SSH is in test_sweep_death.py."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import pytest
from rich.console import Console

from agent.hostside import loadgen, logparse, serving, supervise
from agent.judging import correctness
from agent.planning.matrix import Cell, CellConfig
from agent.reporting import markdown
from agent.results import tree as results
from agent.running import collect
from agent.running.identity import controller_identity

from .test_cell_id_golden import GOLDEN_CONFIG
from .test_sim_support import REPO, SimServer, free_port

pytestmark = pytest.mark.integration  # simulators (and sshd test hosts) on 127.0.0.x

GB10_ENV = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_DISABLE_VERSION_CHECK": "1"}
READY = "(APIServer pid=1) INFO:     Application startup complete.\n"
MARLIN = (
    "(APIServer pid=1) INFO 12-01 08:00:00 [loader.py:1] Using 'MARLIN' NvFp4 MoE backend out of potential backends\n"
)
CRASH_LOG = (
    MARLIN
    + READY
    + "(EngineCore_DP0 pid=2) ERROR 12-01 08:00:05 [core.py:1037] EngineCore encountered a fatal error.\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1028, in run_engine_core\n'
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
    "spark-agent supervisor: the server exited with code 1\n"
)


# ---------------------------------------------------------------------------------------------- the log's word


@pytest.mark.parametrize(
    "tail,cls,root",
    [
        ("", "", ""),  # it never died: nothing to say
        (CRASH_LOG.split(READY)[1], "cuda_error", "torch.AcceleratorError: CUDA error: an illegal memory access"),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
            "oom",
            "torch.OutOfMemoryError: CUDA out of memory",
        ),
        ("spark-agent supervisor: the server was killed by signal 9 (SIGKILL)\n", "killed_by_signal", "signal 9"),
        ("spark-agent supervisor: the server was OOM-killed (OOMKilled, container exit code 137)\n", "oom", "OOM"),
        ("spark-agent supervisor: the server exited with code 3\n", "other", "exited with code 3"),
    ],
)
def test_the_root_cause_of_a_death_after_readiness(tail, cls, root):
    facts = logparse.parse(READY + tail)
    assert facts["startup_complete"] and facts["failure"] == {}
    died = facts["runtime_failure"]
    assert (died.get("class", ""), root in died.get("root_cause", "")) == (cls, True)
    if cls:
        assert died["evidence"] and len(died["evidence"]) <= 12


def test_startup_failures_keep_their_class():
    log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB\n"
    facts = logparse.parse(log + "spark-agent supervisor: the server exited with code 1\n")
    assert facts["failure"]["class"] == "oom" and facts["runtime_failure"] == {}


def test_killed_while_starting_is_named_by_the_supervisors_line():
    log = MARLIN + "spark-agent supervisor: the server was killed by signal 9 (SIGKILL)\n"
    failure = logparse.classify_failure(log)
    assert failure["class"] == "killed_by_signal" and failure["root_cause"].endswith("signal 9 (SIGKILL)")


def test_a_new_run_of_a_cell_starts_without_the_last_runs_windows_or_death(tmp_path):
    for name in ("c001-r1.json", serving.DIED_FILE, "server.log", "launch.txt"):
        (tmp_path / name).write_text("{}")
    serving.clear_results(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launch.txt", "server.log"]


@pytest.mark.parametrize(
    "info,text",
    [
        ({"runtime": "process", "exit_code": 1}, "exited with code 1"),
        ({"runtime": "process", "exit_code": -9}, "was killed by signal 9 (SIGKILL)"),
        ({"runtime": "docker", "exit_code": 139}, "was killed by signal 11 (SIGSEGV)"),
        ({"runtime": "docker", "exit_code": 137, "oom_killed": True}, "was OOM-killed (OOMKilled, container exit"),
        ({"runtime": "process", "exit_code": 137}, "exited with code 137"),  # a process's own exit status
        ({"runtime": "docker", "exit_code": None}, "ended (exit status unknown)"),
    ],
)
def test_exit_text(info, text):
    assert supervise.exit_text(info).startswith(text)


# ---------------------------------------------------------------------------------------------- the watch


def test_watch_reports_the_supervisors_record_with_the_window():
    ended = {}
    watch = loadgen.EngineWatch(f"http://127.0.0.1:{free_port()}", gone=lambda: ended)
    watch.phase = "c004-r2"
    ended.update(how="the server was killed by signal 9 (SIGKILL)", at=time.time() - 0.3, exit_code=-9)
    died = asyncio.run(watch.check())
    assert died["window"] == "c004-r2" and died["how"].endswith("(SIGKILL)") and died["exit_code"] == -9
    assert 0.25 < died["detected_at"] - died["at"] < 5
    watch.phase = "c008-r1"
    assert asyncio.run(watch.check())["window"] == "c004-r2"  # dead stays dead, where it died


def test_watch_needs_health_gone_for_a_grace_period_not_one_probe():
    watch = loadgen.EngineWatch(f"http://127.0.0.1:{free_port()}")
    began = time.monotonic()
    assert asyncio.run(watch.check()) == {}  # one refused probe is not a death yet
    while not asyncio.run(watch.check()):
        assert time.monotonic() - began < 5
        time.sleep(0.2)
    assert time.monotonic() - began >= loadgen.HEALTH_GRACE_S
    assert watch.died["how"] == "/health unreachable (ConnectionRefusedError)"


def _sim(*flags: str) -> SimServer:
    return SimServer("uns-fast", "--moe-backend", "marlin", "--max-model-len", "8192", *flags, env=GB10_ENV)


def test_load_driver_stops_at_once_keeps_earlier_windows_and_skips_the_rest():
    """Concurrency 1 with outputs longer than a window: request N is window N. The server dies 0.5 s into
    request 2 (the second window of c=1); c=2 is never run."""
    with _sim("--sim-crash-at-request", "2") as sim:
        sim.wait_ready()
        watch = loadgen.EngineWatch(sim.url)
        runs = loadgen.run_levels(sim.url, "uns-fast", [1, 2], 1.5, 0.0, 3, 16, 4000, watch=watch)
        stopped = time.time()
        assert sim.wait_exit() == 1
    assert [(r["concurrency"], r["repeat"], r["ok"]) for r in runs] == [(1, 1, True), (1, 2, False)]
    assert runs[1]["engine_died"] is True and runs[1]["error"].startswith("the server died during this window")
    assert watch.died["window"] == "c001-r2"
    assert stopped - watch.died["at"] < 5  # the remaining windows were skipped, not hammered


def test_a_healthy_server_is_never_declared_dead():
    with _sim("--sim-rate", "unlimited") as sim:
        sim.wait_ready()
        watch = loadgen.EngineWatch(sim.url)
        runs = loadgen.run_levels(sim.url, "uns-fast", [4], 1.5, 0.0, 2, 16, 64, watch=watch)
    assert watch.died == {} and all(r["ok"] and "engine_died" not in r for r in runs)


def test_supervisor_records_a_sigkill_and_the_watch_sees_it(tmp_path):
    """The real supervisor (forked, holding the host lock) runs a simulator that SIGKILLs itself: no last words
    of its own, so the supervisor's line in the log is what names the cause."""
    workdir, port = str(tmp_path), free_port()
    argv = [sys.executable, "-m", "agent.sim", "serve", "uns-fast", "--moe-backend", "marlin", "--port", str(port)]
    argv += ["--sim-startup-s", "0.1", "--sim-crash-at-request", "1", "--sim-crash-kind", "kill"]
    env = dict(GB10_ENV, PYTHONPATH=str(REPO))
    log = tmp_path / "runs" / "cellkill" / "server.log"
    url = f"http://127.0.0.1:{port}"
    holder = controller_identity("death", "cellkill")
    try:
        supervise.start("cellkill", workdir, "process", argv, env, str(log), holder, scope="workdir", url=url)
        assert supervise.wait_ready(workdir, url, 30)["ready"]
        assert supervise.gone(workdir, "cellkill") == {}
        watch = loadgen.EngineWatch(url, gone=functools.partial(supervise.gone, workdir, "cellkill"))
        loadgen.run_levels(url, "uns-fast", [1], 2.0, 0.0, 2, 16, 4000, watch=watch)
        assert watch.died["how"] == "the server was killed by signal 9 (SIGKILL)", watch.died
        assert watch.died["exit_code"] == -9 and watch.died["window"] == "c001-r1"
        died = logparse.parse(log.read_text())["runtime_failure"]
        assert died["class"] == "killed_by_signal" and "signal 9" in died["root_cause"]
        assert supervise.stop(workdir, "cellkill")["ended"]["exit_code"] == -9  # teardown knows it too
    finally:
        supervise.stop(workdir)
    assert supervise.find_engines(workdir, scope="workdir") == []


# ---------------------------------------------------------------------------------------------- the record


CONFIG = {
    "image": "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32,
    "runtime": "process",
    "checkpoint": "uns-fast",
    "model": "uns-fast",
    "quant": "nvfp4",
    "moe_backend": "marlin",
    "linear_backend": "",
    "attention_backend": "",
    "speculative": "",
    "concurrency": [1, 2],
    "repeats": 2,
    "warmup": 1,
    "duration_s": 2.0,
}


def _window(concurrency: int, repeat: int, ok: bool = True, **extra) -> dict:
    run = loadgen.summarize_window([], 0.0, 2.0, concurrency)
    run.update(repeat=repeat, ok=ok, output_throughput=100.0 if ok else 0.0, metrics_delta={}, **extra)
    return run


def _collect(tmp_path: Path, files: dict[str, str]) -> dict:
    config = CellConfig.from_dict({**GOLDEN_CONFIG, **CONFIG})
    cell = Cell(id="c0ffee000001", sweep="death", host="spark-a", config=config, env={}, provenance=[])
    tar_path = collect.incoming_tar(tmp_path, cell.sweep, cell.host, cell.id)
    tar_path.parent.mkdir(parents=True)
    with tarfile.open(tar_path, "w") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    record = collect.finalize_cell(tmp_path, cell, {"arch": "gb10"}, time.time() - 30, time.time())
    assert record is not None
    return results.load_cell(results.cell_dir(tmp_path, cell.sweep, cell.host, cell.id))


def test_a_died_cell_is_failed_with_root_cause_time_and_its_windows_marked(tmp_path):
    at = time.time() - 10
    cell = _collect(
        tmp_path,
        {
            "server.log": CRASH_LOG,
            "serve.json": json.dumps({"ready": True, "failure": {}, "startup_s": 1.0}),
            "c001-r1.json": json.dumps(_window(1, 1)),
            "c001-r2.json": json.dumps(_window(1, 2, ok=False, engine_died=True, error="the server died")),
            serving.DIED_FILE: json.dumps(
                {"at": at, "detected_at": at + 1.25, "how": "/health unreachable", "window": "c001-r2"}
            ),
        },
    )
    assert (cell["status"], cell["verdict"], cell["failure_class"]) == ("failed", "failed", "engine_died")
    assert cell["failure_root_cause"] == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    died = cell["died"]
    assert died["at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) and died["detection_s"] == 1.25
    assert (died["window"], died["cause"]) == ("c001-r2", "cuda_error")
    assert died["windows_kept"] == ["c001-r1"] and died["windows_skipped"] == ["c002-r1", "c002-r2"]
    assert cell["verdict_reasons"] == [f"engine died at {died['at']} during c001-r2: {cell['failure_root_cause']}"]
    assert [(r["repeat"], r["before_crash"], r["engine_died"]) for r in cell["runs"]] == [
        (1, True, False),
        (2, False, True),
    ]


def test_a_cell_that_did_not_die_marks_no_window(tmp_path):
    cell = _collect(
        tmp_path,
        {
            "server.log": MARLIN + READY,
            "serve.json": json.dumps({"ready": True, "failure": {}, "startup_s": 1.0}),
            **{f"c00{c}-r{r}.json": json.dumps(_window(c, r)) for c in (1, 2) for r in (1, 2)},
        },
    )
    assert (cell["status"], cell["verdict"], cell["failure_class"]) == ("done", "valid", "")
    assert "died" not in cell and not any(r["before_crash"] or r["engine_died"] for r in cell["runs"])


@pytest.mark.parametrize("died", ['{"at": "soon"}', "[1, 2]", "not json", '{"at": 1e400}', '{"exit_code": 1e9}'])
def test_a_malformed_died_record_is_bad_host_data(tmp_path, died):
    cell = _collect(
        tmp_path,
        {
            "server.log": READY,
            "serve.json": json.dumps({"ready": True}),
            "c001-r1.json": json.dumps(_window(1, 1)),
            serving.DIED_FILE: died,
        },
    )
    assert (cell["status"], cell["failure_class"]) == ("failed", "bad_host_data")
    assert "died.json" in cell["failure_root_cause"] and cell["runs"] == []


def test_report_and_end_of_sweep_table_say_the_engine_died_never_valid(tmp_path):
    at = time.time() - 10
    _collect(
        tmp_path,
        {
            "server.log": CRASH_LOG,
            "serve.json": json.dumps({"ready": True}),
            "c001-r1.json": json.dumps(_window(1, 1)),
            serving.DIED_FILE: json.dumps(
                {"at": at, "detected_at": at + 1, "how": "gone [red]x[/]", "window": "c001-r2"}
            ),
        },
    )
    cells = correctness.judged_cells(tmp_path / "death")
    md = markdown.render_markdown(markdown.build(cells), [])
    failed = md.split("## Failed cells (never ranked)")[1]
    assert "engine died at " in failed and "during c001-r2 (cuda_error)" in failed and "illegal memory access" in failed
    assert "1 window(s) measured before the crash kept, 3 skipped" in failed
    assert "- engine died: marlin on uns-fast (at " in md.split("## What to run")[1]  # not "failed to start"
    row = next(line for line in md.splitlines() if line.startswith("| spark-a"))
    assert "FAILED" in row and "before the crash" in row and "valid" not in row
    out = io.StringIO()
    Console(file=out, width=300).print(markdown.terminal_table(cells))
    text = out.getvalue()
    assert "engine died at" in text and "during c001-r2" in text and "valid" not in text


def test_sim_crash_backend_spares_other_backends():
    with _sim("--sim-crash-after", "0.2", "--sim-crash-backend", "flashinfer_b12x") as sim:
        sim.wait_ready()
        time.sleep(1.0)
        assert sim.get("/health")[0] == 200 and sim.proc.poll() is None
    with _sim("--sim-crash-after", "0.2", "--sim-crash-backend", "marlin", "--sim-crash-kind", "oom") as sim:
        sim.wait_ready()
        assert sim.wait_exit() == 1
        assert logparse.parse(sim.log())["runtime_failure"]["class"] == "oom"


def test_sim_rejects_an_unknown_crash_kind():
    sim = _sim("--sim-crash-kind", "meteor").start()
    try:
        assert sim.wait_exit() == 2 and "choose one of cuda, oom, kill" in sim.log()
    finally:
        sim.stop()


assert os.sep not in serving.DIED_FILE  # a flat name in the run folder, like every file collect accepts
