"""vLLM's log layout for a chosen version: `(APIServer pid=N) INFO 11-29 18:31:07 [file.py:123] message`."""

from __future__ import annotations

import os
import sys
import time

from . import calibration

API = "APIServer"
ENGINE = "EngineCore_DP0"


class VllmLog:
    """Writes log lines the way the chosen vLLM version does, flushed line by line (the supervisor tails them)."""

    def __init__(self, version: str, stream=None):
        cal = calibration.load()["versions"]
        self.version = version
        self.prefixed = calibration.at_least(version, cal["prefix_since"])
        self.stream = stream or sys.stdout
        pid = os.getpid()
        self.pids = {API: pid, ENGINE: pid + 1}  # vLLM's engine core is a child process: its own pid

    def line(self, proc: str, level: str, where: str, message: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        prefix = f"({proc} pid={self.pids[proc]}) " if self.prefixed else ""
        self.raw(f"{prefix}{level} {stamp} [{where}] {message}")

    def info(self, proc: str, where: str, message: str) -> None:
        self.line(proc, "INFO", where, message)

    def warning(self, proc: str, where: str, message: str) -> None:
        self.line(proc, "WARNING", where, message)

    def error(self, proc: str, where: str, message: str) -> None:
        self.line(proc, "ERROR", where, message)

    def uvicorn(self, message: str) -> None:
        """uvicorn's own lines: `INFO:     Application startup complete.` (prefixed per process when vLLM does)."""
        prefix = f"({API} pid={self.pids[API]}) " if self.prefixed else ""
        self.raw(f"{prefix}INFO:     {message}")

    def raw(self, text: str) -> None:
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (BrokenPipeError, ValueError):  # the supervisor went away: keep serving
            pass
