"""Checks of a launch that read only the launch and the rules: the `[[recipe]]` entries of rules/env.toml (several
variables a community recipe sets together whose meaning flags now say), and a `--quantization` that contradicts the
checkpoint's own quant. `lint` adds what these find to its findings and its fixed launch.

Each check returns plain `Check`s (rule, severity, message, line, fix) so that this module needs nothing of
judging/: commands/lint.py turns them into lint's findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.planning import envrules
from agent.planning.launch import Launch


@dataclass(frozen=True)
class Check:
    rule: str
    severity: str  # note | warning | error
    message: str
    line: int
    fix: str = ""


def recipes(launch: Launch, fixed: Launch, version_text: str, rules: dict[str, Any]) -> list[Check]:
    """Each recipe the launch sets (at least `min` of its variables with their values): replaced in `fixed` by its
    flags where the vLLM version knows them; a flag the launch already chose is kept."""
    out: list[Check] = []
    version = envrules.parse_version(version_text)
    for recipe in rules.get("recipe", []):
        present = [n for n, v in recipe["env"].items() if launch.env.get(n, "").lower() == str(v).lower()]
        if len(present) < recipe["min"]:
            continue
        line = min((launch.env_lines.get(n, 0) for n in present), default=0) or launch.line
        flags = " ".join(f"{flag} {value}" for flag, value in recipe["flags"].items())
        said = f"{recipe['name']} ({', '.join(f'{n}={launch.env[n]}' for n in present)})"
        if version is None:
            out.append(
                Check(
                    recipe["id"],
                    "note",
                    f"{said}: from vLLM {recipe['vllm']} {flags} say it; "
                    f"pass --vllm-version to have --fix rewrite it: {recipe['reason']}",
                    line,
                )
            )
            continue
        if not envrules.in_range(version, recipe["vllm"]):
            continue
        for name in present:
            fixed.env.pop(name, None)
        kept = []
        for flag, value in recipe["flags"].items():
            if launch.flag(flag) is None and fixed.flag(flag) is None:
                fixed.set_flag(flag, str(value))
            elif launch.flag(flag) is not None:
                kept.append(f"{flag} {launch.flag(flag)}")
        fix = f"drop {', '.join(present)}; use {flags}" + (f" (keeping {', '.join(kept)})" if kept else "")
        out.append(
            Check(
                recipe["id"],
                "warning",
                f"{said}: vLLM {version_text} says it with {flags}: {recipe['reason']}",
                line,
                fix,
            )
        )
    return out


def quant_conflict(flag_quant: str, own_quant: str, own_source: str, launch: Launch) -> list[Check]:
    """`--quantization X` where the checkpoint says Y (its config, or its name: then a warning, a guess)."""
    if not flag_quant or not own_quant or flag_quant == own_quant:
        return []
    severity = "warning" if own_source == "name" else "error"
    where = {"name": "its name", "hub": "its config.json on the hub"}.get(own_source, "its config.json")
    return [
        Check(
            "quantization-contradicts-checkpoint",
            severity,
            f"--quantization {launch.flag('--quantization') or launch.flag('-q')} asks for {flag_quant}, but "
            f"{launch.model} is {own_quant} by {where}: vLLM refuses a quantization that does not match the "
            "checkpoint's (or loads it wrong); drop --quantization: vLLM reads the checkpoint's own",
            launch.line,
        )
    ]
