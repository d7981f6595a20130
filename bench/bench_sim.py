#!/usr/bin/env python3
"""How many tokens/s one simulator process streams with the rate model off (`--sim-rate unlimited`).

Starts `python3 -m agent.sim serve uns-fast --sim-rate unlimited` pinned to one CPU core, then lean client
processes (on the other cores, so the client is not the bottleneck) keep N streams busy for D seconds. Tokens are counted
from the server's own `usage.completion_tokens` (continuous usage stats) and cross-checked against the
/metrics counter. Also reported: tokens per CPU-second of the server process (from /proc), the fair figure
on a machine whose cores are shared.

    python3 bench/bench_sim.py [--streams 16] [--seconds 10] [--max-tokens 4096] [--mtp]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
USAGE = re.compile(rb'"completion_tokens":(\d+)\}')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _request(port: int, max_tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": "uns-fast",
            "prompt": "hello",
            "max_tokens": max_tokens,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    return (
        f"POST /v1/completions HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
    ).encode()


def _stream_once(port: int, max_tokens: int, deadline: float) -> int:
    """One streamed request; returns the tokens it received (the last usage seen)."""
    sock = socket.create_connection((HOST, port))
    try:
        sock.sendall(_request(port, max_tokens))
        tokens, tail = 0, b""
        while time.monotonic() < deadline:
            data = sock.recv(1 << 18)
            if not data:
                break
            found = USAGE.findall(tail + data)
            if found:
                tokens = int(found[-1])
            tail = data[-64:]
        return tokens
    finally:
        sock.close()


def _client(port: int, streams: int, seconds: float, max_tokens: int, cpu: int | None, out) -> None:
    """`streams` concurrent streams, one thread each (recv releases the GIL; the parsing is one regex per read)."""
    import threading

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    deadline = time.monotonic() + seconds
    totals = [0] * streams

    def worker(i: int) -> None:
        while time.monotonic() < deadline:
            totals[i] += _stream_once(port, max_tokens, deadline)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(sum(totals))


def _spread(streams: int, cpus: list) -> list[tuple[int, int | None]]:
    """Streams split over the client processes: [(streams, cpu)], every process gets at least one."""
    procs = min(streams, len(cpus))
    return [(streams // procs + (1 if i < streams % procs else 0), cpus[i]) for i in range(procs)]


def _generation_tokens(port: int) -> float:
    text = urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:generation_tokens_total{")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--mtp", action="store_true", help="serve with MTP (chunks carry 1..3 tokens)")
    parser.add_argument(
        "--client-procs", type=int, default=4, help="client processes (each on its own core when there are enough)"
    )
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    server_cpu = cores[-1]
    client_cpus = cores[:-1][-args.client_procs :] or [None]
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "agent.sim",
        "serve",
        "uns-fast",
        "--moe-backend",
        "marlin",
        "--host",
        HOST,
        "--port",
        str(port),
        "--sim-rate",
        "unlimited",
        "--sim-startup-s",
        "0",
        "--sim-seed",
        "1",
    ]
    if args.mtp:
        argv += ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2,"moe_backend":"triton"}']
    server = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {server_cpu}),
    )
    try:
        for line in server.stdout:
            if "Application startup complete." in line:
                break
        else:
            print("the simulator did not start", file=sys.stderr)
            return 1
        before_tokens, before_cpu, t0 = _generation_tokens(port), _cpu_seconds(server.pid), time.monotonic()
        queue = multiprocessing.Queue()
        clients = [
            multiprocessing.Process(target=_client, args=(port, n, args.seconds, args.max_tokens, cpu, queue))
            for n, cpu in _spread(args.streams, client_cpus)
        ]
        for client in clients:
            client.start()
        received = sum(queue.get() for _ in clients)
        for client in clients:
            client.join()
        elapsed = time.monotonic() - t0
        time.sleep(0.3)  # let the server notice the closed streams before reading its counters
        served = _generation_tokens(port) - before_tokens
        cpu = _cpu_seconds(server.pid) - before_cpu
    finally:
        server.terminate()
        rest = server.communicate(timeout=10)[0]
    if server.returncode not in (0, -15):
        print(rest, file=sys.stderr)
    print(
        json.dumps(
            {
                "streams": args.streams,
                "seconds": round(elapsed, 2),
                "mtp": args.mtp,
                "server_core": server_cpu,
                "tokens_received": received,
                "tokens_served": int(served),
                "tokens_per_s": round(received / elapsed),
                "server_cpu_s": round(cpu, 2),
                "tokens_per_server_cpu_s": round(served / cpu) if cpu else None,
                "cores_visible": len(cores),
                "client_procs": len(_spread(args.streams, client_cpus)),
                "loadavg": os.getloadavg()[0],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
