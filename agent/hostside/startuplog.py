"""Where a vLLM server's start went, from its log: weights, torch.compile (cold or from the cache), CUDA graph
capture, KV cache setup, ready. Stdlib only; linear in the log, bounded per line, no backtracking regex.

The forms are those of public vLLM logs 0.7-0.3x (docs/vllm-notes.md, fixtures in tests/data/startup/):
  Loading weights took 26.93 seconds
  Model loading took 7.64 GiB and 32.969258 seconds          (older: ... GiB memory and ... seconds)
  Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 1.803 s
      (older: "for shape 1", "for shape None", "for dynamic shape")
  Directly load AOT compilation from path ...                  (newer builds: also a cache hit)
  Compiling a graph for compile range (1, 8192) takes 41.20 s  (older: "for general shape", "for dynamic shape")
  torch.compile takes 6.97 s in total | torch.compile took 9.61 s in total
      | torch.compile and initial profiling run took 12.1 s in total
  Graph capturing finished in 14 secs, took 0.52 GiB
  init engine (profile, create kv cache, warmup model) took 61.30 seconds
      (0.24: "took 229.81 s (compilation: 23.43 s)")
  DeepGEMM warmup: 100%|##########| 645/645 [02:30<00:00,  4.30it/s]     (0.24 on Hopper: kernels JIT-built at
      start, the bulk of a cold start: tests/data/logs/vllm-0.24-h200/h200-fp8-triton.log)
  Application startup complete.
      (with --uvicorn-log-level warning or above uvicorn says nothing: the API server's own last lines then mark
      ready: "Starting vLLM API server [0] on URL", "Available routes are:", "Route: /v1/..., Methods: POST")
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime

from .contracts import StartupBreakdown

MAX_LINE = 64 * 1024

_NUMBER = r"(\d{1,7}(?:\.\d{1,9})?)"
_STAMP = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")  # vLLM's "INFO 11-29 18:31:07 [file.py:1]"
_WEIGHTS = re.compile(r"Loading weights took " + _NUMBER + " seconds")
_MODEL_LOADING = re.compile(r"Model loading took [\d.]{1,12} GiB (?:memory )?and " + _NUMBER + " seconds")
_CACHE_HIT = re.compile(r"Directly load the compiled graph\(s\) for [^\n]{0,200}? from the cache, took " + _NUMBER)
_COMPILE_TOTAL = re.compile(r"torch\.compile (?:takes|took|and initial profiling run took) " + _NUMBER + " s in total")
_CAPTURE = re.compile(r"Graph capturing finished in " + _NUMBER + " secs")
_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _NUMBER + r" s(?:econds|\b)")
# tqdm's last redraw of the bar: "N/N [MM:SS<" or "[H:MM:SS<" (elapsed before the "<")
_WARMUP = re.compile(r"warmup: {0,3}100%[^\[]{0,200}\[(?:(\d{1,3}):)?(\d{1,2}):(\d\d)<")


def empty() -> StartupBreakdown:
    return StartupBreakdown(
        weights_s=-1.0,
        compile_s=-1.0,
        compile_cache="",
        cache_load_s=-1.0,
        graph_capture_s=-1.0,
        engine_init_s=-1.0,
        kernel_warmup_s=-1.0,
        kv_cache_s=-1.0,
        ready_s=-1.0,
    )


def parse(lines: Iterable[str]) -> StartupBreakdown:
    """The breakdown of the first start in `lines` (a log holds one server's life)."""
    out = empty()
    hits, misses, cache_load = 0, 0, 0.0
    first: int | None = None
    last: int | None = None  # uvicorn's "INFO:     Application startup complete." has no stamp: the one before
    api_up: int | None = None  # the stamp of the API server's last start-up line (routes), when uvicorn is quiet
    for raw in lines:
        line = raw[:MAX_LINE]
        stamp = _seconds(line)
        if stamp is not None:
            first = stamp if first is None else first
            last = stamp
        if "DeepGEMM warmup" in line:  # a progress bar: its pieces come as one line (CR) or several
            for bar in _WARMUP.finditer(line):
                h, mm, ss = bar.groups()
                out["kernel_warmup_s"] = float(int(h or 0) * 3600 + int(mm) * 60 + int(ss))
            continue
        if "oading weights took" in line or ("Model loading took" in line and out["weights_s"] < 0):
            m = _WEIGHTS.search(line) or _MODEL_LOADING.search(line)
            out["weights_s"] = float(m.group(1)) if m else out["weights_s"]
        elif "Directly load the compiled graph" in line and (m := _CACHE_HIT.search(line)):
            hits += 1
            cache_load += float(m.group(1))
        elif "Directly load AOT compilation" in line:
            hits += 1
        elif "Compiling a graph for" in line:
            misses += 1
        elif "torch.compile" in line and " in total" in line and (m := _COMPILE_TOTAL.search(line)):
            out["compile_s"] = float(m.group(1))  # cumulative (backbone, then a draft head): the last one
        elif "Graph capturing finished in" in line and (m := _CAPTURE.search(line)):
            out["graph_capture_s"] = max(0.0, out["graph_capture_s"]) + float(m.group(1))
        elif "init engine (profile, create kv cache" in line and (m := _ENGINE.search(line)):
            out["engine_init_s"] = float(m.group(1))
        elif "Application startup complete" in line:
            if first is not None and last is not None:
                out["ready_s"] = float((last - first) % (366 * 86400))
            break
        elif stamp is not None and (
            "Starting vLLM API server" in line or "Route: /" in line or "Available routes" in line
        ):
            api_up = stamp
    if out["ready_s"] < 0 and api_up is not None and first is not None:
        out["ready_s"] = float((api_up - first) % (366 * 86400))
    if misses:
        out["compile_cache"] = "cold"
    elif hits:
        out["compile_cache"] = "warm"
    if hits:
        out["cache_load_s"] = round(cache_load, 3)
    if out["engine_init_s"] >= 0:
        spent = max(0.0, out["compile_s"]) + max(0.0, out["graph_capture_s"]) + max(0.0, out["kernel_warmup_s"])
        out["kv_cache_s"] = round(max(0.0, out["engine_init_s"] - spent), 3)
    return out


def parse_text(text: str) -> StartupBreakdown:
    return parse(text.splitlines())


def _seconds(line: str) -> int | None:
    """Seconds since the start of the year of vLLM's "MM-DD HH:MM:SS" stamp (for differences)."""
    if "-" not in line or ":" not in line:
        return None
    m = _STAMP.search(line[:200])
    if not m:
        return None
    month, day, hh, mm, ss = (int(g) for g in m.groups())
    try:  # the log has no year: a leap year takes Feb 29; a start across New Year wraps (the modulo in parse)
        return int((datetime(2000, month, day, hh, mm, ss) - datetime(2000, 1, 1)).total_seconds())
    except ValueError:
        return None


def parse_file(path: str, max_bytes: int = 256 * 1024**2) -> StartupBreakdown:
    """The same, read as a stream (replacement characters for broken UTF-8), at most max_bytes."""

    def lines() -> Iterator[str]:
        seen = 0
        with open(path, encoding="utf-8", errors="replace") as f:
            while seen < max_bytes:
                line = f.readline(MAX_LINE)
                if not line:
                    return
                seen += len(line)
                yield line

    return parse(lines())
