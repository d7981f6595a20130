"""Steady state before measuring: a server that still compiles kernels is not yet the server being measured.
Standard library only (the host runs it).

Two things tell the load driver the server has settled (docs/load-shapes.md, "Warmup until steady"):
- no JIT or autotune line in the server's log during the last warmup window (`is_jit_line`, the wordings below);
- the last two warmup windows agree on output tok/s within the spec's `warmup_tolerance`.
`warmup` windows are the least, `warmup_max` the most (`settled`). A measured window whose log shows a JIT line is
flagged (`jit_lines`) and left out of every ranking (judging/stats.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# vLLM's and its kernels' words for compiling or tuning while serving (docs/vllm-notes.md):
# - 0.24's jit_monitor / 0.25+: "Triton kernel JIT compilation during inference: K. This causes a latency spike; ..."
# - torch.compile of a graph it has not compiled yet: "Compiling a graph for compile range (1, N) takes X s"
#   (older: "for shape N" / "for dynamic shape"); at startup this is expected, after readiness it is a stall
# - FlashInfer's autotuner tuning a shape: "[AutoTuner]: Autotuning process starts" (its "No tuned config covers"
#   fallback is a lasting perf cliff, not a compile: logparse counts it apart as autotuner_cliff_count)
# - DeepGEMM building its kernels: "DeepGEMM warmup: N%|..." (0.24 on Hopper; at startup it is expected)
INFERENCE_JIT = r"during inference: .{0,200}latency spike"
JIT_LINE = re.compile(
    INFERENCE_JIT + r"|Compiling a graph for (?:compile range|shape|dynamic shape)"
    r"|\[Auto[Tt]uner\]:? Autotuning process starts"
    r"|DeepGEMM warmup"
)
MAX_READ = 4 << 20  # bytes read from the log per look: a runaway log cannot stall the load driver
MAX_EVIDENCE = 300  # characters of the first JIT line kept as evidence

DEFAULT_MAX = 6  # warmup windows at most when the spec sets warmup_tolerance but not warmup_max


@dataclass(frozen=True)
class Warmup:
    """A point's warmup: at least `minimum` windows; with a tolerance, on until steady or `maximum` windows."""

    minimum: int
    maximum: int = 0  # 0: `minimum` (fixed warmup)
    tolerance: float = 0.0  # 0: fixed warmup of `minimum` windows, the behaviour before steady state

    @property
    def until_steady(self) -> bool:
        return self.tolerance > 0 and max(self.maximum, self.minimum) > 0


def is_jit_line(line: str) -> bool:
    """Does this log line say a kernel is being compiled or tuned (a latency spike, not a steady server)?"""
    return bool(JIT_LINE.search(line))


class LogWatch:
    """The JIT lines a server log gained since the last look. Starts at the log's end: startup compiles are not a
    window's. A missing or unreadable log reads as no lines (a runtime without a log file measures as before)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = self._size()
        self._tail = b""

    def _size(self) -> int:
        try:
            return os.path.getsize(self.path) if self.path else 0
        except OSError:
            return 0

    def new_jit_lines(self) -> list[str]:
        """JIT lines written since the last call (a line cut at the end waits for its rest)."""
        if not self.path:
            return []
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._offset:  # rotated or truncated: read it from its start
                    self._offset, self._tail = 0, b""
                f.seek(self._offset)
                data = f.read(MAX_READ)
        except OSError:
            return []
        self._offset += len(data)
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()[-MAX_READ:]
        text = (line.decode("utf-8", errors="replace") for line in lines)
        return [t.strip()[:MAX_EVIDENCE] for t in text if is_jit_line(t)]


def settled(throughputs: list[float], jit: list[int], rule: Warmup) -> tuple[bool, bool, str]:
    """After the warmup windows so far (their output tok/s and JIT line counts): (stop warming up, steady, why).

    Never stops before `minimum` windows, always at `maximum`. In between it stops once the last window had no JIT
    line and the last two windows agree within `tolerance` (|a - b| / max(a, b)): that is steady."""
    n, top = len(throughputs), max(rule.maximum, rule.minimum)
    if n < rule.minimum:
        return False, False, ""
    quiet = not jit or not jit[-1]
    agree = n >= 2 and _agree(throughputs[-2], throughputs[-1], rule.tolerance)
    if quiet and agree:
        return True, True, f"steady: no JIT line in the last window, the last two within {rule.tolerance:.0%}"
    if n >= top:
        why = "a JIT line in the last window" if not quiet else "the last two windows still differ"
        return True, False, f"warmup_max ({top}) reached, not steady: {why}"
    return False, False, ""


def _agree(a: float, b: float, tolerance: float) -> bool:
    top = max(a, b)
    return top > 0 and abs(a - b) / top <= tolerance
