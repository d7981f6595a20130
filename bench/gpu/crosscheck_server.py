"""On the GPU machine: serve one measured cell again, exactly as the sweep served it, and cross-check the load driver
against `vllm bench serve` on it (bench/crosscheck_vllm_bench.py --url), GPU utilisation per run.

    python3 bench/gpu/crosscheck_server.py CELL_TOML OUT_JSON [crosscheck flags...]

The server's command line and environment are the cell's own (`[launch] command` in its cell.toml, which the agent's
one serve-command builder wrote), so the cross-check measures the configuration the report ranked. The server runs
in its own session and is stopped by its PID when the cross-check ends, fails or is interrupted.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def launch_of(cell_toml: Path) -> tuple[dict[str, str], list[str]]:
    """The cell's environment assignments and argv, from its `[launch] command` (VAR=value ... argv)."""
    words = shlex.split(tomllib.loads(cell_toml.read_text())["launch"]["command"])
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"the server was not ready in {timeout_s:.0f} s")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cell_toml, out_json, flags = Path(argv[0]), argv[1], argv[2:]
    env, words = launch_of(cell_toml)
    port = words[words.index("--port") + 1]
    host = words[words.index("--host") + 1]
    model = words[words.index("serve") + 1]
    url = f"http://{host}:{port}"
    log = open(Path(out_json).with_suffix(".server.log"), "wb")  # noqa: SIM115 (open for the server's lifetime)
    proc = subprocess.Popen(
        words,
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        print(f"server pid {proc.pid}, ready in {wait_ready(url, proc, 900):.0f} s", flush=True)
        check = [sys.executable, str(ROOT / "bench" / "crosscheck_vllm_bench.py"), "--url", url, "--model", model]
        check += ["--server-pid", str(proc.pid), "--python", sys.executable, "--json", out_json, *flags]
        return subprocess.call(check, env={**os.environ, **env})
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
    sys.exit(main(sys.argv[1:]))
