"""`serve MODEL [flags]`: start like vLLM (log, failures), then serve HTTP until stopped or a fault ends it."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys

from . import cluster, gpu, jit
from . import options as options_mod
from .engine import Engine
from .options import Options, UsageError
from .plan import Plan, make_plan
from .ratemodel import RateModel, start_factor, start_noise
from .server import Server
from .startup import Startup
from .vlog import API, ENGINE, VllmLog

USAGE = "usage: vllm serve [model_tag] [options]"
HELP = """Simulated vLLM on a DGX Spark (GB10). Same command line as `vllm serve`, plus:
  --sim-vllm-version V   vLLM version to behave like (0.12 .. 0.33, default 0.24.0)   [SPARK_SIM_VLLM_VERSION]
  --sim-hardware H       gb10 (default) or b200                                      [SPARK_SIM_HARDWARE]
  --sim-seed N           seed of all noise (default: random)                         [SPARK_SIM_SEED]
  --sim-rate R           calibrated (default) or unlimited                           [SPARK_SIM_RATE]
  --sim-startup-s S      simulated startup time (default 1 s)                        [SPARK_SIM_STARTUP_S]
  --sim-log-interval S   periodic throughput log interval (default 10 s)            [SPARK_SIM_LOG_INTERVAL]
  --sim-start-noise F    each server start's own speed, 1 +- F (default: calibration) [SPARK_SIM_START_NOISE]
Faults: --sim-crash-after S, --sim-crash-at-request N (--sim-crash-kind cuda|oom|kill, --sim-crash-backend B),
        --sim-slow-start S, --sim-health-hang 1, --sim-oom 1, --sim-drop-streams FRACTION,
        --sim-silent-fallback BACKEND, --sim-jit-s S (JIT lines and slower steps for the first S s of serving), --sim-throttle-after S (thermal throttling after S s busy)   (and SPARK_SIM_CRASH_AFTER, ... likewise). See agent/sim/README.md."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] != "serve":
        print(HELP if argv and argv[0] in ("-h", "--help") else USAGE, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if "-h" in argv or "--help" in argv:
        print(HELP)
        return 0
    env = dict(os.environ)
    try:
        opts = options_mod.parse(argv[1:], env)
    except UsageError as exc:
        print(f"{USAGE}\nvllm serve: error: {exc}", file=sys.stderr)
        return 2
    log = VllmLog(opts.sim["vllm_version"])
    plan = make_plan(opts, env)
    ranks = None
    if cluster.wanted(opts.given):  # multi-node: the ranks live on a real Ray cluster
        ranks = cluster.join(opts.given, log, env)
        if ranks is None:
            return 1
    if not Startup(log, opts, plan, env).run():
        return 1
    try:
        return asyncio.run(serve(opts, plan, log, ranks))
    except KeyboardInterrupt:
        return 0


def prefix_caching(opts: Options) -> bool:
    """vLLM (V1) caches prefixes unless told --no-enable-prefix-caching (or --enable-prefix-caching false)."""
    if opts.given.get("no_enable_prefix_caching"):
        return False
    return str(opts.given.get("enable_prefix_caching", True)).lower() not in ("false", "0")


async def serve(opts: Options, plan: Plan, log: VllmLog, ranks: cluster.Cluster | None = None) -> int:
    loop = asyncio.get_running_loop()
    seed = opts.sim["seed"] if opts.sim["seed"] is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    # a slower or faster machine (--sim-speed) is a clock running at that fraction: tokens and prefill alike
    clock = float(opts.sim.get("time_scale") or 1.0) * float(opts.sim.get("speed") or 1.0)
    rate = RateModel(plan, opts.sim["rate"] == "unlimited", rng, clock)
    start = os.environ.get("SPARK_AGENT_CELL", "")  # supervise.CELL_ENV: each start of a config is its own cell
    rate.start_mult = start_factor(start_noise(opts.sim, rate.hw), seed, start)
    if ranks is not None:
        rate.compute_scale, rate.comm_s = ranks.step_cost()
    engine = Engine(rate, opts.max_num_seqs, plan.kv_tokens, rng, opts.sim["drop_streams"], prefix_caching(opts))
    front = Server(opts, plan, log, engine, os.environ.get("VLLM_SERVER_DEV_MODE", "") in ("1", "true", "True"))
    server = await asyncio.start_server(front.handle, opts.host, opts.port, limit=2**20, backlog=512)
    stopped = loop.create_future()

    def stop() -> None:
        if not stopped.done():
            stopped.set_result(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    log.info(API, "api_server.py:1971", f"Starting vLLM API server 0 on http://{opts.host}:{opts.port}")
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")
    tasks = [
        asyncio.ensure_future(engine.run()),
        asyncio.ensure_future(periodic_log(engine, log, opts.sim["log_interval"])),
        asyncio.ensure_future(gpu.publish(engine, gpu.state_path(opts.host, opts.port), opts.sim["throttle_after"])),
    ]
    if opts.sim["jit_s"]:
        tasks.append(asyncio.ensure_future(jit.compile_while_serving(engine, log, opts.sim["jit_s"], clock)))
    tasks[0].add_done_callback(lambda task: _engine_ended(task, engine, log, stopped))
    _arm_crash_faults(opts, plan, engine, log, stopped, tasks)
    if ranks is not None:
        tasks.append(asyncio.ensure_future(rank_lost(ranks, engine, log, stopped)))
    code = await stopped
    if code == 0:
        log.uvicorn("Shutting down")
    server.close()
    for task in tasks:
        task.cancel()
    return code


def _engine_ended(task: asyncio.Task, engine: Engine, log: VllmLog, stopped: asyncio.Future) -> None:
    """A bug in the simulator's engine ends the process the way a dead vLLM engine would: loudly, exit 1."""
    if task.cancelled() or task.exception() is None:
        return
    import traceback

    log.error(ENGINE, "core.py:1037", "EngineCore encountered a fatal error.")
    traceback.print_exception(task.exception())
    engine.kill()
    if not stopped.done():
        stopped.set_result(1)


def _arm_crash_faults(
    opts: Options, plan: Plan, engine: Engine, log: VllmLog, stopped: asyncio.Future, tasks: list
) -> None:
    """Arm the crash faults (--sim-crash-after S, --sim-crash-at-request N), unless --sim-crash-backend names a
    MoE backend other than the one that loaded: a kernel that faults under load is a property of the backend."""
    sim = opts.sim
    if sim["crash_backend"] and sim["crash_backend"].lower() != plan.moe_loaded:
        return
    if sim["crash_after"] is not None:
        tasks.append(asyncio.ensure_future(crash(sim["crash_after"], sim["crash_kind"], engine, log, stopped)))
    if sim["crash_at_request"]:

        def on_submit(count: int) -> None:
            if count == sim["crash_at_request"]:  # 0.5 s later it is mid-stream
                tasks.append(
                    asyncio.ensure_future(crash(CRASH_INTO_REQUEST_S, sim["crash_kind"], engine, log, stopped))
                )

        engine.on_submit = on_submit


CRASH_INTO_REQUEST_S = 0.5
# The last words of a dying engine core, per kind (vLLM's own traceback shape); "kill" dies without any.
CRASH_LAST_WORDS = {
    "cuda": "torch.AcceleratorError: CUDA error: unspecified launch failure\n",
    "oom": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "119.70 GiB of which 1.12 GiB is free.\n"
    ),
}


async def crash(delay: float, kind: str, engine: Engine, log: VllmLog, stopped: asyncio.Future) -> None:
    """Fault: the engine core dies; streams break, /health answers 503 for a moment, the process exits 1.
    kind "kill": the process is SIGKILLed on the spot (a kill -9 or the kernel's OOM killer), no log line."""
    await asyncio.sleep(delay)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    log.error(ENGINE, "core.py:1037", "EngineCore encountered a fatal error.")
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1028, in run_engine_core\n'
        "    engine_core.run_busy_loop()\n" + CRASH_LAST_WORDS[kind]
    )
    sys.stderr.flush()
    engine.kill()
    log.error(API, "async_llm.py:525", "AsyncLLM output_handler failed.")
    sys.stderr.write(
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
    )
    sys.stderr.flush()
    await asyncio.sleep(0.5)
    if not stopped.done():
        stopped.set_result(1)


async def rank_lost(ranks: cluster.Cluster, engine: Engine, log: VllmLog, stopped: asyncio.Future) -> None:
    """A rank's actor died (its node was lost): the engine core dies as vLLM's does over Ray, and the server exits 1."""
    while not ranks.dead.is_set():
        await asyncio.sleep(0.2)
    log.error(ENGINE, "core.py:1037", "EngineCore encountered a fatal error.")
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_distributed_executor.py", line 377, '
        "in execute_model\n" + ranks.last_words + "\n"
    )
    sys.stderr.flush()
    engine.kill()
    log.error(API, "async_llm.py:525", "AsyncLLM output_handler failed.")
    sys.stderr.write(
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
    )
    sys.stderr.flush()
    await asyncio.sleep(0.5)
    if not stopped.done():
        stopped.set_result(1)


async def periodic_log(engine: Engine, log: VllmLog, interval: float) -> None:
    """vLLM's 'Engine 000: Avg prompt throughput ...' line (and SpecDecoding metrics) while there is work."""
    c = engine.counters
    last = (c.prompt_tokens, c.generation_tokens, c.drafts, c.draft_tokens, c.accepted_tokens)
    while True:
        await asyncio.sleep(interval)
        now = (c.prompt_tokens, c.generation_tokens, c.drafts, c.draft_tokens, c.accepted_tokens)
        delta = [a - b for a, b in zip(now, last, strict=True)]
        last = now
        if not any(delta[:2]) and not engine.running and not engine.waiting:
            continue
        log.info(
            API,
            "loggers.py:236",
            (
                f"Engine 000: Avg prompt throughput: {delta[0] / interval:.1f} tokens/s, Avg generation throughput: "
                f"{delta[1] / interval:.1f} tokens/s, Running: {len(engine.running)} reqs, Waiting: {len(engine.waiting)} reqs, "
                f"GPU KV cache usage: {engine.kv_usage() * 100:.1f}%, Prefix cache hit rate: 0.0%"
            ),
        )
        if engine.rate.spec_tokens and delta[2]:
            drafts, draft_tokens, accepted = delta[2:]
            log.info(
                API,
                "metrics.py:100",
                (
                    f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, Accepted throughput: "
                    f"{accepted / interval:.2f} tokens/s, Drafted throughput: {draft_tokens / interval:.2f} tokens/s, "
                    f"Accepted: {accepted} tokens, Drafted: {draft_tokens} tokens, Avg Draft acceptance rate: "
                    f"{100 * accepted / draft_tokens:.1f}%"
                ),
            )
