"""On the GPU machine: does a closed loop at high concurrency count whole waves, and do staggered clients fix it?
Serves one measured cell again (its recorded command line, as crosscheck_server.py does), then runs the load driver
at one level with its clients started together and staggered (loadgen --stagger), alternating, and prints every
window's tok/s and completed requests with the spread of each mode. The server is stopped by its PID at the end.

    python3 bench/gpu/waves.py CELL_TOML OUT_JSON [--level 32] [--windows 6] [--window 8] [--rounds 2]
    python3 bench/gpu/waves.py --url http://127.0.0.1:8000 --model M OUT_JSON ...   (a server already running)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from crosscheck_server import launch_of, wait_ready  # noqa: E402

from agent.hostside import loadgen  # noqa: E402


def windows(url: str, model: str, n: int, stagger: bool, seed: int, a: argparse.Namespace) -> list:
    """One run of the level: its warmup, then n windows. Each run its own seed: repeated prompts would hit the
    prefix cache (the 2026-12-07 attempt reused seed 0 and saw 18-77 % hit rates and faster later rounds)."""
    shape = loadgen.make_shape(prompt_len=a.prompt_len, output_len=a.output_len, stagger=stagger)
    runs = loadgen.run_levels(url, model, [a.level], a.window, a.warmup, n, prompt_len=a.prompt_len,
                              output_len=a.output_len, seed=seed, shape=shape)  # fmt: skip
    return [
        {"tok_s": r["output_throughput"], "completed": r["completed"], "e2el_ms": r["median_e2el_ms"]} for r in runs
    ]


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if values else 0.0


def measure(url: str, model: str, a: argparse.Namespace) -> dict:
    out: dict = {"level": a.level, "window_s": a.window, "rounds": []}
    if a.settle_s > 0:  # one long run first: first-use kernel builds (DeepGEMM's, with its warmup skipped) land here
        windows(url, model, max(1, int(a.settle_s // a.window)), True, a.seed + 999, a)
    for r in range(a.rounds):
        for stagger in (False, True):
            got = windows(url, model, a.windows, stagger, a.seed + 2 * r + stagger, a)
            mode = "staggered" if stagger else "together"
            out["rounds"].append({"round": r + 1, "mode": mode, "windows": got})
            tok = [w["tok_s"] for w in got]
            print(f"round {r + 1} {mode:9s} spread {spread(tok):6.1%}  " + " ".join(
                f"{w['tok_s']:.0f}/{w['completed']}" for w in got), flush=True)  # fmt: skip
    for mode in ("together", "staggered"):
        tok = [w["tok_s"] for rnd in out["rounds"] if rnd["mode"] == mode for w in rnd["windows"]]
        out[mode] = {"spread": spread(tok), "median": statistics.median(tok)}
        print(f"{mode}: median {statistics.median(tok):.0f} tok/s, spread {spread(tok):.1%} over {len(tok)} windows")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cell_or_out", nargs="+", help="CELL_TOML OUT_JSON, or OUT_JSON with --url and --model")
    p.add_argument("--url", default="")
    p.add_argument("--model", default="")
    p.add_argument("--level", type=int, default=32)
    p.add_argument("--windows", type=int, default=6)
    p.add_argument("--window", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--settle-s", type=float, default=60.0, help="staggered load before the first round, seconds")
    a = p.parse_args()
    if a.url:
        result = measure(a.url, a.model, a)
        Path(a.cell_or_out[-1]).write_text(json.dumps(result, indent=1))
        return 0
    cell_toml, out_json = Path(a.cell_or_out[0]), Path(a.cell_or_out[1])
    env, words = launch_of(cell_toml)
    url = f"http://{words[words.index('--host') + 1]}:{words[words.index('--port') + 1]}"
    model = words[words.index("serve") + 1]
    log = open(out_json.with_suffix(".server.log"), "wb")  # noqa: SIM115 (open for the server's lifetime)
    proc = subprocess.Popen(words, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        print(f"server pid {proc.pid}, ready in {wait_ready(url, proc, 900):.0f} s", flush=True)
        out_json.write_text(json.dumps(measure(url, model, a), indent=1))
        return 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
