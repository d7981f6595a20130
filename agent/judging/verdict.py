"""Requested vs loaded -> valid / invalid / failed.

A cell is only as good as what really ran. For each axis the spec pinned (moe, linear, attention, the
draft model's moe) the backend vLLM logged must be the one asked for; an environment variable the spec
set must not be one vLLM called unknown ("dead variable"). INVALID cells keep their numbers, marked, and
are never ranked or recommended. A server that never became ready is FAILED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from agent.hostside.logparse import ENDED_BEFORE_READY, linear_backend_of, normalise_backend

AXES = ("moe_backend", "linear_backend", "attention_backend", "draft_moe_backend")
_SHORT = {
    "moe": "moe_backend",
    "linear": "linear_backend",
    "attention": "attention_backend",
    "attn": "attention_backend",
    "draft_moe": "draft_moe_backend",
    "draft": "draft_moe_backend",
}


class Verdict(TypedDict):
    verdict: str  # valid | invalid | failed
    reasons: list[str]
    evidence: list[str]  # the log lines behind the reasons
    notes: list[str]  # worth knowing, not invalidating


def axis_name(name: str) -> str:
    """`moe` / `moe_backend` -> `moe_backend`; "" for a name that is no axis."""
    key = name.strip().lower().replace("-", "_")
    return key if key in AXES else _SHORT.get(key, "")


def judge(requested: Mapping[str, str], facts: Mapping[str, Any], env_set: Sequence[str]) -> Verdict:
    """{verdict, reasons, evidence, notes}. `requested` has the AXES ("" = auto, no claim); `facts` is
    logparse.parse()'s; `env_set` the variables the spec set for the server."""
    failure = facts.get("failure") or {}
    reasons, evidence = _mismatches(requested, facts, env_set)
    # A log that ends before readiness (an excerpt too) is never valid: it proves no start. What it does show
    # still counts: a backend other than the one asked for makes it invalid, said first.
    if failure and not (reasons and failure.get("class") == ENDED_BEFORE_READY):
        reason = f"failed: {failure.get('class', 'other')}: {failure.get('root_cause', '')}".rstrip(": ")
        return Verdict(
            verdict="failed", reasons=[reason], evidence=list(failure.get("evidence", [])), notes=notes(facts)
        )
    runtime = facts.get("runtime_failure") or {}
    if runtime and not facts.get("failure"):  # a crash while serving: the start was over, the server died after it
        cause = f"{runtime.get('class', 'other')}: {runtime.get('root_cause', '')}".rstrip(": ")
        return Verdict(
            verdict="failed",
            reasons=[*reasons, f"died while serving (a runtime failure, not a failed start): {cause}"],
            evidence=_unique(evidence + list(runtime.get("evidence", []))),
            notes=notes(facts, env_set),
        )
    return Verdict(
        verdict="invalid" if reasons else "valid",
        reasons=reasons,
        evidence=_unique(evidence),
        notes=notes(facts, env_set) + (["the log ends before the server was ready"] if failure else []),
    )


def _mismatches(
    requested: Mapping[str, str], facts: Mapping[str, Any], env_set: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(reasons, evidence): each pinned axis that loaded something else, and each dead variable the spec set."""
    reasons: list[str] = []
    evidence: list[str] = []
    for axis, check in (
        ("moe_backend", _moe),
        ("linear_backend", _linear),
        ("attention_backend", _attention),
        ("draft_moe_backend", _draft_moe),
    ):
        want = normalise_backend(str(requested.get(axis, "") or ""))
        if want:
            reasons += check(want, facts)
            evidence += _axis_evidence(axis, facts)
    unknown = set(facts.get("unknown_env", []))
    for var in env_set:
        if var in unknown:
            reasons.append(f"dead variable: {var} (vLLM {facts.get('vllm_version') or '?'} does not know it)")
            evidence.append((facts.get("evidence") or {}).get("unknown_env:" + var, var))
    return reasons, evidence


def requested_from_args(facts: Mapping[str, Any]) -> dict[str, str]:
    """What the server was asked for, read from its own `non-default args` line (for logs without a spec)."""
    args = facts.get("non_default_args") or {}
    spec = facts.get("speculative") or {}
    return {
        "moe_backend": str(args.get("moe_backend", "") or ""),
        "linear_backend": str(args.get("linear_backend", "") or ""),
        "attention_backend": str(args.get("attention_backend", "") or ""),
        "draft_moe_backend": str(spec.get("requested_moe_backend", "") or ""),
    }


def notes(facts: Mapping[str, Any], env_set: Sequence[str] = ()) -> list[str]:
    """Things worth knowing that do not invalidate a cell."""
    out = []
    if facts.get("confidence") == "low":
        out.append("an excerpt, read with lower confidence: " + "; ".join(facts.get("repairs") or ["no vLLM prefix"]))
    if any("emulation" in line for line in facts.get("linear_fallbacks", [])):
        out.append("NVFP4 linear layers run on the slow emulation backend")
    if facts.get("autotuner_cliff_count", 0) > 0:
        out.append(f"FlashInfer autotuner perf-cliff warnings: {facts['autotuner_cliff_count']}")
    if facts.get("jit_warning_count", 0) > 0:
        out.append(f"JIT compilations during inference: {facts['jit_warning_count']}")
    others = [v for v in facts.get("unknown_env", []) if v not in env_set]
    if others:
        out.append("variables vLLM does not know (not set by the spec): " + ", ".join(others))
    return out


def _moe(want: str, facts: Mapping[str, Any]) -> list[str]:
    return _compare("moe", want, facts.get("moe_backend", ""), facts.get("moe_backend_raw", ""))


def _attention(want: str, facts: Mapping[str, Any]) -> list[str]:
    got = facts.get("attention_backend", "")
    return _compare("attention", want, got, got)


def _draft_moe(want: str, facts: Mapping[str, Any]) -> list[str]:
    spec = facts.get("speculative") or {}
    return _compare("draft moe", want, spec.get("draft_moe_backend", ""), spec.get("draft_moe_backend_raw", ""))


def _linear(want: str, facts: Mapping[str, Any]) -> list[str]:
    """--linear-backend falls back per layer with a warning; any fallback or other kernel means not all of it."""
    reasons = [f"linear: requested {want}, vLLM fell back: {w}" for w in facts.get("linear_fallbacks", [])]
    kernels = facts.get("linear_kernels", [])
    others = [k for k in kernels if linear_backend_of(k) != want]
    if others:
        reasons.append(f"linear: requested {want}, loaded {', '.join(others)}")
    if facts.get("marlin_fp4_weight_only") and want != "marlin":
        reasons.append(f"linear: requested {want}, vLLM used Marlin weight-only FP4")
    if not kernels and not reasons:
        reasons.append(f"linear: requested {want}, the log does not say which GEMM kernel loaded")
    return reasons


def _compare(label: str, want: str, got: str, raw: str) -> list[str]:
    if not got:
        return [f"{label}: requested {want}, the log does not say which backend loaded"]
    if got != want:
        return [f"{label}: requested {want}, loaded {raw or got}"]
    return []


def _axis_evidence(axis: str, facts: Mapping[str, Any]) -> list[str]:
    ev = facts.get("evidence") or {}
    keys = {
        "moe_backend": ("moe",),
        "linear_backend": ("linear", "linear_fallback", "marlin_fp4"),
        "attention_backend": ("attention",),
        "draft_moe_backend": ("draft_load", "draft_moe"),
    }[axis]
    return [ev[k] for k in keys if ev.get(k)]


def _unique(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def attest(text: str, requested: Mapping[str, str] | None = None, env_set: Sequence[str] = ()) -> dict[str, Any]:
    """A log a user already has: {facts, requested, verdict}. Axes not in `requested` are taken from the
    log's own non-default args, so a server that ignored its flags is caught without a spec."""
    from agent.hostside.logparse import parse

    return attest_facts(parse(text), requested, env_set)


def attest_facts(
    facts: Mapping[str, Any], requested: Mapping[str, str] | None = None, env_set: Sequence[str] = ()
) -> dict[str, Any]:
    """attest() of facts already parsed (e.g. by logparse.parse_file, which streams a big log)."""
    asked = requested_from_args(facts)
    asked.update({k: v for k, v in (requested or {}).items() if k in AXES})
    return {"facts": facts, "requested": asked, "verdict": judge(asked, facts, list(env_set))}
