"""The simulated engine core: a scheduler that decodes running requests in steps, in real time.

Admission order is FIFO, so open-loop arrivals beyond --max-num-seqs wait (their TTFT grows) as they do in
vLLM's scheduler; a prompt's leading blocks found in the prefix cache are not prefilled again (prefixcache.py).

Like vLLM, every running sequence advances once per decode step; the step time comes from the rate model
at the current number of running requests, so throughput is observed, not reported. --max-num-seqs caps
the running set; the rest wait in FIFO order.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from . import calibration
from .prefixcache import PrefixCache
from .ratemodel import RateModel


class Sink(Protocol):
    """Where a request's tokens go (streams.Stream)."""

    def emit(self, n: int, finish: str | None) -> None: ...
    def flush(self) -> None: ...
    def drop(self) -> None: ...
    def gone(self) -> bool: ...


@dataclass
class Request:
    prompt_tokens: int
    max_tokens: int
    stop_at: int  # the "natural" length: finish_reason stop; max_tokens + 1 with ignore_eos
    sink: Sink
    drop_at: int = 0  # fault: cut the stream after this many tokens (0 = never)
    generated: int = 0
    ready_at: float = 0.0  # end of prefill: the first token can come after this
    done: asyncio.Future[str] | None = None  # set by Engine.submit; resolves to the finish reason
    words: list[str] = field(default_factory=list)  # the prompt's tokens (the prefix cache's key)
    cached_tokens: int = 0  # found in the prefix cache at admission: prefill skips them


@dataclass
class Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list = field(default_factory=list)
    preemptions: int = 0


class Engine:
    def __init__(
        self,
        rate: RateModel,
        max_num_seqs: int,
        kv_tokens: int,
        rng: random.Random,
        drop_fraction: float = 0.0,
        prefix_caching: bool = True,
    ):
        cal = calibration.load()
        self.prefix_cache = PrefixCache(kv_tokens, cal["prefix_block_tokens"], prefix_caching)
        self.rate, self.rng = rate, rng
        self.max_num_seqs, self.kv_tokens = max_num_seqs, max(1, kv_tokens)
        self.drop_fraction = drop_fraction
        self.phase_idle_s = cal["phase_idle_s"]
        self.mixed_ratio = cal["load_profiles"]["mixed_length_ratio"]
        self.steps_per_tick = cal["unlimited_steps_per_tick"]
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.counters = Counters(accepted_per_pos=[0] * rate.spec_tokens)
        self.wake = asyncio.Event()
        self.idle_since = 0.0
        self.phase_lengths: set = set()
        self.step_end: float | None = None
        self.max_lag_s = 1.0  # catch up on missed steps for at most this long
        self.slowdown = 1.0  # decode speed as a fraction of normal (gpu.publish lowers it while throttled)
        self.compiling = 1.0  # likewise, while kernels JIT-compile (the JIT fault, sim/jit.py)
        self.dead = False
        self.submitted = 0  # completion requests received so far (the crash-at-request fault counts them)
        self.on_submit: Callable[[int], None] | None = None  # called with the running count after each submit

    # -- admission ----------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        loop = asyncio.get_running_loop()
        req.done = loop.create_future()
        if not self.running and not self.waiting and loop.time() - self.idle_since >= self.phase_idle_s:
            self.rate.new_phase()
            self.phase_lengths = set()
        self.phase_lengths.add((req.prompt_tokens, req.max_tokens))
        if self.drop_fraction and self.rng.random() < self.drop_fraction:
            req.drop_at = max(1, min(req.max_tokens, req.stop_at) // 2)
        self.waiting.append(req)
        self.wake.set()
        self.submitted += 1
        if self.on_submit:
            self.on_submit(self.submitted)

    def _used(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self.running)

    def _admit(self, now: float) -> None:
        # vLLM's scheduler: a request is admitted while the KV cache has room for its prompt; when decoding runs the
        # cache full, the newest request is preempted (back to the queue, recomputed later)
        while len(self.running) > 1 and self._used() > self.kv_tokens:
            req = self.running.pop()
            self.waiting.appendleft(req)
            self.counters.preemptions += 1
        while self.waiting and len(self.running) < self.max_num_seqs:
            if self.running and self._used() + self.waiting[0].prompt_tokens > self.kv_tokens:
                break
            req = self.waiting.popleft()
            req.cached_tokens = self.prefix_cache.admit(req.words)
            req.ready_at = now + self.rate.ttft_s(req.prompt_tokens, req.cached_tokens)
            self.counters.prompt_tokens += req.prompt_tokens
            self.running.append(req)

    def mixed(self) -> bool:
        """A phase is 'mixed' load when its requests' lengths differ (see calibration: load_profiles)."""
        if len(self.phase_lengths) < 2:
            return False
        prompts = [p for p, _ in self.phase_lengths]
        outputs = [o for _, o in self.phase_lengths]
        return max(prompts) > self.mixed_ratio * min(prompts) or max(outputs) > self.mixed_ratio * min(outputs)

    # -- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.dead:
            self._reap()
            if not self.running and not self.waiting:
                self.idle_since = loop.time()
                self.step_end = None
                self.wake.clear()
                await self.wake.wait()
                continue
            self._admit(loop.time())
            if self.rate.unlimited:
                for _ in range(self.steps_per_tick):
                    self._step(loop.time())
                self._flush()
                await asyncio.sleep(0)
            else:
                await self._timed_step(loop)

    async def _timed_step(self, loop) -> None:
        now = loop.time()
        first_ready = min(r.ready_at for r in self.running)
        if first_ready > now:  # everyone is still in prefill: wait for it, or for a new arrival
            self.step_end = None
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), first_ready - now)
            return
        dt = self.rate.step_s(len(self.running), self.mixed()) / (self.slowdown * self.compiling)
        if self.step_end is None or self.step_end < now - self.max_lag_s:
            self.step_end = now  # (re)start the clock: after a pause, or when hopelessly behind
        started = self.step_end
        self.step_end += dt
        # When the process was starved the deadline has passed: the missed steps run back to back (the
        # GPU would not have waited), yielding to I/O between them.
        await asyncio.sleep(max(0.0, self.step_end - loop.time()))
        self._step(started)
        self._flush()

    def _step(self, started: float) -> None:
        """One decode step for every sequence that finished prefill before the step started."""
        for req in list(self.running):
            if req.ready_at <= started and req in self.running:
                self._advance(req)

    def _advance(self, req: Request) -> None:
        accepted = self._speculate()
        n = min(1 + accepted, req.max_tokens - req.generated, req.stop_at - req.generated)
        req.generated += n
        self.counters.generation_tokens += n
        if req.drop_at and req.generated >= req.drop_at:
            req.sink.emit(n, None)
            req.sink.flush()
            req.sink.drop()
            self._finish(req, "abort")
            return
        finish = "length" if req.generated >= req.max_tokens else "stop" if req.generated >= req.stop_at else None
        req.sink.emit(n, finish)
        if finish:
            self._finish(req, finish)

    def _speculate(self) -> int:
        k = self.rate.spec_tokens
        if not k:
            return 0
        accepted = self.rate.accepted_drafts()
        c = self.counters
        c.drafts += 1
        c.draft_tokens += k
        c.accepted_tokens += accepted
        for pos in range(accepted):
            c.accepted_per_pos[pos] += 1
        return accepted

    def _finish(self, req: Request, reason: str) -> None:
        self.running.remove(req)
        self.counters.success[reason] += 1
        if req.done and not req.done.done():
            req.done.set_result(reason)

    def _flush(self) -> None:
        for req in self.running:
            req.sink.flush()

    def _reap(self) -> None:
        """Drop requests whose client went away (vLLM aborts them)."""
        for req in [r for r in self.running if r.sink.gone()]:
            self._finish(req, "abort")
        for req in [r for r in self.waiting if r.sink.gone()]:
            self.waiting.remove(req)
            if req.done and not req.done.done():
                req.done.set_result("abort")

    def kill(self) -> None:
        """The engine died: every request ends now, broken."""
        self.dead = True
        for req in self.running + list(self.waiting):
            req.sink.drop()
            if req.done and not req.done.done():
                req.done.set_result("abort")
        self.running.clear()
        self.waiting.clear()
        self.wake.set()

    # -- observation --------------------------------------------------------------------------
    def kv_usage(self) -> float:
        return min(1.0, self._used() / self.kv_tokens)
