"""How fast the simulated GPU decodes: step time per concurrency, speculative acceptance, TTFT and noise.

All numbers come from calibration.toml. Noise comes in two layers, as on a real machine:
- between server starts (compile and autotune outcomes, memory layout): one speed factor per start, drawn from a
  generator seeded by --sim-seed and the cell the start serves (start_factor), so a fixed seed replays every start
  and two starts of one config (two cell ids) differ;
- between windows of one start: one seeded generator, drawn once per load phase (a phase starts when requests
  arrive after the server was idle for `phase_idle_s`), so each measurement window sees its own draw.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping

from . import calibration
from .plan import Plan


def solve_prefix_acceptance(rate: float, k: int) -> float:
    """Per-position acceptance q such that accepted/drafted = rate when drafts are accepted as a prefix.

    With prefix acceptance, E[accepted] = q + q^2 + ... + q^k, and vLLM's rate is E[accepted] / k.
    """
    low, high = 0.0, 1.0
    for _ in range(60):
        q = (low + high) / 2
        if sum(q**j for j in range(1, k + 1)) / k < rate:
            low = q
        else:
            high = q
    return (low + high) / 2


class RateModel:
    def __init__(self, plan: Plan, unlimited: bool, rng: random.Random, time_scale: float = 1.0):
        cal = calibration.load()
        self.rng = rng
        self.time_scale = time_scale  # the accelerated clock: K times the tokens per real second, 1/K the TTFT
        self.unlimited = unlimited
        self.hw = cal["hardware"][plan.hardware]
        # a checkpoint with its own measured rates on this hardware (checkpoint_rates) uses them, else the chip's
        own = self.hw.get("checkpoint_rates", {}).get(plan.checkpoint, {}).get(plan.quant, {})
        self.curve = own.get(plan.moe_loaded) or self.hw["moe"][plan.quant][plan.moe_loaded]
        self.speed = cal["checkpoints"][plan.checkpoint]["speed"]
        self.spec_tokens = plan.spec_tokens
        self.acceptance = cal["checkpoints"][plan.checkpoint]["spec_acceptance"] if plan.spec_tokens else 0.0
        self.q = solve_prefix_acceptance(self.acceptance, plan.spec_tokens) if plan.spec_tokens else 0.0
        self.mixed_spread = cal["load_profiles"]["mixed_spread"]
        self.backend_mult = 1.0
        self.mixed_mult = 1.0
        self.start_mult = 1.0  # this server start's own speed (start_factor)
        # multi-node (sim/cluster.py): TP splits the weights read per step; the link adds its all-reduce time
        self.compute_scale = 1.0
        self.comm_s: Callable[[int], float] = lambda concurrency: 0.0
        self.new_phase()

    def new_phase(self) -> None:
        """Draw this measurement window's noise: the backend's run-to-run spread, and the mixed-load spread."""
        curve = self.curve
        if "noise_low" in curve:  # wide, skewed spread (b12x): log-uniform between the bounds
            low, high = math.log(1 - curve["noise_low"]), math.log(1 + curve["noise_high"])
            self.backend_mult = math.exp(self.rng.uniform(low, high))
        else:
            self.backend_mult = 1 + self.rng.uniform(-curve["noise"], curve["noise"])
        self.mixed_mult = 1 + self.rng.uniform(-self.mixed_spread, self.mixed_spread)

    def aggregate_tok_s(self, concurrency: int, mixed: bool = False) -> float:
        """Decode tokens/s of all streams together without speculative decoding."""
        base = calibration.interpolate(self.curve["c"], self.curve["tok_s"], max(1, concurrency))
        return base * self.speed * self.start_mult * self.backend_mult * (self.mixed_mult if mixed else 1.0)

    def step_s(self, concurrency: int, mixed: bool = False) -> float:
        """Duration of one decode step (every running sequence advances by one token plus accepted drafts)."""
        if self.unlimited:
            return 0.0
        per_stream = self.aggregate_tok_s(concurrency, mixed) / max(1, concurrency)
        cost = 1.0
        if self.spec_tokens:
            table = self.hw["spec_step_cost"]
            cost = calibration.interpolate(table["c"], table["cost"], concurrency)
        return (cost / per_stream * self.compute_scale + self.comm_s(concurrency)) / self.time_scale

    def ttft_s(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """Prefill time: the base, plus the tokens not found in the prefix cache at the prompt length's cost."""
        if self.unlimited:
            return 0.0
        table = self.hw.get("long_prompt")
        cost = calibration.interpolate(table["tokens"], table["prefill_cost"], prompt_tokens) if table else 1.0
        prefill = self.hw["ttft_base_s"] + cost * max(0, prompt_tokens - cached_tokens) / self.hw["prefill_tok_s"]
        return prefill / self.time_scale

    def accepted_drafts(self) -> int:
        """Draft tokens accepted in one step (a prefix of the k drafts)."""
        accepted = 0
        while accepted < self.spec_tokens and self.rng.random() < self.q:
            accepted += 1
        return accepted

    def expected_tok_s(self, concurrency: int) -> float:
        """Noise-free aggregate throughput incl. speculative decoding: what the calibration promises."""
        base = calibration.interpolate(self.curve["c"], self.curve["tok_s"], max(1, concurrency)) * self.speed
        if not self.spec_tokens:
            return base
        table = self.hw["spec_step_cost"]
        cost = calibration.interpolate(table["c"], table["cost"], concurrency)
        return base * (1 + self.spec_tokens * self.acceptance) / cost


def start_noise(sim: Mapping[str, object], hw: Mapping[str, object]) -> float:
    """The between-start spread: --sim-start-noise, else the hardware's `start_noise` in calibration.toml. Like a
    curve's `noise`, 0.10 means a factor drawn uniformly from 0.9 to 1.1."""
    given = sim.get("start_noise")
    return float(given if given is not None else hw.get("start_noise", 0.0))  # type: ignore[arg-type]


def start_factor(noise: float, seed: int, start: str) -> float:
    """One server start's speed factor, uniform in 1 +- `noise`, from a generator of its own seeded by the sim seed
    and `start` (the cell id the supervisor marks the server with), never the window generator's stream."""
    if noise <= 0:
        return 1.0
    return 1 + random.Random(f"{seed}:{start}").uniform(-noise, noise)
