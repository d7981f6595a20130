"""Start the simulated Spark as a real process on loopback (shared by the tests/test_sim*.py files; no tests here)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class SimServer:
    """`python3 -m agent.sim serve ARGS` with its log in a temp file; stop() ends it by PID."""

    def __init__(self, *args: str, env: dict | None = None, startup_s: float = 0.1):
        self.port = free_port()
        self.args = ["serve", *args, "--host", HOST, "--port", str(self.port), "--sim-startup-s", str(startup_s)]
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SPARK_SIM_", "CUTE_", "FLASHINFER_"))
        }
        self.env.update(PYTHONPATH=str(REPO), **(env or {}))
        # Lives as long as the server; stop() closes and removes it.
        self.logfile = tempfile.NamedTemporaryFile(prefix="sim-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc: subprocess.Popen | None = None
        self._last_log = ""

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> SimServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.sim", *self.args],
            cwd=REPO,
            env=self.env,
            stdout=self.logfile,
            stderr=subprocess.STDOUT,
        )
        return self

    def wait_ready(self, timeout: float = 20.0) -> SimServer:
        """Until `Application startup complete.`; raises with the log if the process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Application startup complete." in self.log():
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"simulator exited {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        raise AssertionError(f"simulator not ready after {timeout}s:\n{self.log()}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout)

    def log(self) -> str:
        if self.logfile.closed:
            return self._last_log
        self._last_log = Path(self.logfile.name).read_text(errors="replace")
        return self._last_log

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.logfile.closed:
            self.log()
            self.logfile.close()
            os.unlink(self.logfile.name)

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- small HTTP helpers -------------------------------------------------------------------
    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def post(self, path: str, body: dict, timeout: float = 30.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


def sse_events(raw: bytes) -> list:
    """The `data:` payloads of an SSE body: dicts, and the string "[DONE]"."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events
