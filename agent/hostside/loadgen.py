"""Streaming load driver for an OpenAI-compatible `/v1/completions` server (vLLM): closed or open loop.

Standard library only: it runs on the Spark next to the server and is imported by the controller.
Open loop (a Shape with a rate): requests start on a Poisson/gamma schedule (arrivals.py) with prompts made before
the window (prompts.py), at most `concurrency` in flight (0 = no cap); see _Load. Otherwise, closed loop:
exactly `concurrency` requests are in flight at all times; each streams with `ignore_eos` and
`continuous_usage_stats`, so every chunk says how many tokens it carried. Per level: a warmup
window, then each measured window is one run of the load, like one `vllm bench serve` run: the c
requests start together, and at the close the requests still streaming are cut and count only the
tokens that arrived inside the window. Between runs the server idles briefly (SETTLE_S).

The HTTP client is hand-written on asyncio streams (one connection per request, chunked or plain
bodies, SSE `data:` lines): http.client in threads cannot keep up with 10k tokens/s on one core.

Which events count in a window [t0, t1):
  output tokens   every chunk that arrived inside it
  completed, e2el, TPOT, input tokens   requests that finished (without error) inside it
  TTFT            requests whose first token arrived inside it
  ITL             gaps between a request's token chunks whose later chunk arrived inside it
  failed, errors  requests that errored inside it
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import dataclasses
import functools
import json
import os
import random
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from . import arrivals, atomic, metrics, prompts, slo, steady, telemetry, utc
from .contracts import Measurement, WarmupRecord, Window
from .errors import HostError
from .loadpoints import level_name

Clock = Callable[[], float]


DEFAULT_TIMEOUT_S = 600.0
MAX_ERRORS_LISTED = 5
FAILURE_BACKOFF_S = 0.1
POLL_S = 0.25
SETTLE_S = 0.5
WATCH_S = 0.5  # how often a window looks at the server (process record + /health)
HEALTH_TIMEOUT_S = 2.0
HEALTH_GRACE_S = 1.0  # /health refused or erroring for this long (two probes or more): the server is gone
HEALTH_HANG_S = 10.0  # /health not answering for this long: gone too (a busy server may answer late, not never)
CONFIRM_S = 3.0  # after a run of failed requests: how long to wait for the watch to say whether the server died
LATE_S = 0.010  # open loop: a request that starts more than this after its scheduled time counts as a late start

WORDS = prompts.WORDS


class LoadError(HostError):
    """A request failed: bad HTTP status, an error object in the stream, or a broken stream."""


@dataclass(frozen=True)
class Shape:
    """How a level's load is shaped beyond its concurrency (all defaults: today's closed loop of random words)."""

    rate: float = 0.0  # requests/s; 0 = closed loop (then `concurrency` requests are always in flight)
    burstiness: float = 1.0  # gamma shape of the gaps: 1 = Poisson, < 1 burstier (vllm bench serve --burstiness)
    dataset: prompts.Dataset | None = None  # None: random words at prompt_len/output_len/profile
    context_depth: int = 0  # > 0: every prompt this many tokens (the context-depth axis)
    exact_lengths: bool = False  # count prompt tokens with the server's /tokenize
    reset_prefix_cache: bool = False  # empty the server's prefix cache before every window
    slos: tuple[tuple[str, float], ...] = ()  # (ttft|tpot|e2el, ms): request_goodput counts requests meeting all
    # closed loop: client i starts i/c of a request lifetime (the level's last measured E2EL p50) after the first,
    # the window opening once the last has started, so the clients' waves are out of phase (off: all at once)
    stagger: bool = False


class _Request:
    """What one request saw, in clock() units. `times`/`tokens`: one entry per chunk that carried tokens."""

    __slots__ = ("end", "error", "prompt_tokens", "sent_len", "start", "times", "tokens")

    def __init__(self, start: float, prompt_tokens: int):
        self.sent_len = prompt_tokens  # the prompt's length as the driver made it (exact when /tokenize counted)
        self.start = start
        self.end: float | None = None  # set when the stream finished or failed; None while in flight
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.prompt_tokens = prompt_tokens  # estimate, replaced by the server's usage.prompt_tokens
        self.error = ""


# ---------------------------------------------------------------- prompts


def request_lengths(profile: str, prompt_len: int, output_len: int, rng: random.Random) -> tuple[int, int]:
    """(prompt words, max_tokens) of the next request. mixed: uniform within ±50% of the nominal lengths."""
    if profile == "uniform":
        return prompt_len, output_len
    if profile == "mixed":
        return _around(prompt_len, rng), _around(output_len, rng)
    raise ValueError(f"profile must be 'uniform' or 'mixed', got {profile!r}")


def _around(nominal: int, rng: random.Random) -> int:
    return max(1, rng.randint(nominal // 2, nominal + nominal // 2))


def make_prompt(n_words: int, rng: random.Random) -> str:
    """About n_words tokens of random common words; random so that prefix caching cannot shortcut prefill."""
    return prompts.make_text(n_words, rng)


# ---------------------------------------------------------------- HTTP + SSE client


def parse_url(url: str) -> tuple[str, int, str]:
    """'http://127.0.0.1:8000[/prefix]' -> (host, port, '/prefix/v1/completions')."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"server URL must look like http://HOST:PORT, got {url!r}")
    return parts.hostname, parts.port or 80, parts.path.rstrip("/") + "/v1/completions"


def build_request(host: str, port: int, path: str, model: str, prompt: str, max_tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """Status line + headers -> (status, {lower-case name: value})."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = lines[0].split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/"):
        raise LoadError(f"not an HTTP response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(fields[1]), headers


async def _body_pieces(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    """The response body as it arrives: chunked, Content-Length, or until the server closes."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise LoadError("stream closed inside a chunked body")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while (await reader.readline()).strip():
                    pass  # trailers
                return
            piece = await reader.readexactly(size + 2)
            yield piece[:-2]
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0:
            piece = await reader.read(min(left, 65536))
            if not piece:
                raise LoadError(f"stream closed {left} bytes before the end of the body")
            left -= len(piece)
            yield piece
    else:
        while True:
            piece = await reader.read(65536)
            if not piece:
                return
            yield piece


async def _error_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> str:
    """First part of an error response's body, with the server's message when it is JSON."""
    data = b""
    async for piece in _body_pieces(reader, headers):
        data += piece
        if len(data) > 4096:
            break
    text = data.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
        message = obj.get("message") or obj.get("error", {}).get("message") or obj.get("detail")
        if message:
            return str(message)
    except (ValueError, AttributeError):
        pass
    return text[:200]


def _chunk_tokens(event: dict[str, Any], counted: int) -> int:
    """Tokens carried by one SSE event, given how many this request has counted so far.

    With usage the cumulative completion_tokens is exact (speculative decoding may deliver several
    per chunk); without it a chunk with text counts one token. A final usage-only event corrects any
    fallback count up to the server's total.
    """
    usage = event.get("usage")
    if usage and usage.get("completion_tokens") is not None:
        total = int(usage["completion_tokens"])
        return total - counted if total > counted else 0
    choices = event.get("choices")
    if choices and choices[0].get("text"):
        return 1
    return 0


async def stream_completion(host: str, port: int, request: bytes, record: _Request, clock: Clock) -> None:
    """Send one request and stamp every token-bearing chunk into `record`. Raises LoadError / OSError."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        status, headers = await _read_head(reader)
        if status != 200:
            raise LoadError(f"HTTP {status}: {await _error_body(reader, headers)}")
        counted = 0
        pending = b""
        async for piece in _body_pieces(reader, headers):
            now = clock()
            lines = (pending + piece).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    record.end = now
                    return
                event = json.loads(payload)
                if "error" in event and "choices" not in event:
                    error = event["error"]
                    message = error.get("message", error) if isinstance(error, dict) else error
                    raise LoadError(f"server error: {message}")
                usage = event.get("usage")
                if usage and usage.get("prompt_tokens"):
                    record.prompt_tokens = usage["prompt_tokens"]
                n = _chunk_tokens(event, counted)
                if n:
                    counted += n
                    record.times.append(now)
                    record.tokens.append(n)
        raise LoadError(f"stream ended without [DONE] after {counted} tokens")
    finally:
        writer.close()


async def post_json(base: str, route: str, body: Any, timeout_s: float) -> Any:
    """POST `body` (JSON, or nothing) to base+route and return the JSON answer; LoadError on a non-200 status."""
    host, port, path = parse_url(base)
    url = path[: -len("/v1/completions")] + route
    data = b"" if body is None else json.dumps(body).encode()
    head = (
        f"POST {url} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )

    async def exchange() -> Any:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(head.encode("latin-1") + data)
            status, headers = await _read_head(reader)
            if status != 200:
                raise LoadError(f"HTTP {status}: {await _error_body(reader, headers)}")
            raw = b""
            async for piece in _body_pieces(reader, headers):
                raw += piece
                if len(raw) > 1 << 24:
                    raise LoadError(f"{route} answered more than 16 MiB")
            return json.loads(raw) if raw.strip() else None
        finally:
            writer.close()

    return await asyncio.wait_for(exchange(), timeout_s)


# ---------------------------------------------------------------- is the server still there?


class EngineWatch:
    """Notices the server dying during a level: its process gone (`gone`, e.g. supervise.gone: {} while it runs,
    else {"how", "at", ...}) or /health going away: refused or an error status for HEALTH_GRACE_S, no answer for
    HEALTH_HANG_S.

    `phase` names what the load driver is doing ("c004-r2", "c004-warmup", "after c004-r2"); `died` is the death
    record once seen: {"at", "detected_at" (epoch s), "how", "window", "exit_code"}. A dead server stays dead.
    """

    def __init__(self, url: str, gone: Callable[[], Any] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.host, self.port, path = parse_url(url)
        self.health_path = path[: -len("/v1/completions")] + "/health"
        self.gone = gone
        self.clock = clock
        self.phase = ""
        self.died: dict = {}
        self._failing_since: float | None = None  # wall time of the first failed probe in a row
        self._failures = 0
        self._hard = 0  # of which refused or erroring (not merely slow)

    async def check(self) -> dict:
        """One look; returns `died` (empty while the server lives)."""
        if self.died:
            return self.died
        ended = self.gone() if self.gone else {}
        if ended:
            return self._declare(ended.get("at") or self.clock(), ended.get("how", "the server ended"), ended)
        problem, hard = await self._probe()
        now = self.clock()
        if not problem:
            self._failing_since, self._failures, self._hard = None, 0, 0
            return {}
        self._failures += 1
        self._hard += hard
        self._failing_since = self._failing_since or now
        failing_s = now - self._failing_since
        if (self._hard >= 2 and failing_s >= HEALTH_GRACE_S) or (self._failures >= 2 and failing_s >= HEALTH_HANG_S):
            return self._declare(self._failing_since, "/health " + problem, {})
        return {}

    async def _probe(self) -> tuple[str, bool]:
        """("", False) if /health answers 200, else (what went wrong, whether it was more than slowness)."""
        request = f"GET {self.health_path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nConnection: close\r\n\r\n"
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), HEALTH_TIMEOUT_S)
        except TimeoutError:
            return f"did not accept a connection in {HEALTH_TIMEOUT_S:g}s", False
        except OSError as exc:
            return f"unreachable ({type(exc).__name__})", True
        try:
            writer.write(request.encode("latin-1"))
            status, _ = await asyncio.wait_for(_read_head(reader), HEALTH_TIMEOUT_S)
            return ("", False) if status == 200 else (f"answered HTTP {status}", True)
        except TimeoutError:
            return f"did not answer in {HEALTH_TIMEOUT_S:g}s", False
        except (OSError, LoadError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            return f"broke off ({type(exc).__name__})", True
        finally:
            writer.close()

    def _declare(self, at: float, how: str, ended: dict) -> dict:
        self.died = {
            "at": float(at),
            "detected_at": self.clock(),
            "how": how,
            "window": self.phase,
            "exit_code": ended.get("exit_code"),
        }
        return self.died


# ---------------------------------------------------------------- the closed loop


class _Load:
    """The load of one level. Closed loop (rate 0): `concurrency` workers, each sending its next request the moment
    the previous one ends. Open loop (rate > 0): requests start on a Poisson/gamma schedule drawn before the window
    (arrivals.py), at most `concurrency` in flight when concurrency > 0 (bench's --max-concurrency); a request
    that cannot start on time starts late (its lag is recorded) or, past the window's end, not at all (missed)."""

    def __init__(
        self,
        url: str,
        model: str,
        concurrency: int,
        prompt_len: int,
        output_len: int,
        profile: str,
        rng: random.Random,
        timeout_s: float,
        clock: Clock,
        watch: EngineWatch | None = None,
        shape: Shape | None = None,
    ):
        shape = shape or Shape()
        if concurrency < 1 and not shape.rate:
            raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
        self.host, self.port, self.path = parse_url(url)
        self.base = url
        self.model = model
        self.concurrency = concurrency
        self.shape = shape
        self.lengths = (profile, prompt_len, output_len)
        self.rng = rng  # one stream per level: no two requests share a prompt
        self.arrival_rng = random.Random(rng.random())  # the schedule: its own stream, drawn from the level's
        dataset = shape.dataset or prompts.Dataset(
            "random", prompt_len, output_len, range_ratio=0.5 if profile == "mixed" else 0.0
        )
        if profile not in ("uniform", "mixed"):
            raise ValueError(f"profile must be 'uniform' or 'mixed', got {profile!r}")
        if shape.context_depth:
            dataset = dataclasses.replace(dataset, prompt_len=shape.context_depth, range_ratio=0.0)
        self.source = prompts.Source(dataset, rng, self._count if shape.exact_lengths else None)
        self.timeout_s = timeout_s
        self.clock = clock
        self.requests: list[_Request] = []
        self.lags: list[float] = []  # open loop: how late each request of the window started, seconds
        self.missed = 0  # open loop: scheduled inside the window, never started
        self.failures_in_row = 0
        self.abort_reason = ""
        self.running = False
        self.watch = watch  # EngineWatch or None
        self.lifetime_s = 0.0  # E2EL p50 of the level's last run that completed a request (clock units); 0: none yet

    @property
    def died(self) -> dict:
        return self.watch.died if self.watch else {}

    async def _count(self, text: str) -> int:
        """Tokens the server counts in `text` (its /tokenize, special tokens included, as usage counts them)."""
        reply = await post_json(self.base, "/tokenize", {"model": self.model, "prompt": text}, self.timeout_s)
        count = reply.get("count") if isinstance(reply, dict) else None
        if not isinstance(count, int) or count < 0:
            raise LoadError(f"/tokenize answered without a token count: {str(reply)[:120]}")
        return count

    async def _request(self) -> tuple[bytes, int]:
        p = await self.source.next()
        return build_request(self.host, self.port, self.path, self.model, p.text, p.output_len), p.prompt_len

    async def run(self, duration_s: float) -> tuple[list[_Request], float, float]:
        """Keep the load on for duration_s (clock units), then cut it; -> (requests, t0, t1)."""
        self.requests, self.lags, self.missed = [], [], 0
        prepared: list[tuple[float, bytes, int]] = []
        if self.shape.rate:  # every prompt is made (and tokenized) before the window: none of it is timed
            times = arrivals.schedule(self.shape.rate, self.shape.burstiness, duration_s, self.arrival_rng)
            try:
                prepared = [(due, *await self._request()) for due in times]
            except (OSError, LoadError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
                self.abort_reason = f"could not make the prompts: {type(exc).__name__}: {exc}"
        gap = self.lifetime_s / self.concurrency if self.shape.stagger and self.concurrency > 1 else 0.0
        launch = self.clock()
        t0 = launch + gap * (self.concurrency - 1)  # staggered: the window opens once the last client has started
        t1 = t0 + duration_s
        self.running = True
        if self.shape.rate:
            tasks = [asyncio.ensure_future(self._dispatch(prepared, t0, t1))]
        else:
            tasks = [asyncio.ensure_future(self._worker(launch + i * gap)) for i in range(self.concurrency)]
        if self.watch:
            tasks.append(asyncio.ensure_future(self._watch()))
        try:
            while not self.abort_reason and self.clock() < t1:
                await asyncio.sleep(min(t1 - self.clock(), POLL_S))
        finally:
            # The flag as well as cancel(): wait_for may swallow a cancel that races the request's end.
            self.running = False
            for task in tasks:
                task.cancel()  # the server sees the disconnect and aborts the request
            await asyncio.gather(*tasks, return_exceptions=True)
        done = [r.end - r.start for r in self.requests if r.end is not None and not r.error and r.times]
        if done:
            self.lifetime_s = percentile(done, 50)
        return self.requests, t0, t1

    async def _watch(self) -> None:
        assert self.watch is not None  # started only with a watch
        while self.running and not await self.watch.check():
            await asyncio.sleep(WATCH_S)
        if self.watch.died:
            self.abort_reason = "the server died: " + self.watch.died["how"]

    async def confirm_death(self) -> dict:
        """After a run of failed requests: is the server dead, or only refusing these requests? Watch for a while."""
        deadline = time.monotonic() + CONFIRM_S
        while self.watch and not await self.watch.check() and time.monotonic() < deadline:
            await asyncio.sleep(WATCH_S)
        return self.died

    async def _worker(self, first: float = 0.0) -> None:
        if (wait := first - self.clock()) > 0:  # its phase; after that, each request the moment the last one ends
            await asyncio.sleep(wait / getattr(self.clock, "time_scale", 1.0))  # clock units -> real s
        while self.running and not self.abort_reason:
            try:
                request, prompt_len = await self._request()
            except (OSError, LoadError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
                record = _Request(self.clock(), 0)
                self.requests.append(record)
                self._failed(record, f"could not make the prompt: {type(exc).__name__}: {exc}")
                await asyncio.sleep(FAILURE_BACKOFF_S)
                continue
            record = await self._send(request, prompt_len)
            if record.error:
                await asyncio.sleep(FAILURE_BACKOFF_S)  # a dead server must not turn into a busy loop

    async def _dispatch(self, prepared: list[tuple[float, bytes, int]], t0: float, t1: float) -> None:
        """Open loop: start each request at its time (late when the cap or the event loop holds it back)."""
        cap = asyncio.Semaphore(self.concurrency) if self.concurrency > 0 else None
        in_flight: set[asyncio.Task[_Request]] = set()
        started = 0
        try:
            for due, request, prompt_len in prepared:
                wait = t0 + due - self.clock()
                if wait > 0:
                    await asyncio.sleep(wait / getattr(self.clock, "time_scale", 1.0))  # clock units -> real s
                elif started % 16 == 0:
                    await asyncio.sleep(0)  # behind schedule: still let the requests in flight read their streams
                if cap:
                    await cap.acquire()
                now = self.clock()
                if now >= t1 or not self.running or self.abort_reason:
                    if cap:
                        cap.release()
                    break
                self.lags.append(now - (t0 + due))
                started += 1
                task = asyncio.ensure_future(self._send(request, prompt_len))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                if cap:
                    task.add_done_callback(functools.partial(_release, cap))
            self.missed = len(prepared) - started
            await asyncio.gather(*in_flight, return_exceptions=True)
        finally:
            self.missed = len(prepared) - started
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)

    async def _send(self, request: bytes, prompt_len: int) -> _Request:
        """One request, start to end (or failure), recorded in self.requests."""
        record = _Request(self.clock(), prompt_len)
        self.requests.append(record)
        try:
            await asyncio.wait_for(stream_completion(self.host, self.port, request, record, self.clock), self.timeout_s)
            self.failures_in_row = 0
        except TimeoutError:
            self._failed(record, f"request timed out after {self.timeout_s:g}s")
        except (OSError, LoadError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            self._failed(record, f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc))
        return record

    def _failed(self, record: _Request, message: str) -> None:
        record.end = self.clock()
        record.error = message or "request failed"
        if record.times:
            self.failures_in_row = 0
        self.failures_in_row += 1
        # Nothing but failures, many times over: the server is gone; stop instead of spinning to the end.
        if self.failures_in_row >= max(8, 2 * self.concurrency):
            self.abort_reason = f"aborted after {self.failures_in_row} failed requests in a row; last: {record.error}"

    async def reset_prefix_cache(self) -> str:
        """Empty the server's prefix cache before a window (vLLM's POST /reset_prefix_cache, served only with
        VLLM_SERVER_DEV_MODE=1): "reset", "unavailable" (404: the choice is recorded, the cache is not controlled)
        or "failed" (the server said success=false: blocks were still held)."""
        if not self.shape.reset_prefix_cache:
            return "kept"
        try:
            reply = await post_json(self.base, "/reset_prefix_cache", None, HEALTH_TIMEOUT_S * 5)
        except LoadError as exc:
            return "unavailable" if "HTTP 404" in str(exc) or "HTTP 405" in str(exc) else "failed"
        except (OSError, TimeoutError, ValueError):
            return "failed"
        return "reset" if not isinstance(reply, dict) or reply.get("success", True) else "failed"

    def shape_keys(self, prefix_cache: str, duration_s: float) -> dict[str, Any]:
        """The window's load-shape keys (contracts.Window, after the percentiles)."""
        lags = self.lags
        sent = [r.sent_len for r in self.requests]
        return {
            "request_rate": float(self.shape.rate),
            "burstiness": float(self.shape.burstiness),
            "context_depth": int(self.shape.context_depth),
            "late_starts": sum(1 for lag in lags if lag > LATE_S),
            "missed_starts": int(self.missed),
            "p50_start_lag_ms": 1000.0 * percentile(lags, 50),
            "p99_start_lag_ms": 1000.0 * percentile(lags, 99),
            "max_start_lag_ms": 1000.0 * max(lags, default=0.0),
            "mean_input_len": sum(sent) / len(sent) if sent else 0.0,
            "min_input_len": min(sent, default=0),
            "max_input_len": max(sent, default=0),
            "dataset": self.source.dataset.name,
            "exact_lengths": bool(self.shape.exact_lengths),
            "prefix_cache": prefix_cache,
        }


def _release(cap: asyncio.Semaphore, _: object) -> None:
    cap.release()


Scrape = Callable[[], Awaitable["dict[str, float] | OSError"]]
Finish = Callable[[Window, int, "dict[str, float] | OSError | None", "dict[str, float] | OSError | None"], None]


async def _level(
    load: _Load,
    duration_s: float,
    warmup_s: float,
    repeats: int,
    scrape: Scrape | None,
    finish: Finish,
    sampler: telemetry.Sampler | None = None,
    rule: steady.Warmup | None = None,
    log: steady.LogWatch | None = None,
) -> None:
    """The warmup, then `repeats` measured windows, each its own run of the load.

    The warmup is one run of warmup_s, or with a steady-state rule (`rule.until_steady`) windows of duration_s
    until the server settles (hostside/steady.py); the first measured window then carries the `warmup` record.
    With a log watch every measured window says how many JIT lines the server logged during it (`jit_lines`).
    Between runs the load is off for SETTLE_S: cancelled requests are aborted and counted by the server
    before /metrics is read, and the next window starts on an idle server (as a fresh benchmark run does).
    finish(result, repeat, before, after) gets each window's result and its two scrapes as soon as it exists.
    Before each window the server's prefix cache is reset when the shape asks for it (what happened is recorded).
    With a watch, a server that dies ends the level at once: the window it died in comes back with ok=False and
    engine_died=True, and no later window is run (they are skipped, not measured).
    """
    name = level_name(load.concurrency, load.shape.rate, load.shape.context_depth)
    record: WarmupRecord | None = None
    if rule is not None and rule.until_steady:
        record = await _warm_until_steady(load, duration_s, rule, log, sampler, name)
        if record is None:
            return
    elif warmup_s > 0:
        if await _dead(load, name + "-warmup"):
            return
        await load.reset_prefix_cache()
        mark = sampler.mark() if sampler else 0.0
        await load.run(warmup_s)
        if sampler:
            sampler.warmup_done(mark)
        if load.died or (load.abort_reason and await load.confirm_death()):
            return
        await asyncio.sleep(SETTLE_S)
    for repeat in range(1, repeats + 1):
        window = f"{name}-r{repeat}"
        if await _dead(load, window):
            return
        if load.abort_reason:  # nothing but failed requests: the remaining windows are not measured
            result = _summary(load, [], 0.0, duration_s, "")
            result["ok"], result["error"], result["started_at"] = False, load.abort_reason, utc.iso()
            if sampler:
                sampler.attach(result, sampler.mark(), None, None)
            finish(result, repeat, None, None)
            continue
        cache = await load.reset_prefix_cache()  # one window's cache must not flatter the next
        if log:
            log.new_jit_lines()  # what the pause before it logged is no window's
        before = await scrape() if scrape else None
        wall = time.time()
        mark = sampler.mark() if sampler else 0.0
        requests, t0, t1 = await load.run(duration_s)
        ended = sampler.mark() if sampler else 0.0
        if load.abort_reason and not load.died:
            await load.confirm_death()
        if load.died:
            result = _summary(load, requests, t0, t1, cache)
            result["ok"], result["engine_died"] = False, True
            result["started_at"] = utc.iso(wall)
            result["error"] = "the server died during this window: " + load.died["how"]
            if sampler:
                sampler.attach(result, mark, before, None)
            finish(result, repeat, before, None)
            return
        await asyncio.sleep(SETTLE_S)
        if load.watch:
            load.watch.phase = "after " + window
        after = await scrape() if scrape else None
        result = _summary(load, requests, t0, t1, cache)
        result["started_at"] = utc.iso(wall)
        if load.abort_reason:
            result["ok"], result["error"] = False, load.abort_reason
        if log:  # a compile during the window: flagged, and never ranked (judging/stats.py)
            jit = log.new_jit_lines()
            result["jit_lines"] = len(jit)
            if jit:
                result["jit_evidence"] = jit[0]
        if record is not None:
            result["warmup"], record = record, None
        if sampler:  # what the GPU and the server did during the window (hostside/telemetry.py)
            sampler.attach(result, mark, before, after, ended)
        finish(result, repeat, before, after)


async def _warm_until_steady(
    load: _Load,
    duration_s: float,
    rule: steady.Warmup,
    log: steady.LogWatch | None,
    sampler: telemetry.Sampler | None,
    name: str,
) -> WarmupRecord | None:
    """Warmup windows of duration_s until steady.settled says stop; None when the server died meanwhile."""
    throughputs: list[float] = []
    jit: list[int] = []
    evidence = ""
    mark = sampler.mark() if sampler else 0.0
    start = load.clock()
    done, settled, why = False, False, ""
    while not done:
        if await _dead(load, f"{name}-warmup"):
            return None
        await load.reset_prefix_cache()
        if log:
            log.new_jit_lines()
        requests, t0, t1 = await load.run(duration_s)
        if load.died or (load.abort_reason and await load.confirm_death()):
            return None
        await asyncio.sleep(SETTLE_S)
        lines = log.new_jit_lines() if log else []
        evidence = evidence or (lines[0] if lines else "")
        throughputs.append(_summary(load, requests, t0, t1, "")["output_throughput"])
        jit.append(len(lines))
        done, settled, why = steady.settled(throughputs, jit, rule)
        if load.abort_reason and not done:  # nothing but failed requests: the windows will say so
            done, why = True, "stopped: " + load.abort_reason
    if sampler:
        sampler.warmup_done(mark)
    return WarmupRecord(
        windows=len(throughputs),
        seconds=round(load.clock() - start, 3),
        steady=settled,
        reason=why,
        output_throughputs=[round(x, 2) for x in throughputs],
        jit_lines=sum(jit),
        jit_evidence=evidence,
        tolerance=rule.tolerance,
        maximum=max(rule.maximum, rule.minimum),
    )


def _summary(load: _Load, requests: Sequence[_Request], t0: float, t1: float, prefix_cache: str) -> Window:
    result = summarize_window(requests, t0, t1, load.concurrency, dict(load.shape.slos))
    result.update(load.shape_keys(prefix_cache, t1 - t0))  # type: ignore[typeddict-item]
    return result


async def _dead(load: _Load, phase: str) -> bool:
    """Look before the next phase starts; a death in the pause after a window is that window's "after"."""
    if not load.watch:
        return False
    if await load.watch.check():
        return True
    load.watch.phase = phase
    return False


# ---------------------------------------------------------------- window accounting


def summarize_window(
    requests: Sequence[_Request], t0: float, t1: float, concurrency: int, slos: dict[str, float] | None = None
) -> Window:
    """The measurement dict of window [t0, t1) over the requests' recorded events (see module doc).
    slos ({ttft|tpot|e2el: ms}, slo.parse): request_goodput counts the completed requests that meet every one
    (none given: every completed request is good, as bench reports goodput only with --goodput)."""
    duration = t1 - t0
    out_tokens = 0
    ttft: list[float] = []
    itl: list[float] = []
    tpot: list[float] = []
    e2el: list[float] = []
    completed = failed = input_tokens = good = 0
    errors: list[str] = []
    for r in requests:
        lo = bisect.bisect_left(r.times, t0)
        hi = bisect.bisect_left(r.times, t1)
        out_tokens += sum(r.tokens[lo:hi])
        if lo == 0 and hi > 0:
            ttft.append(r.times[0] - r.start)
        itl.extend(r.times[k] - r.times[k - 1] for k in range(max(lo, 1), hi))
        if r.end is None or not t0 <= r.end < t1:
            continue
        if r.error:
            failed += 1
            if r.error not in errors:
                errors.append(r.error)
            continue
        completed += 1
        input_tokens += r.prompt_tokens
        e2el.append(r.end - r.start)
        n = sum(r.tokens)
        own_tpot = (r.end - r.times[0]) / (n - 1) if n > 1 else 0.0
        if n > 1:
            tpot.append(own_tpot)
        if not slos or (r.times and slo.good(slos, r.times[0] - r.start, own_tpot, r.end - r.start)):
            good += 1
    ok = out_tokens > 0
    return Window(
        concurrency=concurrency,
        ok=ok,
        error="" if ok else (errors[0] if errors else "no output tokens arrived in the measurement window"),
        started_at="",
        duration=float(duration),
        completed=completed,
        failed=failed,
        errors=errors[:MAX_ERRORS_LISTED],
        total_input_tokens=input_tokens,
        total_output_tokens=out_tokens,
        output_throughput=out_tokens / duration if duration > 0 else 0.0,
        request_throughput=completed / duration if duration > 0 else 0.0,
        max_concurrent_requests=max_in_flight(requests, t0, t1),
        mean_ttft_ms=_mean_ms(ttft),
        median_ttft_ms=1000.0 * percentile(ttft, 50),
        p99_ttft_ms=1000.0 * percentile(ttft, 99),
        mean_tpot_ms=_mean_ms(tpot),
        median_tpot_ms=1000.0 * percentile(tpot, 50),
        p99_tpot_ms=1000.0 * percentile(tpot, 99),
        mean_itl_ms=_mean_ms(itl),
        median_itl_ms=1000.0 * percentile(itl, 50),
        p99_itl_ms=1000.0 * percentile(itl, 99),
        median_e2el_ms=1000.0 * percentile(e2el, 50),
        p99_e2el_ms=1000.0 * percentile(e2el, 99),
        mean_e2el_ms=_mean_ms(e2el),
        request_goodput=good / duration if duration > 0 else 0.0,
        **_percentiles({"ttft": ttft, "tpot": tpot, "itl": itl, "e2el": e2el}),  # type: ignore[typeddict-item]
    )


def _percentiles(samples: dict[str, list[float]]) -> dict[str, float]:
    """p50/p90/p95 of each metric, ms (p99 and the median are named keys of their own: bench's default set)."""
    return {f"p{q}_{name}_ms": 1000.0 * percentile(values, q) for name, values in samples.items() for q in (50, 90, 95)}


def _mean_ms(values: list[float]) -> float:
    return 1000.0 * sum(values) / len(values) if values else 0.0


def max_in_flight(requests: Sequence[_Request], t0: float, t1: float) -> int:
    """Most requests in flight at once during [t0, t1) (an end frees its slot before a start at the same instant)."""
    events = []
    for r in requests:
        if r.start >= t1 or (r.end is not None and r.end < t0):
            continue
        events.append((max(r.start, t0), 1))
        if r.end is not None and r.end < t1:
            events.append((r.end, -1))
    events.sort()
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default, as `vllm bench serve` reports); 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# ---------------------------------------------------------------- public API


def run_level(
    url: str,
    model: str,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    prompt_len: int,
    output_len: int,
    profile: str = "uniform",
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    clock: Clock = time.monotonic,
    shape: Shape | None = None,
) -> Window:
    """One level: a warmup window, then one measured window. Request failures never raise:
    they are counted, and a window without output tokens comes back with ok=False and the error."""
    shape = shape or Shape()
    rng = _level_rng(seed, concurrency, shape.rate, shape.context_depth)
    load = _Load(url, model, concurrency, prompt_len, output_len, profile, rng, timeout_s, clock, shape=shape)
    results: list[Window] = []
    asyncio.run(_level(load, duration_s, warmup_s, 1, None, lambda result, *_: results.append(result)))
    return results[0]


def run_levels(
    url: str,
    model: str,
    levels: Sequence[int],
    duration_s: float,
    warmup_s: float,
    repeats: int,
    prompt_len: int = 1024,
    output_len: int = 256,
    profile: str = "uniform",
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    clock: Clock = time.monotonic,
    on_result: Callable[[Measurement], object] | None = None,
    metrics_timeout_s: float = 10.0,
    watch: EngineWatch | None = None,
    shape: Shape | None = None,
    rates: Sequence[float] = (),
    depths: Sequence[int] = (),
    until_saturated: bool = False,
    sampler: telemetry.Sampler | None = None,
    rule: steady.Warmup | None = None,
    log: steady.LogWatch | None = None,
) -> list[Measurement]:
    """Per level: one warmup window, then `repeats` measured windows against the same server, each with
    `repeat`, the /metrics counter deltas over it (`metrics_delta`) and `spec_decode_acceptance_rate`.
    on_result(result) is called as soon as each window's result exists. Warmups are not returned.
    watch (an EngineWatch): once the server dies, no further window or level runs; watch.died says when, how
    and in which window.
    shape: the load shape of every level; rates (req/s, open loop; `levels` are then caps, 0 = none) and depths
    (context depth, tokens) are load-side axes: every (rate, depth, level) is a level of its own, rates outermost.
    until_saturated: stop after the first rate the server could not keep up with (saturated()).
    sampler (a started telemetry.Sampler): each window also gets `telemetry` and `server` (and the level's
    first window `warmup_telemetry`).
    rule, log: warm up until steady (hostside/steady.py) instead of one warmup_s run; flag measured windows whose
    server log shows a JIT line.
    """
    results: list[Measurement] = []

    async def scrape() -> dict[str, float] | OSError:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, metrics.scrape, url, metrics_timeout_s)
        except OSError as exc:
            return exc

    def finish(
        window: Window, repeat: int, before: dict[str, float] | OSError | None, after: dict[str, float] | OSError | None
    ) -> None:
        result = _with_counters(window, repeat, before, after)
        results.append(result)
        if on_result:
            on_result(result)

    base = shape or Shape()
    for rate in rates or [base.rate]:
        first = len(results)
        for depth in depths or [base.context_depth]:
            for concurrency in levels:
                if watch and watch.died:
                    return results
                level = dataclasses.replace(base, rate=rate, context_depth=depth)
                rng = _level_rng(seed, concurrency, rate, depth)
                load = _Load(
                    url, model, concurrency, prompt_len, output_len, profile, rng, timeout_s, clock, watch, level
                )
                asyncio.run(_level(load, duration_s, warmup_s, repeats, scrape, finish, sampler, rule, log))
        if until_saturated and rate and saturated(results[first:], rate):
            break
    return results


SATURATED = 0.9  # a rate is past saturation when the server completes less than this share of it


def saturated(windows: Sequence[Window], rate: float) -> bool:
    """Could the server not keep up with `rate`? Median completed requests/s below SATURATED x rate, or requests
    that never started (the cap was full to the window's end)."""
    ok = [w for w in windows if w["ok"]]
    if not ok:
        return True
    served = percentile([w["request_throughput"] for w in ok], 50)
    return served < SATURATED * rate or any(w.get("missed_starts", 0) for w in ok)


def scaled_clock(time_scale: float) -> Clock:
    """The driver's clock for a simulated Spark with an accelerated clock: K times time.monotonic, so windows and
    every reported time are in simulated seconds (a window of 60 lasts 60/K real seconds). 1: the real clock."""
    if not 0 < time_scale <= 10_000:
        raise ValueError(f"time_scale {time_scale} is outside (0, 10000]")
    if time_scale == 1:
        return time.monotonic

    def clock() -> float:
        return time.monotonic() * time_scale

    setattr(clock, "time_scale", time_scale)  # noqa: B010  the open loop's sleeps are real seconds: it reads this
    return clock


def _level_rng(seed: int, concurrency: int, rate: float = 0.0, depth: int = 0) -> random.Random:
    # Seeded per level, so no level replays another's prompts into the server's prefix cache.
    return random.Random(f"{seed}:{concurrency}" + (f":{rate:g}:{depth}" if rate or depth else ""))


def _with_counters(
    window: Window, repeat: int, before: dict[str, float] | OSError | None, after: dict[str, float] | OSError | None
) -> Measurement:
    """The window + metrics_delta + spec_decode_acceptance_rate + repeat; a failed scrape is listed in `errors`,
    deltas stay 0."""
    for scraped in (before, after):
        if isinstance(scraped, Exception):
            window["errors"].append(f"metrics scrape failed: {scraped}")
    if isinstance(before, dict) and isinstance(after, dict):
        counters = metrics.window_counters(before, after)
    else:
        counters = metrics.window_counters({}, {})
    measured = {
        **window,
        "metrics_delta": counters,
        "spec_decode_acceptance_rate": metrics.acceptance_rate(counters),
        "repeat": repeat,
    }
    return cast(Measurement, measured)  # a Window plus the three keys: no before_crash (collect adds it)


# ---------------------------------------------------------------- CLI


def result_filename(concurrency: int, repeat: int, rate: float = 0.0, depth: int = 0) -> str:
    """The window file of a point and repeat (loadpoints.WINDOW is its grammar)."""
    return f"{level_name(concurrency, rate, depth)}-r{repeat}.json"


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--levels takes comma-separated integers, e.g. 1,2,4,8, got {text!r}"
        ) from None
    if not levels or min(levels) < 0:
        raise argparse.ArgumentTypeError(f"--levels needs at least one concurrency >= 1, got {text!r}")
    return levels


def _numbers(kind: type, flag: str) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes comma-separated numbers, got {text!r}") from None
        if not values or min(values) <= 0 or any(v != v or v == float("inf") for v in values):
            raise argparse.ArgumentTypeError(f"{flag} needs finite values > 0, got {text!r}")
        return values

    return parse


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m agent.hostside.loadgen",
        description="Closed-loop streaming load against a vLLM /v1/completions server.",
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="model name as the server knows it")
    p.add_argument("--levels", type=_levels, default=[1], help="concurrency levels, e.g. 1,2,4,8,16")
    p.add_argument("--duration", type=float, default=60.0, help="measurement window, seconds")
    p.add_argument("--warmup", type=float, default=10.0, help="warmup before each level's windows, seconds")
    p.add_argument("--repeats", type=int, default=1, help="measured windows per level")
    p.add_argument("--prompt-len", type=int, default=1024)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--profile", choices=("uniform", "mixed"), default="uniform")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per-request timeout, seconds")
    p.add_argument("--out-dir", default="", help="write one cNNN-rK.json per window here")
    p.add_argument(
        "--request-rate",
        type=_numbers(float, "--request-rate"),
        default=[],
        help="open loop at these requests/s (comma-separated; --levels then caps requests in flight, 0 = no cap)",
    )
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of the arrival gaps; 1 = Poisson")
    p.add_argument("--until-saturated", action="store_true", help="stop the rates at the first the server cannot keep")
    p.add_argument("--dataset", choices=prompts.DATASETS, default="random")
    p.add_argument("--dataset-path", default="", help="ShareGPT-format JSON file (--dataset sharegpt)")
    p.add_argument("--range-ratio", type=float, default=0.0, help="random: lengths within +-this share")
    p.add_argument("--prefix-len", type=int, default=0, help="prefix: shared prefix, tokens")
    p.add_argument("--prefix-group-size", type=int, default=1, help="prefix: prompts per shared prefix")
    p.add_argument("--context-depth", type=_numbers(int, "--context-depth"), default=[], help="prompt tokens axis")
    p.add_argument("--exact-lengths", action="store_true", help="count prompt tokens with the server's /tokenize")
    p.add_argument("--reset-prefix-cache", action="store_true", help="POST /reset_prefix_cache before each window")
    p.add_argument("--goodput", nargs="+", default=[], help="SLOs, e.g. --goodput ttft:500 tpot:50 (milliseconds)")
    p.add_argument("--stagger", action="store_true", help="closed loop: start the clients a lifetime / c apart")
    p.add_argument("--json", action="store_true", help="also put every full result into the summary line")
    return p


def make_shape(
    *,
    prompt_len: int,
    output_len: int,
    profile: str = "uniform",
    rate: float = 0.0,
    burstiness: float = 1.0,
    dataset: str = "random",
    dataset_path: str = "",
    range_ratio: float = 0.0,
    prefix_len: int = 0,
    prefix_group_size: int = 1,
    context_depth: int = 0,
    exact_lengths: bool = False,
    reset_prefix_cache: bool = False,
    goodput: Sequence[str] = (),
    stagger: bool = False,
) -> Shape:
    """The Shape of the [load] settings (the CLI's flags and spark_bench's options are the same names).
    Raises prompts.DatasetError (a missing or malformed dataset file) or slo.SloError before any load."""
    if dataset == "sharegpt":
        prompts.load_sharegpt(dataset_path)
    return Shape(
        rate=rate,
        burstiness=burstiness,
        dataset=prompts.Dataset(
            dataset,
            prompt_len,
            output_len,
            range_ratio=range_ratio or (0.5 if profile == "mixed" else 0.0),
            path=dataset_path,
            prefix_len=prefix_len,
            prefix_group_size=prefix_group_size,
        ),
        context_depth=context_depth,
        exact_lengths=exact_lengths,
        reset_prefix_cache=reset_prefix_cache,
        slos=tuple(slo.parse(goodput).items()),
        stagger=stagger,
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if 0 in args.levels and not args.request_rate:
        parser.error("--levels 0 (no cap) needs --request-rate")
    try:
        shape = make_shape(
            prompt_len=args.prompt_len,
            output_len=args.output_len,
            profile=args.profile,
            burstiness=args.burstiness,
            dataset=args.dataset,
            dataset_path=args.dataset_path,
            range_ratio=args.range_ratio,
            prefix_len=args.prefix_len,
            prefix_group_size=args.prefix_group_size,
            exact_lengths=args.exact_lengths,
            reset_prefix_cache=args.reset_prefix_cache,
            goodput=args.goodput,
            stagger=args.stagger,
        )
    except (prompts.DatasetError, slo.SloError) as exc:
        parser.error(str(exc))
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
    written: list[str] = []

    def save(result: Measurement) -> None:
        if args.out_dir:
            name = result_filename(
                result["concurrency"], result["repeat"], result.get("request_rate", 0.0), result.get("context_depth", 0)
            )
            path = os.path.join(args.out_dir, name)
            atomic.write_json(path, result)
            written.append(path)

    results = run_levels(
        args.url,
        args.model,
        args.levels,
        args.duration,
        args.warmup,
        args.repeats,
        prompt_len=args.prompt_len,
        output_len=args.output_len,
        profile=args.profile,
        seed=args.seed,
        timeout_s=args.timeout,
        on_result=save,
        shape=shape,
        rates=args.request_rate,
        depths=args.context_depth,
        until_saturated=args.until_saturated,
    )
    summary = {
        "ok": all(r["ok"] for r in results),
        "files": written,
        "windows": [
            {
                key: r[key]
                for key in (
                    "concurrency",
                    "request_rate",
                    "context_depth",
                    "repeat",
                    "ok",
                    "error",
                    "output_throughput",
                    "request_throughput",
                    "request_goodput",
                    "completed",
                    "failed",
                )
            }
            for r in results
        ],
    }
    if args.json:
        summary["results"] = results
    print(json.dumps(summary), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
