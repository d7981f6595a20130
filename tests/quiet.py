"""A quiet machine for the few tests that compare two timings on it (the load driver against `vllm bench serve`).

Under parallel workers every test holds a shared lock while it runs; `quiet()` closes a gate so that no worker starts
a new test, waits until the tests already running end, and runs its block alone. Without it the other workers' sshd
fleets and sweeps took CPU from one side of a comparison more than from the other (a 1.46x "difference" in one CI run).
Two locks, so that a worker waiting to start a test never starves the quiet block (flock has no writer preference).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

_held: dict[str, int] = {}  # this worker's open lock files: "gate", "busy"


def _lock_file(name: str) -> int:
    if name not in _held:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getppid()}")
        path = Path(tempfile.gettempdir()) / f"spark-agent-tests-{run}.{name}.lock"
        _held[name] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    return _held[name]


@contextlib.contextmanager
def running_test() -> Iterator[None]:
    """Held around each test (setup, call and teardown): waits while a quiet block runs elsewhere."""
    gate, busy = _lock_file("gate"), _lock_file("busy")
    fcntl.flock(gate, fcntl.LOCK_SH)
    fcntl.flock(busy, fcntl.LOCK_SH)
    fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(busy, fcntl.LOCK_UN)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Inside a test: its block runs while no other worker runs a test."""
    gate, busy = _lock_file("gate"), _lock_file("busy")
    fcntl.flock(busy, fcntl.LOCK_UN)  # first: a worker waiting here must not hold what the other quiet block needs
    fcntl.flock(gate, fcntl.LOCK_EX)
    fcntl.flock(busy, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(busy, fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
