"""How fast logparse reads a big vLLM log: MB of log per second on one core.

A long run's log is mostly periodic lines: the engine's stats line and the speculative-decoding line every
10 s, and one access line per request. This builds such a log (a real startup, then hours of serving,
with the odd warning), parses it several times and reports the best time.

    python bench/bench_logparse.py [--mb 200] [--repeats 3] [--follower] [--against REV [--cpu]]

--against REV times this tree and REV's agent/hostside (git archive, imported beside it) on the same text, in pairs
whose order alternates (ABBA), and prints the median ratio of the two throughputs: on a machine others load, MB/s
swing several times from run to run, the ratio of neighbouring runs much less. It checks both give the same facts.
--cpu times each run by the process's CPU seconds instead of wall seconds: on a machine others load, the time spent
waiting for a core is then left out.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType

from agent.hostside.logparse import Follower, parse

REPO = Path(__file__).resolve().parent.parent
STARTUP = REPO / "tests" / "data" / "logs" / "synthetic" / "v0.24-nvfp4-marlin-mtp.log"
STATS = (
    "(APIServer pid=1) INFO 11-29 {t} [loggers.py:273] Engine 000: Avg prompt throughput: 820.3 tokens/s, "
    "Avg generation throughput: 276.1 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%, "
    "Prefix cache hit rate: 0.0%"
)
SPEC = (
    "(APIServer pid=1) INFO 11-29 {t} [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.46, "
    "Accepted throughput: 150.10 tokens/s, Drafted throughput: 206.00 tokens/s, Accepted: 1501 tokens, "
    "Drafted: 2060 tokens, Per-position acceptance rate: 0.802, 0.655, Avg Draft acceptance rate: 72.9%"
)
ACCESS = '(APIServer pid=1) INFO:     127.0.0.1:{port} - "POST /v1/completions HTTP/1.1" 200 OK'
REQUEST = (
    "(APIServer pid=1) INFO 11-29 {t} [logger.py:39] Received request cmpl-{i:08x}-0: params: SamplingParams(n=1, "
    "presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.0, top_p=1.0, top_k=0, "
    "min_p=0.0, seed=None, stop=[], stop_token_ids=[], ignore_eos=True, max_tokens=256, min_tokens=0, "
    "logprobs=None, prompt_logprobs=None, skip_special_tokens=True), lora_request: None."
)
JIT = (
    "(EngineCore pid=182) WARNING 11-29 {t} [jit_monitor.py:135] Triton kernel JIT compilation during inference: "
    "_causal_conv1d_update_kernel. This causes a latency spike; consider extending warmup to cover this shape/config."
)


def build_log(megabytes: float, request_logs: bool = False, unknown_periodic: bool = False) -> str:
    parts = [STARTUP.read_text()]
    size, i = len(parts[0]), 0
    while size < megabytes * 1e6:
        t = f"{18 + i // 360 % 6:02d}:{i // 6 % 60:02d}:{i % 6 * 10:02d}"
        block = [STATS.format(t=t), SPEC.format(t=t)] + [
            ACCESS.format(port=40000 + (i * 8 + k) % 20000) for k in range(8)
        ]
        if unknown_periodic:  # a future wording no cheap check knows: every line goes through the prefilter
            block = [
                x.replace("Avg prompt throughput", "Mean prompt rate").replace("HTTP/1.1", "HTTP/2") for x in block
            ]
        if request_logs:  # `--enable-log-requests`: one line per request that no cheap check skips
            block += [REQUEST.format(t=t, i=i * 8 + k) for k in range(8)]
        if i % 500 == 0:
            block.append(JIT.format(t=t))
        chunk = "\n".join(block) + "\n"
        parts.append(chunk)
        size += len(chunk)
        i += 1
    return "".join(parts)


def best_seconds(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def follow_in_chunks(text: str, chunk: int = 1 << 16, follower_class: type = Follower) -> dict:
    follower = follower_class()
    for pos in range(0, len(text), chunk):
        follower.feed_chunk(text[pos : pos + chunk])
    follower.flush()
    return follower.facts()


def base_logparse(rev: str, folder: Path) -> ModuleType:
    """REV's hostside logparse, imported as the package `base_hostside` (hostside's imports are relative)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "agent/hostside"], capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "agent" / "hostside").rename(folder / "base_hostside")
    sys.path.insert(0, str(folder))
    return importlib.import_module("base_hostside.logparse")


def paired_ratios(this, base, pairs: int, clock=time.perf_counter) -> list[float]:
    """this tree's throughput / the base's, one pair at a time, the one timed first alternating."""
    ratios = []
    for i in range(pairs):
        first, second = (this, base) if i % 2 == 0 else (base, this)
        seconds = {}
        for fn in (first, second):
            t0 = clock()
            fn()
            seconds[fn] = clock() - t0
        ratios.append(seconds[base] / seconds[this])
    return ratios


def compare(text: str, rev: str, pairs: int, follower: bool, cpu: bool = False) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-logparse-"))
    try:
        base = base_logparse(rev, folder)
        assert base.parse(text) == parse(text), f"this tree and {rev} give different facts"
        timed = [("parse", lambda: parse(text), lambda: base.parse(text))]
        if follower:
            timed.append(
                (
                    "Follower.feed_chunk",
                    lambda: follow_in_chunks(text),
                    lambda: follow_in_chunks(text, follower_class=base.Follower),
                )
            )
        for name, this_fn, base_fn in timed:
            ratios = paired_ratios(this_fn, base_fn, pairs, time.process_time if cpu else time.perf_counter)
            print(
                f"{name}: this tree / {rev} throughput{' (CPU time)' if cpu else ''}, median of {pairs} pairs: "
                f"{statistics.median(ratios):.2f} "
                f"({', '.join(f'{r:.2f}' for r in ratios)})"
            )
    finally:
        shutil.rmtree(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200.0, help="log size in MB (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--request-logs", action="store_true", help="add a request-log line per request (vLLM's --enable-log-requests)"
    )
    ap.add_argument(
        "--unknown-periodic",
        action="store_true",
        help="periodic lines in a wording the noise skip does not know (the slow path)",
    )
    ap.add_argument("--follower", action="store_true", help="also time Follower.feed_chunk over 64 KiB chunks")
    ap.add_argument("--against", metavar="REV", help="compare with this git revision's logparse, in pairs")
    ap.add_argument("--cpu", action="store_true", help="with --against: time by CPU seconds, not wall seconds")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, as the claim says
    text = build_log(args.mb, args.request_logs, args.unknown_periodic)
    mb = len(text.encode()) / 1e6
    facts = parse(text)
    assert facts["moe_backend"] == "marlin" and len(facts["spec_acceptance_rates"]) > 1000, "the bench log parses wrong"
    if args.against:
        compare(text, args.against, 2 * args.repeats, args.follower, args.cpu)
        return
    seconds = best_seconds(lambda: parse(text), args.repeats)
    print(
        f"parse: {mb:.1f} MB ({text.count(chr(10)):,} lines) in {seconds:.3f} s = {mb / seconds:.0f} MB/s on one core"
    )
    if args.follower:
        seconds = best_seconds(lambda: follow_in_chunks(text), args.repeats)
        print(f"Follower.feed_chunk: {mb / seconds:.0f} MB/s")


if __name__ == "__main__":
    main()
