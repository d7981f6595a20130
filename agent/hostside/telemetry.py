"""What the machine was doing during a window: GPU power, clocks, temperature and throttle reasons from
`nvidia-smi`, host memory and CPU load from /proc, and the server's gauges from /metrics. Standard library only.

One `nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms N` process runs for the whole bench (one fork,
not one per sample: that is what keeps the sampler under 1% of a core). A reader thread parses its lines; a
second thread polls /metrics gauges. `Sampler.mark()` before a window and `Sampler.attach(result, mark, ...)`
after it add the window's `telemetry` and `server` summaries (contracts.WindowTelemetry / ServerView).

GB10 (unified memory) reads "[N/A]" for memory.used / memory.total and "N/A" for the power limit (public reports:
docs/telemetry.md). Such a field is recorded as unsupported, never as 0. A host without `nvidia-smi` records
"no GPU telemetry" and the window is still measured.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import metrics
from .contracts import ServerView, WindowTelemetry

# The query, in order. clocks_event_reasons.active is the bitmask of NVML's clocks-event (throttle) reasons;
# drivers before r535 only know its old name, tried second.
FIELDS = (
    "index",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
    "clocks.mem",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "clocks_event_reasons.active",
)
LEGACY_REASONS = "clocks_throttle_reasons.active"

# NVML clocks-event reason bits (nvml.h nvmlClocksEventReason*). GPU idle, application clocks, sync boost and
# display clock are not throttling.
REASON_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
THROTTLE_MASK = sum(REASON_BITS)
UNITS = ("W", "%", "MHz", "MiB", "C")
UNSUPPORTED = ("n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "[unknown error]", "")

MAX_SAMPLES = 200_000  # ~55 h at 1 Hz: older samples are dropped first
TIMELINE_POINTS = 240  # per window, for the report's plots
DEFAULT_THROTTLE_SHARE = 5.0  # percent of a window's time; the spec's [telemetry] throttle_threshold
# Cut requests: tokens the server generated that the client never received (or the other way round) at each
# window edge, per request in flight. Beyond concurrency * this (+2%), the counts disagree.
CUT_TOKENS_PER_REQUEST = 32

GAUGES = (metrics.KV_CACHE_USAGE, metrics.REQUESTS_RUNNING, metrics.REQUESTS_WAITING)


def parse_value(text: str) -> float | None:
    """One CSV cell (nounits) -> float, None when nvidia-smi cannot read it (N/A, Not Supported...)."""
    text = text.strip()
    if text.lower() in UNSUPPORTED:
        return None
    number, _, unit = text.partition(" ")
    if unit in UNITS:  # the form without `nounits`: "11.17 W"
        text = number
    try:
        return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
    except ValueError:
        return None


def parse_line(line: str, fields: Sequence[str] = FIELDS) -> dict[str, float | None] | None:
    """One `csv,noheader,nounits` line -> {field: value or None}; None for a line that is not a row."""
    cells = line.strip().split(",")
    if len(cells) != len(fields):
        return None
    row = {name: parse_value(cell) for name, cell in zip(fields, cells, strict=True)}
    return row if row["index"] is not None else None


def reasons(mask: float | None) -> list[str]:
    """The throttling reasons named by a clocks-event bitmask."""
    if mask is None:
        return []
    bits = int(mask)
    return [name for bit, name in REASON_BITS.items() if bits & bit]


def read_meminfo(path: str = "/proc/meminfo") -> float | None:
    """Used host memory, GiB (MemTotal - MemAvailable); on GB10 this is the GPU's memory too."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            values = {}
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    values[key] = float(rest.split()[0])
        return (values["MemTotal"] - values["MemAvailable"]) / (1024 * 1024)
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _process_cpu_s(pid: int) -> float:
    """utime + stime of a live process, seconds (0.0 when /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def read_loadavg(path: str = "/proc/loadavg") -> float | None:
    try:
        with open(path, encoding="ascii") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Sample:
    """One reading of every GPU (summed power, hottest temperature, lowest clocks, OR of reasons) and the host."""

    __slots__ = ("host_mem", "load", "mask", "mem", "power", "sm", "t", "temp", "unsupported", "util")

    def __init__(self, t: float, rows: list[dict[str, float | None]], host_mem: float | None, load: float | None):
        self.t = t

        def pick(name: str, how: Callable[[list[float]], float]) -> float | None:
            vals = [v for r in rows if (v := r.get(name)) is not None]
            return how(vals) if vals else None

        self.power = pick("power.draw", sum)
        self.temp = pick("temperature.gpu", max)
        self.sm = pick("clocks.sm", min)
        self.mem = pick("clocks.mem", min)
        self.util = pick("utilization.gpu", max)
        masks = [int(v) for r in rows if (v := r.get("reasons")) is not None]
        self.mask = None if not masks else float(_or(masks))
        self.host_mem = host_mem
        self.load = load
        self.unsupported = {k for r in rows for k, v in r.items() if v is None}


def _or(values: list[int]) -> int:
    out = 0
    for v in values:
        out |= v
    return out


# vLLM's own gauges (running, waiting, KV usage) every 0.5 s, as AIPerf samples them (every 333 ms): a saturated
# or KV-full moment shorter than a second still shows.
GAUGE_PERIOD_S = 0.5


class Sampler:
    """Samples for as long as it runs (a context manager). Thread-safe reads; never raises on a missing GPU."""

    def __init__(
        self,
        interval_s: float = 1.0,
        command: Sequence[str] = ("nvidia-smi",),
        metrics_url: str = "",
        throttle_share: float = DEFAULT_THROTTLE_SHARE,
        raw_path: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"telemetry interval must be > 0 s, got {interval_s}")
        if not 0.0 <= throttle_share <= 100.0:
            raise ValueError(f"throttle threshold must be 0..100 %, got {throttle_share}")
        self.interval_s = interval_s
        self.command = list(command)
        self.metrics_url = metrics_url
        self.throttle_share = throttle_share
        self.raw_path = raw_path
        self.clock = clock
        self.note = ""  # why there is no GPU telemetry ("" while there is)
        self.fields: tuple[str, ...] = FIELDS  # as parsed: the last one (the reasons bitmask) is "reasons"
        self.query: tuple[str, ...] = FIELDS  # as asked of nvidia-smi
        self.samples: list[Sample] = []
        self.gauges: list[tuple[float, dict[str, float]]] = []
        self.cpu_s = 0.0  # CPU time of our threads, seconds (known after stop)
        self.child_cpu_s = 0.0  # CPU time of the nvidia-smi process, seconds (known after stop)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []
        self._warmup: WindowTelemetry | None = None
        self._cooled: tuple[float, str] | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._proc = self._spawn()
        if self._proc is not None:
            self._threads.append(threading.Thread(target=self._read_gpu, name="telemetry-gpu", daemon=True))
        if self.metrics_url:
            self._threads.append(threading.Thread(target=self._poll_gauges, name="telemetry-gauges", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._proc is not None:
            self.child_cpu_s = _process_cpu_s(self._proc.pid)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for thread in self._threads:
            thread.join(timeout=10)

    def _spawn(self) -> subprocess.Popen[str] | None:
        """Start the looping query; fall back to the pre-r535 reasons field; None (and a note) when it cannot run."""
        for fields in (FIELDS, (*FIELDS[:-1], LEGACY_REASONS)):
            argv = [*self.command, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
            try:
                probe = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            except FileNotFoundError:
                self.note = f"no GPU telemetry: {self.command[0]} not found"
                return None
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.note = f"no GPU telemetry: {self.command[0]} did not answer ({exc})"
                return None
            if probe.returncode == 0:
                self.fields, self.query = (*fields[:-1], "reasons"), fields
                interval_ms = max(1, round(self.interval_s * 1000))
                return subprocess.Popen(
                    [*argv, f"-lms={interval_ms}"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    bufsize=1,
                    preexec_fn=_die_with_parent,  # a killed bench leaves no looping nvidia-smi behind
                )
        first = (probe.stdout + probe.stderr).strip().splitlines()[:1]
        self.note = f"no GPU telemetry: nvidia-smi --query-gpu failed (exit {probe.returncode}): {' '.join(first)}"
        return None

    def _read_gpu(self) -> None:
        """One sample per group of GPU rows. The group size is learnt when the first GPU's index comes round
        again; from then on a group is emitted as soon as it is complete (a Spark: every row at once)."""
        assert self._proc is not None and self._proc.stdout is not None
        raw = open(self.raw_path, "w", encoding="utf-8") if self.raw_path else None  # noqa: SIM115 (closed below)
        if raw:
            raw.write(", ".join(self.query) + "\n")
        rows: list[dict[str, float | None]] = []
        first_index: float | None = None
        group = 0  # GPUs per reading, 0 until known
        try:
            for line in self._proc.stdout:
                if raw:
                    raw.write(line)
                row = parse_line(line[:4096], self.fields)
                if row is None:
                    continue
                if first_index is None:
                    first_index = row["index"]
                elif row["index"] == first_index and rows and not group:
                    group = len(rows)
                    self._add(rows)
                    rows = []
                rows.append(row)
                if group and len(rows) >= group:
                    self._add(rows)
                    rows = []
        finally:
            if rows:
                self._add(rows)
            if raw:
                raw.close()
            with self._lock:
                self.cpu_s += time.thread_time()

    def _add(self, rows: list[dict[str, float | None]]) -> None:
        sample = Sample(self.clock(), rows, read_meminfo(), read_loadavg())
        with self._lock:
            self.samples.append(sample)
            if len(self.samples) > MAX_SAMPLES:
                del self.samples[: MAX_SAMPLES // 10]

    def _poll_gauges(self) -> None:
        period = GAUGE_PERIOD_S
        while not self._stop.wait(period):
            try:
                scraped = metrics.scrape(self.metrics_url, timeout=min(5.0, period * 4))
            except (OSError, ValueError):
                continue
            self.add_gauges(scraped)
        with self._lock:
            self.cpu_s += time.thread_time()

    def add_gauges(self, scraped: dict[str, float]) -> None:
        """Keep one /metrics reading's gauges (the window's start and end scrapes count too)."""
        reading = {name: scraped[name] for name in (*GAUGES, metrics.KV_CACHE_USAGE_OLD) if name in scraped}
        with self._lock:
            self.gauges.append((self.clock(), reading))
            if len(self.gauges) > MAX_SAMPLES:
                del self.gauges[: MAX_SAMPLES // 10]

    # ------------------------------------------------------------ per window

    def cool_down(
        self, pause_s: float, to_c: float, timeout_s: float, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        """Before a cell's first window: idle `pause_s`, then (to_c > 0) wait until the GPU reads at most to_c,
        giving up after timeout_s. What happened is recorded on the next window's telemetry."""
        started = self.clock()
        if pause_s > 0:
            sleep(pause_s)
        note = f"paused {pause_s:g} s" if pause_s > 0 else ""
        if to_c > 0:
            if self.note:
                note = f"{note}; cannot wait for {to_c:g} C: {self.note}".lstrip("; ")
            else:
                deadline = self.clock() + timeout_s
                temp = self.latest_temp()
                while (temp is None or temp > to_c) and self.clock() < deadline:
                    sleep(min(self.interval_s, 1.0))
                    temp = self.latest_temp()
                reached = temp is not None and temp <= to_c
                shown = "no reading" if temp is None else f"{temp:g} C"
                how = f"reached {to_c:g} C" if reached else f"gave up after {timeout_s:g} s at {shown} (> {to_c:g} C)"
                note = f"{note}; {how}".lstrip("; ")
        self._cooled = (self.clock() - started, note)

    def latest_temp(self) -> float | None:
        with self._lock:
            return next((s.temp for s in reversed(self.samples) if s.temp is not None), None)

    def mark(self) -> float:
        return self.clock()

    def warmup_done(self, mark: float) -> None:
        """The warmup's telemetry, kept apart: the level's first measured window carries it."""
        self._warmup = self.summary(mark, self.clock(), -1)

    def attach(self, result: Any, mark: float, before: object, after: object, end: float | None = None) -> None:
        """Add `telemetry` (and `warmup_telemetry`, once per level) and `server` to a window's result dict.
        `end`: when the load stopped (mark()); without it, now. The idle settle pause after a window is no part
        of it: it would dilute the window's utilisation and power."""
        end = self.clock() if end is None else end
        result["telemetry"] = self.summary(mark, end, int(result.get("total_output_tokens", 0)))
        if self._warmup is not None:
            result["warmup_telemetry"], self._warmup = self._warmup, None
        if self._cooled is not None:
            result["telemetry"]["cooldown_s"], result["telemetry"]["cooldown_note"] = self._cooled
            self._cooled = None
        if isinstance(before, dict):
            self.add_gauges(before)
        if isinstance(after, dict):
            self.add_gauges(after)
        result["server"] = server_view(
            before if isinstance(before, dict) else None,
            after if isinstance(after, dict) else None,
            self.gauges_between(mark, end + 60.0),  # the end scrape comes after the settle pause
            client_tokens=int(result.get("total_output_tokens", 0)),
            concurrency=int(result.get("concurrency", 1)),
        )

    def gauges_between(self, t0: float, t1: float) -> list[dict[str, float]]:
        with self._lock:
            return [g for t, g in self.gauges if t0 <= t <= t1]

    def summary(self, t0: float, t1: float, output_tokens: int) -> WindowTelemetry:
        with self._lock:
            window = [s for s in self.samples if t0 <= s.t <= t1]
        return summarize(window, t0, t1, output_tokens, self.interval_s, self.throttle_share, self.note)


# ---------------------------------------------------------------- summaries (pure)


def _p50(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _stats(values: list[float | None]) -> tuple[float, float, float]:
    """(mean, p50, max), -1.0 each when nothing was read."""
    known = [v for v in values if v is not None]
    if not known:
        return -1.0, -1.0, -1.0
    return sum(known) / len(known), _p50(known), max(known)


def _range(values: list[float | None]) -> tuple[float, float]:
    known = [v for v in values if v is not None]
    return (min(known), max(known)) if known else (-1.0, -1.0)


def empty_telemetry(note: str, interval_s: float, throttle_share: float) -> WindowTelemetry:
    return summarize([], 0.0, 0.0, -1, interval_s, throttle_share, note)


def summarize(
    samples: Sequence[Sample],
    t0: float,
    t1: float,
    output_tokens: int,
    interval_s: float,
    throttle_share: float,
    note: str = "",
) -> WindowTelemetry:
    """One window's telemetry. Each sample stands for the time until the next one (the last: one interval);
    energy is the time-weighted mean power over the whole window. -1.0 where nothing was read."""
    duration = max(t1 - t0, 0.0)
    spans = [max(b.t - a.t, 0.0) for a, b in itertools.pairwise(samples)]
    if samples:
        spans.append(min(interval_s, max(t1 - samples[-1].t, 0.0)))
    powered = [(s.power, dt) for s, dt in zip(samples, spans, strict=True) if s.power is not None]
    weight = sum(dt for _, dt in powered)
    mean_power = sum(p * dt for p, dt in powered) / weight if weight > 0 else -1.0
    if weight <= 0 and powered:
        mean_power = sum(p for p, _ in powered) / len(powered)
    energy = mean_power * duration if mean_power >= 0 else -1.0
    throttle_s = 0.0
    seen: list[str] = []
    for s, dt in zip(samples, spans, strict=True):
        if s.mask is not None and int(s.mask) & THROTTLE_MASK:
            throttle_s += dt
            seen.extend(r for r in reasons(s.mask) if r not in seen)
    share = 100.0 * throttle_s / duration if duration > 0 else 0.0
    power = _stats([s.power for s in samples])
    temp = _stats([s.temp for s in samples])
    sm, mem = _range([s.sm for s in samples]), _range([s.mem for s in samples])
    util = _stats([s.util for s in samples])
    host_mem = _stats([s.host_mem for s in samples])
    load = _stats([s.load for s in samples])
    unsupported = sorted({k for s in samples for k in s.unsupported})
    tokens_known = output_tokens > 0 and energy > 0
    if not samples and not note:
        note = "no GPU telemetry: no samples in this window"
    return WindowTelemetry(
        available=bool(samples),
        note=note,
        samples=len(samples),
        interval_s=float(interval_s),
        duration_s=float(duration),
        energy_j=float(energy),
        joules_per_output_token=energy / output_tokens if tokens_known else -1.0,
        tokens_per_watt=output_tokens / energy if tokens_known else -1.0,
        power_mean_w=float(mean_power),
        power_p50_w=power[1],
        power_max_w=power[2],
        temp_mean_c=temp[0],
        temp_p50_c=temp[1],
        temp_max_c=temp[2],
        sm_clock_min_mhz=sm[0],
        sm_clock_max_mhz=sm[1],
        mem_clock_min_mhz=mem[0],
        mem_clock_max_mhz=mem[1],
        util_mean_pct=util[0],
        host_mem_used_max_gib=host_mem[2],
        load1_max=load[2],
        throttle_s=float(throttle_s),
        throttle_share_pct=float(share),
        throttle_reasons=seen,
        throttle_threshold_pct=float(throttle_share),
        throttled=share > throttle_share,
        unsupported=unsupported,
        timeline=timeline(samples, t0),
        cooldown_s=0.0,
        cooldown_note="",
    )


def timeline(samples: Sequence[Sample], t0: float) -> dict[str, list[float]]:
    """At most TIMELINE_POINTS evenly picked samples: seconds into the window, power (W), temperature (C)."""
    step = max(1, -(-len(samples) // TIMELINE_POINTS))
    picked = samples[::step]
    return {
        "t_s": [round(s.t - t0, 3) for s in picked],
        "power_w": [-1.0 if s.power is None else s.power for s in picked],
        "temp_c": [-1.0 if s.temp is None else s.temp for s in picked],
        "throttled": [1.0 if s.mask is not None and int(s.mask) & THROTTLE_MASK else 0.0 for s in picked],
    }


def server_view(
    before: dict[str, float] | None,
    after: dict[str, float] | None,
    gauges: Sequence[dict[str, float]],
    client_tokens: int,
    concurrency: int,
) -> ServerView:
    """The server's own counters over the window (vLLM's names), its gauges during it, and the cross-check of
    generated tokens against the client's count."""
    scraped = before is not None and after is not None
    deltas = metrics.server_deltas(before or {}, after or {}) if scraped else {}
    drafts = deltas.get(metrics.SPEC_DRAFTS, 0.0)
    per_position = [
        round(v / drafts, 6) if drafts > 0 else 0.0 for v in metrics.per_position(before or {}, after or {})
    ]
    kv = [g.get(metrics.KV_CACHE_USAGE, g.get(metrics.KV_CACHE_USAGE_OLD)) for g in gauges]
    gauge_stats = {}
    for name, values in (
        (metrics.KV_CACHE_USAGE, kv),
        (metrics.REQUESTS_RUNNING, [g.get(metrics.REQUESTS_RUNNING) for g in gauges]),
        (metrics.REQUESTS_WAITING, [g.get(metrics.REQUESTS_WAITING) for g in gauges]),
    ):
        mean, _, peak = _stats(values)
        gauge_stats[name] = {"mean": mean, "max": peak}
    server_tokens = deltas.get(metrics.GENERATION_TOKENS, -1.0) if scraped else -1.0
    bound = concurrency * CUT_TOKENS_PER_REQUEST + 0.02 * client_tokens
    disagree = scraped and abs(server_tokens - client_tokens) > bound
    return ServerView(
        scraped=scraped,
        deltas=deltas,
        gauges=gauge_stats,
        gauge_samples=len(gauges),
        accepted_per_position=per_position,
        server_generation_tokens=float(server_tokens),
        client_output_tokens=int(client_tokens),
        token_bound=float(bound),
        tokens_disagree=bool(disagree),
    )
