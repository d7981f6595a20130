"""Scrape and parse vLLM's Prometheus `/metrics` text. Standard library only (runs on the Spark).

`scrape(url)` returns one flat dict: for every metric name the sum over its label sets (counters of
several engines / finish reasons add up), and every labelled series under its exact text key
(`name{a="b"}`) as well. `window_counters(before, after)` turns two scrapes into the counter deltas
of a measurement window (the [metrics_delta] table of a cNNN-rK result).
"""

from __future__ import annotations

import urllib.parse
import urllib.request

GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
REQUEST_SUCCESS = "vllm:request_success_total"
REQUESTS_RUNNING = "vllm:num_requests_running"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_OLD = "vllm:gpu_cache_usage_perc"  # the V0 engine's name of kv_cache_usage_perc
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"  # label position="0".."k-1"

# [metrics_delta] key -> Prometheus counter (the results-tree contract).
WINDOW_COUNTERS = {
    "generation_tokens": GENERATION_TOKENS,
    "prompt_tokens": PROMPT_TOKENS,
    "request_success": REQUEST_SUCCESS,
    "spec_decode_num_draft_tokens": SPEC_DRAFT_TOKENS,
    "spec_decode_num_accepted_tokens": SPEC_ACCEPTED_TOKENS,
}

# The server's view of a window (telemetry.server_view): counter deltas kept under vLLM's own names.
SERVER_COUNTERS = (
    GENERATION_TOKENS,
    PROMPT_TOKENS,
    REQUEST_SUCCESS,
    PREEMPTIONS,
    PREFIX_QUERIES,
    PREFIX_HITS,
    SPEC_DRAFTS,
    SPEC_DRAFT_TOKENS,
    SPEC_ACCEPTED_TOKENS,
)
MAX_POSITIONS = 16

MAX_BYTES = 32 * 1024 * 1024  # vLLM's /metrics is ~100 KB; a server sending more is not one to believe

# Never route a loopback/host-local scrape through an http_proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metrics_url(url: str) -> str:
    """`http://h:p` or `http://h:p/metrics` -> the /metrics URL."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def scrape(url: str, timeout: float = 5.0) -> dict[str, float]:
    """GET /metrics and parse it. Raises OSError (urllib's errors) when the server does not answer 200."""
    with _OPENER.open(metrics_url(url), timeout=timeout) as response:
        data = response.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise OSError(f"/metrics sent more than {MAX_BYTES} bytes")
    return parse(data.decode("utf-8", "replace"))


def parse(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {name: sum over label sets, 'name{labels}': value}."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        sample = _parse_sample(line)
        if sample is None:
            continue
        name, series, value = sample
        values[name] = values.get(name, 0.0) + value
        if series != name:
            values[series] = value
    return values


def _parse_sample(line: str) -> tuple[str, str, float] | None:
    """One sample line -> (name, series key, value), or None for comments, blanks and junk."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        close = _closing_brace(line, brace)
        if close == -1:
            return None
        name, series, rest = line[:brace], line[: close + 1], line[close + 1 :]
    else:
        if space == -1:
            return None
        name = series = line[:space]
        rest = line[space:]
    fields = rest.split()
    if not fields:
        return None
    try:
        return name, series, float(fields[0])
    except ValueError:
        return None


def _closing_brace(line: str, start: int) -> int:
    """Index of the `}` closing the label set opened at `start`; label values may hold `}` or `\\"`."""
    quoted = False
    i = start + 1
    while i < len(line):
        ch = line[i]
        if quoted and ch == "\\":
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch == "}" and not quoted:
            return i
        i += 1
    return -1


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for every series in `after` (a series new in `after` counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def window_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The contract's [metrics_delta]: counter deltas over one window, 0.0 where the server lacks one."""
    return {key: float(after.get(name, 0.0) - before.get(name, 0.0)) for key, name in WINDOW_COUNTERS.items()}


def acceptance_rate(counters: dict[str, float]) -> float:
    """Speculative-decoding acceptance over a window: accepted / draft tokens; -1.0 when nothing was drafted."""
    drafted = counters.get("spec_decode_num_draft_tokens", 0.0)
    if drafted <= 0:
        return -1.0
    return counters.get("spec_decode_num_accepted_tokens", 0.0) / drafted


def server_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before of each SERVER_COUNTERS counter the server exports (vLLM's names; absent ones left out)."""
    return {name: float(after[name] - before.get(name, 0.0)) for name in SERVER_COUNTERS if name in after}


def per_position(before: dict[str, float], after: dict[str, float]) -> list[float]:
    """Accepted draft tokens per speculative position over a window, summed over the other labels (engines,
    models); [] without speculative decoding."""
    totals: dict[int, float] = {}
    for key, value in after.items():
        if not key.startswith(SPEC_ACCEPTED_PER_POS + "{"):
            continue
        start = key.find('position="')
        digits = key[start + 10 : key.find('"', start + 10)] if start != -1 else ""
        if digits.isdigit() and int(digits) < MAX_POSITIONS:
            totals[int(digits)] = totals.get(int(digits), 0.0) + value - before.get(key, 0.0)
    return [totals.get(p, 0.0) for p in range(max(totals) + 1)] if totals else []
