"""The server environment of a cell, from agent/rules/env.toml: GPU arch × quant format × vLLM version.

Model cards disagree and carry dead variables; the rules say what a GB10 really needs. Every variable
set, overridden by the spec, or dropped is recorded with the rule and reason behind it (the cell's
[[env_provenance]] rows). Pure: the only I/O is reading the rule files once.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from agent.errors import UserError
from agent.hostside import facts as hostfacts
from agent.hostside.contracts import Facts
from agent.paths import BACKEND_RULES, ENV_RULES, MULTINODE_RULES, VLLM_ENV_RULES


class EnvProvenance(TypedDict):
    """One [[env_provenance]] row of cell.toml: a variable set, overridden or dropped, and the rule that did it."""

    name: str
    value: str
    action: str  # set | override | drop
    rule: str
    reason: str


@dataclass
class EnvResult:
    env: dict[str, str] = field(default_factory=dict)  # the final environment
    provenance: list[EnvProvenance] = field(default_factory=list)  # the [[env_provenance]] rows of cell.toml
    warnings: list[str] = field(default_factory=list)


# --- rule files (cached) ---------------------------------------------------------------------------


@functools.cache
def env_rules(path: Path = ENV_RULES) -> dict:
    with open(path, "rb") as handle:
        return tomllib.load(handle)


def with_arch(facts: Facts) -> Facts:
    """Host facts with arch/sm filled by the controller's gpus.toml when the host could not classify."""
    return facts if facts.get("arch") else hostfacts.classify_gpu(facts, hostfacts.load_gpu_rules())


def arch_of(facts: Facts) -> str:
    """The arch a host reported, else the controller's own classification of its GPU."""
    return with_arch(facts)["arch"]


# --- versions --------------------------------------------------------------------------------------


Version = tuple[int, int, int]


def parse_version(text: str) -> Version | None:
    """(major, minor, patch) of "0.24.0", "v0.24.1rc2", "0.11.1.dev3+gabc"; None when unreadable."""
    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return (int(match[1]), int(match[2]), int(match[3] or 0)) if match else None


def in_range(version: tuple[int, int, int], spec: str) -> bool:
    """Whether version fits every clause of a range such as ">=0.22,<0.24" ("" fits all)."""
    compare = {">=": tuple.__ge__, ">": tuple.__gt__, "<=": tuple.__le__, "<": tuple.__lt__, "==": tuple.__eq__}
    for clause in filter(None, (part.strip() for part in spec.split(","))):
        match = re.fullmatch(r"(>=|<=|==|>|<)\s*(\S+)", clause)
        bound = parse_version(match[2]) if match else None
        if match is None or bound is None:
            raise ValueError(f"bad version range clause {clause!r} in {spec!r}")
        if not compare[match[1]](version, bound):
            return False
    return True


def _applies(entry: dict[str, Any], arch: str, quant: str, version: Version | None) -> bool:
    """Arch and quant conditions fit, and the version one fits (False when the version is unknown)."""
    if "arch" in entry and arch not in entry["arch"]:
        return False
    if "quant" in entry and quant not in entry["quant"]:
        return False
    if entry.get("vllm"):
        return version is not None and in_range(version, entry["vllm"])
    return True


# --- the variables vLLM reads (agent/rules/vllm_env.toml) ------------------------------------------------


@functools.cache
def vllm_env_rules(path: Path = VLLM_ENV_RULES) -> list[dict[str, Any]]:
    """The [[version]] entries of vllm_env.toml, oldest release first."""
    with open(path, "rb") as handle:
        versions = tomllib.load(handle).get("version", [])
    return sorted(versions, key=lambda entry: parse_version(entry["vllm"]) or (0, 0, 0))


def vllm_env_names(version: Version | None) -> tuple[frozenset[str], str]:
    """The VLLM_* names vLLM reads at this version, and the listed releases that say so (for messages).

    A listed release: its names. Between two listed releases: either's (a name added or removed in between is
    not flagged). Past the newest: the newest's. Before the oldest, or unknown: any listed release's.
    """
    entries = vllm_env_rules()
    if not entries:
        return frozenset(), ""
    listed = [(parse_version(entry["vllm"]), entry) for entry in entries]
    span = f"{entries[0]['vllm']}-{entries[-1]['vllm']}"
    if version is None or version < (listed[0][0] or (0, 0, 0)):
        return frozenset(name for entry in entries for name in entry["names"]), f"any listed release ({span})"
    below = [entry for v, entry in listed if v is not None and v <= version]
    above = [entry for v, entry in listed if v is not None and v > version]
    if below and parse_version(below[-1]["vllm"]) == version:
        return frozenset(below[-1]["names"]), below[-1]["vllm"]
    if not above:
        return frozenset(below[-1]["names"]), f"{below[-1]['vllm']} (the newest listed)"
    around = [below[-1], above[0]]
    names = frozenset(name for entry in around for name in entry["names"])
    return names, f"{around[0]['vllm']} or {around[1]['vllm']} (the listed releases around it)"


# --- resolution ------------------------------------------------------------------------------------


def resolve_env(facts: Facts, quant: str, vllm_version: str, overrides: dict[str, str]) -> EnvResult:
    """The environment for a cell on a host with these facts.

    vllm_version "" means unknown (pass the spec's image version when there is one): then only
    version-independent rules apply, and a warning says so. `overrides` are the spec's own env.
    """
    rules = env_rules()
    arch, quant = arch_of(facts), (quant or "").lower()
    result = EnvResult()
    version = _read_version(vllm_version, result.warnings)
    if not arch:
        result.warnings.append(_no_arch_warning(facts))
    set_by: dict[str, dict] = {}
    for rule in rules.get("rule", []):
        if _applies(rule, arch, quant, version):
            for name, value in rule["set"].items():
                set_by[name] = rule
                result.env[name] = str(value)
    for name, rule in set_by.items():
        if name not in overrides:
            _record(result, name, result.env[name], "set", rule["id"], rule["reason"])
    for name, value in overrides.items():
        _apply_override(result, name, str(value), set_by.get(name), version, rules.get("dead", []))
    return result


def _read_version(vllm_version: str, warnings: list[str]) -> Version | None:
    version = parse_version(vllm_version)
    if vllm_version and version is None:
        warnings.append(f"cannot read vLLM version {vllm_version!r}: treated as unknown")
    if version is None:
        warnings.append(
            "vLLM version unknown: applied only version-independent rules "
            "(set the image's vLLM version in the spec to get all of them)"
        )
    return version


def _no_arch_warning(facts: Facts) -> str:
    if not facts.get("gpu_name"):
        return "no GPU facts for this host (no nvidia-smi?): no GPU rules apply"
    return (
        f"unknown GPU architecture {facts.get('gpu_name', '')!r} (compute capability "
        f"{facts.get('compute_capability') or '?'}): no GPU rules apply; add it to agent/rules/gpus.toml"
    )


def _apply_override(
    result: EnvResult,
    name: str,
    value: str,
    rule: dict[str, Any] | None,
    version: Version | None,
    dead: list[dict[str, Any]],
) -> None:
    """A spec variable: dropped when dead, else set, recording any rule it overrides."""
    for entry in (entry for entry in dead if entry["name"] == name):
        if _is_dead(entry, version, result.warnings, value):
            result.env.pop(name, None)
            _record(result, name, value, "drop", entry["id"], f"{entry['reason']}; use {entry['replacement']} instead")
            return
    result.env[name] = value
    if rule is None:
        _record(result, name, value, "set", "spec", "set by the spec")
    else:
        _record(
            result,
            name,
            value,
            "override",
            rule["id"],
            f"the spec overrides {rule['set'][name]!r} of this rule: {rule['reason']}",
        )


def _is_dead(entry: dict[str, Any], version: Version | None, warnings: list[str], value: str) -> bool:
    """Whether a dead-variable entry drops the variable; warns either way when it matters."""
    name, flag = entry["name"], entry["replacement"]
    if not entry.get("vllm") or (version is not None and in_range(version, entry["vllm"])):
        warnings.append(f"dropped dead variable {name}={value}: {entry['reason']}; use {flag} instead")
        return True
    if version is None:
        warnings.append(
            f"{name} may be dead (vLLM version unknown; dead in {entry['vllm']}): {entry['reason']}; prefer {flag}"
        )
    elif entry.get("deprecated") and in_range(version, entry["deprecated"]):
        warnings.append(f"{name} is deprecated in this vLLM version ({entry['reason']}): use {flag}")
    return False


def _record(result: EnvResult, name: str, value: str, action: str, rule: str, reason: str) -> None:
    result.provenance.append(EnvProvenance(name=name, value=value, action=action, rule=rule, reason=reason))


# --- speculative decoding ----------------------------------------------------------------------------


def speculative_defaults(quant: str, speculative_json: str) -> tuple[str, list[str]]:
    """--speculative-config with the rule defaults filled in (keys the spec set are kept), plus notes."""
    config = _parse_speculative(speculative_json)
    if not config:
        return speculative_json, []
    notes = []
    for rule in _speculative_rules(quant, config):
        for key, value in rule["defaults"].items():
            if key not in config:
                config[key] = value
                notes.append(f"speculative {key}={value} (rule {rule['id']}): {rule['reason']}")
    return (json.dumps(config, sort_keys=True, separators=(",", ":")) if notes else speculative_json), notes


def speculative_warnings(quant: str, speculative_json: str, applied: bool = True) -> list[str]:
    """What is wrong with a spec's speculative config, said before any host is touched. applied=False leaves out
    what a rule fills in by itself (speculative_defaults: the cells' notes)."""
    config = _parse_speculative(speculative_json)
    warnings = []
    for rule in _speculative_rules(quant, config):
        for key, value in rule["defaults"].items():
            if key not in config and applied:
                warnings.append(
                    f"speculative method {config['method']!r} on a {quant} checkpoint without {key!r}: "
                    f'the agent adds "{key}":"{value}" (rule {rule["id"]}): {rule["reason"]}'
                )
        chosen = config.get("moe_backend", "")
        if chosen in rule.get("quantized_only", []):
            warnings.append(
                f"speculative moe_backend {chosen!r} loads only quantized weights and the draft head of "
                f"a {quant} checkpoint is not quantized: the server will not start; use "
                f"{rule['defaults'].get('moe_backend', 'triton')!r} (rule {rule['id']})"
            )
    return warnings


def _parse_speculative(speculative_json: str) -> dict:
    if not (speculative_json or "").strip():
        return {}
    try:
        config = json.loads(speculative_json)
    except ValueError as exc:
        raise UserError(
            f"speculative config is not valid JSON ({exc}): {speculative_json!r}; "
            'write it as in --speculative-config, e.g. {"method":"mtp","num_speculative_tokens":2}'
        ) from None
    if not isinstance(config, dict):
        raise UserError(f"speculative config must be a JSON object, got {speculative_json!r}")
    return config


def _speculative_rules(quant: str, config: dict) -> list[dict]:
    quant = (quant or "").lower()
    return [
        rule
        for rule in env_rules().get("speculative", [])
        if quant in rule.get("quant", [quant]) and config.get("method") == rule.get("method")
    ]


# --- multi-node: each node's environment from its end of the link ------------------------------------------------

_PLACEHOLDERS = ("{ifname}", "{address}", "{rdma}", "{head}")


@functools.cache
def multinode_rules(path: Path = MULTINODE_RULES) -> list[dict[str, Any]]:
    with open(path, "rb") as handle:
        return list(tomllib.load(handle).get("rule", []))


def node_env(values: dict[str, str], transport: str, where: str) -> EnvResult:
    """The env of one node of a multi-node cell: every rule of multinode.toml whose transport matches, its
    placeholders filled from `values` ({ifname, address, rdma, head}; checked plain tokens from the facts).
    `where` (the host) goes into each provenance row's reason."""
    result = EnvResult()
    for rule in multinode_rules():
        if rule.get("transport", transport) != transport:
            continue
        for name, template in rule["set"].items():
            value = str(template)
            for ph in _PLACEHOLDERS:
                value = value.replace(ph, values.get(ph.strip("{}"), ""))
            result.env[name] = value
            _record(result, name, value, "set", rule["name"], f"{rule['reason']} (node {where})")
    return result


@functools.cache
def moe_backends(path: Path = BACKEND_RULES) -> dict[str, tuple[str, ...]]:
    """quant ("fp8", "nvfp4", "unquantized") -> the --moe-backend values vLLM accepts for it (rules/backends.toml)."""
    with open(path, "rb") as handle:
        table = tomllib.load(handle)["moe"]
    return {quant: tuple(values) for quant, values in table.items()}


def moe_backend_problem(value: str, version: Version | None) -> str:
    """Why vLLM would refuse `--moe-backend value` whatever the checkpoint (a name it has for no quant: a typo), or
    at the stated version; "" otherwise. A known name that one quant refuses is a start that fails with its
    reason (attested), not bad input. Says the nearest known name."""
    if value == "auto":
        return ""
    known = sorted({v for values in moe_backends().values() for v in values})
    if value in known:
        too_new = [
            e for e in env_rules().get("flag", [])
            if e.get("name") == "--moe-backend" and e.get("value") == value and version is not None
            and not in_range(version, e["vllm"])
        ]  # fmt: skip
        return f"{too_new[0]['reason']}, and the spec's vllm_version is older" if too_new else ""
    near = difflib.get_close_matches(value, known, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    return f"moe_backend {value!r} is not a --moe-backend value vLLM knows; {hint}known: {', '.join(known)} (or auto)"
