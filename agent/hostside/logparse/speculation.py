"""Speculative decoding: the method and its token count (from the args, the engine config or 0.4-0.6's Namespace),
where the draft model's own load starts (its kernels are kept apart from the main model's), and the acceptance rate
of every interval the server logged.

Its own family because it is the one read all through serving: the acceptance lines come every few seconds, and
the follower sends them here on its cheap path.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..contracts import SpeculativeFacts
from .attestation import Recorder
from .backend import normalise_backend

MAX_RATES = 10_000  # acceptance-rate intervals kept (27 h of 10 s intervals)
_CONFIG_SPEC = re.compile(r"speculative_config=SpeculativeConfig\(method='([\w-]+)'(?:.*?num_spec_tokens=(\d+))?")
# V0 (0.5-0.8): the draft model stands where the method does; "[ngram]" is the n-gram proposer.
_CONFIG_DRAFT = re.compile(
    r"speculative_config=SpeculativeConfig\(draft_model='?([^',)]{1,300})'?(?:, num_spec_tokens=(\d+))?"
)
_NAMESPACE_SPEC = re.compile(r"[(, ]speculative_model='([^']{1,300})'")
_NAMESPACE_SPEC_TOKENS = re.compile(r"[(, ]num_speculative_tokens=(\d{1,4})\b")
_DRAFT_START = re.compile(r"Loading (?:drafter|draft) model")
# Every version's wording: V0 "Speculative metrics: Draft acceptance rate: 0.651" (a fraction), 0.8-0.9 V1
# "SpecDecoding metrics: Draft acceptance rate: 57.1%", 0.10+ "... Avg Draft acceptance rate: 72.9%", and lines
# that give only the counts ("Accepted: 245 tokens, Drafted: 300 tokens").
_ACCEPT_RATE = re.compile(r"Draft acceptance rate: ([\d.]{1,20})(%?)")
_ACCEPT_COUNTS = re.compile(r"Accepted: (\d{1,20}) tokens, Drafted: (\d{1,20}) tokens")


def from_args(spec: SpeculativeFacts, args: dict[str, Any]) -> None:
    """What the non-default args asked for: --speculative-config (method, tokens, the draft's MoE backend), or the
    0.5-0.8 flags."""
    if isinstance(args.get("speculative_model"), str):  # 0.5-0.8 flags: --speculative-model X
        spec["method"] = spec["method"] or _draft_method(args["speculative_model"])
        if isinstance(args.get("num_speculative_tokens"), int):
            spec["num_speculative_tokens"] = args["num_speculative_tokens"]
    conf = args.get("speculative_config")
    if isinstance(conf, str):
        try:
            conf = json.loads(conf)
        except (ValueError, RecursionError):  # deep nesting is as bad as bad JSON
            conf = None
    if not isinstance(conf, dict):
        return
    spec["method"] = str(conf.get("method") or spec["method"])
    if isinstance(conf.get("num_speculative_tokens"), int):
        spec["num_speculative_tokens"] = conf["num_speculative_tokens"]
    if conf.get("moe_backend"):
        spec["requested_moe_backend"] = normalise_backend(str(conf["moe_backend"]))


def from_engine_config(spec: SpeculativeFacts, config: str) -> None:
    """The method and token count the engine config line names (V0: the draft model)."""
    m = _CONFIG_SPEC.search(config) or _CONFIG_DRAFT.search(config)
    if m and not spec["method"] and m.group(1) != "None":
        spec["method"] = m.group(1) if m.re is _CONFIG_SPEC else _draft_method(m.group(1))
        if m.group(2):
            spec["num_speculative_tokens"] = int(m.group(2))


def from_namespace(spec: SpeculativeFacts, msg: str) -> None:
    """0.4-0.6's Namespace: --speculative-model and --num-speculative-tokens."""
    m = _NAMESPACE_SPEC.search(msg)
    if m and not spec["method"]:
        spec["method"] = _draft_method(m.group(1))
        m = _NAMESPACE_SPEC_TOKENS.search(msg)
        spec["num_speculative_tokens"] = int(m.group(1)) if m else spec["num_speculative_tokens"]


def _draft_method(draft: str) -> str:
    """The method of a V0 speculative draft model: "[ngram]" is the n-gram proposer, anything else a draft model."""
    return "ngram" if "ngram" in draft.lower() else "draft_model"


class SpeculationLines(Recorder):
    """The draft model's load (its kernel lines follow) and the acceptance lines."""

    def _draft_start(self, msg: str, line: str) -> bool:
        if not _DRAFT_START.search(msg):
            return False
        self._in_draft = True
        self._evidence("draft_load", line)
        return True

    def _acceptance_note(self, msg: str) -> bool:
        if "acceptance rate" not in msg and "Drafted: " not in msg:
            return False
        self._acceptance(msg)
        return True

    def _acceptance(self, raw: str) -> None:
        m = _ACCEPT_RATE.search(raw)
        if m:
            try:
                value = float(m.group(1))
            except ValueError:
                return
            self._rate(round(value / 100.0, 6) if m.group(2) else value)
            return
        m = _ACCEPT_COUNTS.search(raw)
        if m and int(m.group(2)) > 0:
            self._rate(round(int(m.group(1)) / int(m.group(2)), 6))

    def _rate(self, rate: float) -> None:
        rates = self._f["spec_acceptance_rates"]
        if len(rates) < MAX_RATES:
            rates.append(rate)
        else:
            self.items_dropped += 1
