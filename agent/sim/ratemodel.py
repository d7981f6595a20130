"""How fast the simulated GPU decodes: step time per concurrency, speculative acceptance, TTFT and noise.

All numbers come from calibration.toml. Noise comes from one seeded generator, drawn once per load phase
(a phase starts when requests arrive after the server was idle for `phase_idle_s`), so each measurement
window of a sweep (each repeat of a cell) sees its own draw, and a fixed --sim-seed replays them.
"""

from __future__ import annotations

import math
import random

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
        self.curve = self.hw["moe"][plan.quant][plan.moe_loaded]
        self.speed = cal["checkpoints"][plan.checkpoint]["speed"]
        self.spec_tokens = plan.spec_tokens
        self.acceptance = cal["checkpoints"][plan.checkpoint]["spec_acceptance"] if plan.spec_tokens else 0.0
        self.q = solve_prefix_acceptance(self.acceptance, plan.spec_tokens) if plan.spec_tokens else 0.0
        self.mixed_spread = cal["load_profiles"]["mixed_spread"]
        self.backend_mult = 1.0
        self.mixed_mult = 1.0
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
        return base * self.speed * self.backend_mult * (self.mixed_mult if mixed else 1.0)

    def step_s(self, concurrency: int, mixed: bool = False) -> float:
        """Duration of one decode step (every running sequence advances by one token plus accepted drafts)."""
        if self.unlimited:
            return 0.0
        per_stream = self.aggregate_tok_s(concurrency, mixed) / max(1, concurrency)
        cost = 1.0
        if self.spec_tokens:
            table = self.hw["spec_step_cost"]
            cost = calibration.interpolate(table["c"], table["cost"], concurrency)
        return cost / per_stream / self.time_scale

    def ttft_s(self, prompt_tokens: int) -> float:
        if self.unlimited:
            return 0.0
        return (self.hw["ttft_base_s"] + prompt_tokens / self.hw["prefill_tok_s"]) / self.time_scale

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
