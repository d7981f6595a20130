"""A launch checked before it runs: findings, each naming its rule and reason, and the corrected launch.

The knowledge is the rules files' (agent/rules/env.toml through planning/envrules, the one loader): the same
rules `spark-agent env` shows and the sweep's planner applies. Lint adds no fact of its own beyond two about the
launch's form: an image by tag instead of digest, and weights that cannot fit the chip's memory. Which VLLM_*
variables each vLLM release reads is data too (agent/rules/vllm_env.toml, from vLLM's own vllm/envs.py).
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent import paths
from agent.errors import UserError
from agent.hostside import facts as hostfacts
from agent.hostside.contracts import Facts
from agent.hostside.logparse import normalise_backend
from agent.planning import envrules, launchfix
from agent.planning.launch import Launch

SEVERITIES = ("note", "warning", "error")
_QUANT_WORDS = (("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"), ("fp4", "nvfp4"), ("fp8", "fp8"), ("bf16", "bf16"))
# A model's name says more formats than a config's quant words do (-AWQ, -GPTQ-Int4, -W4A16).
_NAME_QUANT_WORDS = (*_QUANT_WORDS, ("awq", "awq"), ("gptq", "gptq"), ("w4a16", "w4a16"))
# Where the quant came from, most certain first: a name only suggests it, and lint says so on what depends on it.
QUANT_SOURCES = ("given", "flag", "checkpoint", "config", "hub", "name")
# Hub checkpoints whose names do not say their quant: `quantization_config` of each one's config.json on
# huggingface.co (https://huggingface.co/<id>/blob/main/config.json), read 2026.
HUB_QUANT = {
    "openai/gpt-oss-120b": "mxfp4",
    "openai/gpt-oss-20b": "mxfp4",
    "deepseek-ai/deepseek-v3": "fp8",
    "deepseek-ai/deepseek-v3-0324": "fp8",
    "deepseek-ai/deepseek-r1": "fp8",
    "deepseek-ai/deepseek-r1-0528": "fp8",
    "moonshotai/kimi-k2-instruct": "fp8",
    "minimaxai/minimax-m2": "fp8",
}


_NAME_GUESS = (
    "the quant {quant} is read from the model's name {model}, not its config.json: lower confidence; --quant says it"
)


def ngc_vllm() -> dict[str, str]:
    """NVIDIA's vLLM image tag (YY.MM) -> the vLLM release it ships (agent/rules/ngc_vllm.toml, each entry cited)."""
    data = tomllib.loads((paths.RULES / "ngc_vllm.toml").read_text())
    return {str(e["tag"]): str(e["vllm"]) for e in data.get("image", [])}


@dataclass(frozen=True)
class Finding:
    rule: str  # the rules file entry (or lint's own rule: image-digest, checkpoint-memory)
    severity: str  # note | warning | error
    message: str
    source: str
    line: int
    fix: str = ""  # what --fix changes, in words; "" when no rule knows the fix


@dataclass
class Target:
    """What the launch will run on: a chip (its gpus.toml entry) and a vLLM version ("" = unknown)."""

    arch: str
    gpu: dict[str, Any]
    vllm_version: str
    quant: str = ""  # "" = read from the launch (--quantization, the model's name, its weights)
    host: str = ""  # a checkpoint given as a path is read on this host (with `inventory`), else on this machine
    inventory: str = ""


@dataclass
class Result:
    launch: Launch
    quant: str
    vllm_version: str
    findings: list[Finding] = field(default_factory=list)
    quant_source: str = ""  # one of QUANT_SOURCES: "name" is a guess from the model's name (lower confidence)
    fixed: Launch | None = None  # the launch with every known fix applied (None: nothing to fix)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.launch.source,
            "line": self.launch.line,
            "kind": self.launch.kind,
            "image": self.launch.image,
            "model": self.launch.model,
            "quant": self.quant,
            "quant_source": self.quant_source,
            "vllm_version": self.vllm_version,
            "command": self.launch.command(),
            "findings": [asdict(f) for f in self.findings],
            "fixed_command": self.fixed.command() if self.fixed else "",
        }


def target_for(arch: str, vllm_version: str, quant: str = "", host: str = "", inventory: str = "") -> Target:
    gpus = hostfacts.load_gpu_rules()
    return Target(arch, gpus.get(arch, {}), vllm_version, quant, host, inventory)


def image_version(image: str) -> str:
    """The vLLM version an image's tag names (`vllm/vllm-openai:v0.12.0` -> 0.12.0); "" when it names none."""
    tag = image.split("@")[0].rsplit(":", 1)[1] if ":" in image.split("@")[0].rsplit("/", 1)[-1] else ""
    if "nvcr.io/nvidia/vllm" in image:
        return ngc_vllm().get(tag.split("-")[0], "")
    version = envrules.parse_version(tag) if tag.startswith(("v0.", "0.", "v1.", "1.")) else None
    return ".".join(map(str, version)) if version else ""


def quant_of(launch: Launch, checkpoint: dict[str, Any] | None) -> str:
    return quant_and_source(launch, checkpoint)[0]


def quant_and_source(launch: Launch, checkpoint: dict[str, Any] | None) -> tuple[str, str]:
    """(quant, where it came from: one of QUANT_SOURCES, "" when unknown)."""
    explicit = (launch.flag("--quantization") or launch.flag("-q") or "").lower()
    for word, quant in _QUANT_WORDS:
        if word in explicit:
            return quant, "flag"
    for conf in (checkpoint or {}).get("quant_configs", []):
        text = json.dumps(conf).lower()
        for word, quant in _QUANT_WORDS:
            if word in text:
                return quant, "checkpoint"
    config = _config_quant(launch.model)
    if config:
        return config, "config"
    hub = HUB_QUANT.get(launch.model.lower().strip("/"))
    if hub:
        return hub, "hub"
    name = launch.model.lower().replace("-", "").replace("_", "")
    for word, quant in _NAME_QUANT_WORDS:
        if word in name:
            return quant, "name"
    return "", ""


def _config_quant(model: str) -> str:
    """The quant a local checkpoint's config.json says (`quantization_config`: quant_method / quant_algo / fmt)."""
    from agent.hostside.safetensors import read_json

    path = Path(model) / "config.json" if model and not model.startswith(("http:", "https:")) else None
    try:
        if not path or not path.is_file():
            return ""
        conf = read_json(str(path)).get("quantization_config")  # bounded: size and nesting
    except (OSError, ValueError):
        return ""
    text = json.dumps(conf).lower() if isinstance(conf, dict) else ""
    return next((quant for word, quant in _QUANT_WORDS if word in text), "")


def lint(launch: Launch, target: Target) -> Result:
    checkpoint = _checkpoint(launch.model, target)
    version = target.vllm_version or image_version(launch.image)
    quant, source = (target.quant, "given") if target.quant else quant_and_source(launch, checkpoint)
    result = Result(launch=launch, quant=quant, vllm_version=version, quant_source=source)
    fixed = Launch(**{**asdict(launch), "args": list(launch.args), "env": dict(launch.env)})
    rules = envrules.env_rules()
    parsed = envrules.parse_version(version)
    _env_rules(result, fixed, target, quant, version)
    _dead(result, fixed, rules, parsed)
    _unknown(result, rules, parsed, version)
    _fails(result, fixed, rules, target.arch, quant, parsed)
    _fails_of_fix(launch, fixed, rules, target.arch, quant, parsed)
    _speculative(result, fixed, quant)
    _conflicts(result, rules)
    _flags(result, rules, parsed, version)
    _limits(result, fixed, rules, target.arch, parsed)
    _image(result)
    _memory(result, checkpoint, target)
    _host_only(result, rules)
    order = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    result.findings.sort(key=lambda f: (order[f.severity], f.line, f.rule))
    if fixed.args != launch.args or fixed.env != launch.env:
        result.fixed = fixed
    return result


def _add(result: Result, rule: str, severity: str, message: str, line: int = 0, fix: str = "") -> None:
    result.findings.append(Finding(rule, severity, message, result.launch.source, line or result.launch.line, fix))


def _facts(target: Target) -> Facts:
    gpu = target.gpu
    return Facts(
        gpu_name=str(gpu.get("name", "")),
        compute_capability=str(gpu.get("compute_capability", "")),
        arch=target.arch if gpu else "",
        sm=str(gpu.get("sm", "")),
    )


def _env_rules(result: Result, fixed: Launch, target: Target, quant: str, version: str) -> None:
    """Variables the rules set for this chip × quant × version that the launch lacks or sets otherwise."""
    rules = {r["id"]: r for r in envrules.env_rules().get("rule", [])}
    env = envrules.resolve_env(_facts(target), quant, version, {})
    for row in env.provenance:
        rule = rules.get(row["rule"], {})
        name, want = row["name"], row["value"]
        if "quant" in rule and result.quant_source == "name":  # the rule rests on a guess: said (an error softens)
            row = {**row, "reason": f"{row['reason']} ({_NAME_GUESS.format(quant=quant, model=result.launch.model)})"}
        have = result.launch.env.get(name)
        if have is None:
            severity = rule.get("lint", "warning")
            if "quant" in rule and result.quant_source == "name" and severity == "error":
                severity = "warning"
            _add(result, row["rule"], severity, f"missing {name}={want}: {row['reason']}", fix=f"set {name}={want}")
            fixed.env[name] = want
        elif have != want:
            line = result.launch.env_lines.get(name, 0)
            _add(result, row["rule"], "warning", f"{name}={have}, the rule sets {want}: {row['reason']}", line)


def _dead(result: Result, fixed: Launch, rules: dict, version: envrules.Version | None) -> None:
    for entry in rules.get("dead", []):
        name = entry["name"]
        if name not in result.launch.env:
            continue
        line = result.launch.env_lines.get(name, 0)
        use = f"use {entry['replacement']} instead"
        if not entry.get("vllm") or (version is not None and envrules.in_range(version, entry["vllm"])):
            flag = str(entry.get("replacement", ""))
            value = launchfix.replacement(name, result.launch.env[name], flag, result.launch.env)
            given = result.launch.flag(flag) if flag.startswith("--") else None
            if given is not None:  # the launch already says which: the dead variable only goes
                fix = f"drop {name} ({flag} {given} already chooses)"
            else:
                fix = f"drop {name}" + (f", add {flag} {value}" if value else "")
            _add(result, entry["id"], "error", f"{name} is dead: {entry['reason']}; {use}", line, fix)
            fixed.env.pop(name, None)
            if value and fixed.flag(flag) is None:
                _set_flag(fixed, flag, value)
        elif version is None:
            why = f"{name} is dead in vLLM {entry['vllm']} and the version is unknown (pass --vllm-version)"
            _add(result, entry["id"], "warning", f"{why}: {entry['reason']}; {use}", line)
        elif entry.get("deprecated") and envrules.in_range(version, entry["deprecated"]):
            _add(result, entry["id"], "warning", f"{name} is deprecated: {entry['reason']}; {use}", line)


def _unknown(result: Result, rules: dict, version: envrules.Version | None, version_text: str) -> None:
    """VLLM_* variables the target vLLM does not read (vllm_env.toml): a typo, or a name vLLM never had.

    Dead variables keep their own finding, and variables the env rules set are theirs: neither is said twice.
    """
    known, basis = envrules.vllm_env_names(version)
    if not known:
        return
    owned = {e["name"] for e in rules.get("dead", [])} | {n for r in rules.get("rule", []) for n in r["set"]}
    which = f"vLLM {version_text}" if version is not None else "vLLM"
    for name in result.launch.env:
        if not name.startswith("VLLM_") or name in known or name in owned:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.9)
        readers = [entry["vllm"] for entry in envrules.vllm_env_rules() if name in entry["names"]]
        hint = f"; did you mean {close[0]}?" if close else ""
        hint += f" (listed releases that read it: {readers[0]}-{readers[-1]})" if readers else ""
        message = f"{which} does not read {name} (not in vllm/envs.py of {basis}): it does nothing{hint}"
        _add(result, "unknown-env", "warning", message, result.launch.env_lines.get(name, 0))


def _backend(launch: Launch, flag: str) -> str:
    return normalise_backend(launch.flag(flag) or "")


def _applies(entry: dict[str, Any], arch: str, quant: str, version: envrules.Version | None) -> bool:
    if "arch" in entry and arch not in entry["arch"]:
        return False
    if "quant" in entry and quant not in entry["quant"]:
        return False
    return not entry.get("vllm") or (version is not None and envrules.in_range(version, entry["vllm"]))


def _fails(result: Result, fixed: Launch, rules: dict, arch: str, quant: str, version: envrules.Version | None) -> None:
    for entry in rules.get("fails", []):
        if _applies(entry, arch, quant, version) and _backend(result.launch, entry["axis"]) == entry["backend"]:
            fix = ""
            if entry.get("fix"):
                fix = f"{entry['axis']} {entry['fix']}"
                _set_flag(fixed, entry["axis"], entry["fix"])
            message = (
                f"{entry['axis']} {entry['backend']} does not start on {arch}"
                f"{' with ' + quant if quant else ''} (a {entry['class']} failure): {entry['reason']}"
            )
            _add(result, entry["id"], "error", message, result.launch.flag_lines.get(entry["axis"], 0), fix)


def _fails_of_fix(
    launch: Launch, fixed: Launch, rules: dict, arch: str, quant: str, version: envrules.Version | None
) -> None:
    """A backend the fixes chose (a dead variable's flag) must not be one that fails here: its rule's fix, or
    no flag (vLLM's own choice) when the rule knows none."""
    for entry in rules.get("fails", []):
        if _applies(entry, arch, quant, version) and _backend(fixed, entry["axis"]) == entry["backend"]:
            if entry.get("fix"):
                _set_flag(fixed, entry["axis"], entry["fix"])
            elif launch.flag(entry["axis"]) is None:
                _set_flag(fixed, entry["axis"], "")
                fixed.args = fixed.args[:-2]


def _speculative(result: Result, fixed: Launch, quant: str) -> None:
    """MTP on a checkpoint whose draft head needs its own moe_backend (the same rule the planner applies)."""
    config = result.launch.flag("--speculative-config")
    if config is None:
        dotted = result.launch.dotted("--speculative-config")
        if not dotted:
            return
        config = json.dumps({k: _number(v) for k, v in dotted.items()})
    try:
        warnings = envrules.speculative_warnings(quant, config)
        completed, notes = envrules.speculative_defaults(quant, config)
    except UserError as exc:  # bad JSON in a pasted launch: a finding, not a stop
        _add(result, "speculative-config", "error", exc.message)
        return
    rule_ids = [r["id"] for r in envrules.env_rules().get("speculative", [])]
    for warning in warnings:
        rule = next((r for r in rule_ids if r in warning), "speculative")
        _add(result, rule, "error", warning, fix="add the draft moe_backend" if notes else "")
    if notes and result.launch.flag("--speculative-config") is not None:
        _set_flag(fixed, "--speculative-config", completed)


def _number(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _conflicts(result: Result, rules: dict) -> None:
    for entry in rules.get("conflict", []):
        env_value = result.launch.env.get(entry["env"])
        if env_value == entry["value"] and _backend(result.launch, entry["flag"]) == entry["flag_value"]:
            line = result.launch.env_lines.get(entry["env"], 0)
            what = f"{entry['env']}={env_value} with {entry['flag']} {entry['flag_value']}"
            _add(result, entry["id"], "error", f"{what}: {entry['reason']}", line)


def _flags(result: Result, rules: dict, version: envrules.Version | None, version_text: str) -> None:
    for entry in rules.get("flag", []):
        value = result.launch.flag(entry["name"])
        if value is None or ("value" in entry and normalise_backend(value) != entry["value"]):
            continue
        shown = entry["name"] + (f" {entry['value']}" if "value" in entry else "")
        if version is None:
            continue  # said once below
        if not envrules.in_range(version, entry["vllm"]):
            line = result.launch.flag_lines.get(entry["name"], 0)
            _add(result, entry["id"], "error", f"vLLM {version_text} does not know {shown}: {entry['reason']}", line)
    if version is None and any(result.launch.flag(e["name"]) is not None for e in rules.get("flag", [])):
        _add(
            result,
            "vllm-version-unknown",
            "note",
            "the vLLM version is unknown (the image names none): flags were not checked against it; "
            "pass --vllm-version",
        )


def _limits(result: Result, fixed: Launch, rules: dict, arch: str, version: envrules.Version | None) -> None:
    for entry in rules.get("limit", []):
        if "arch" in entry and arch not in entry["arch"]:
            continue
        given = result.launch.flag(entry["flag"])
        value = _float(given) if given else _default(entry, version)
        if value is None or value <= entry["max"]:
            continue
        said = f"{entry['flag']} {value:g}" + ("" if given else " (vLLM's default)")
        _add(result, entry["id"], "error" if given else "warning", f"{said} > {entry['max']:g}: {entry['reason']}",
             fix=f"{entry['flag']} {entry['max']:g}")  # fmt: skip
        _set_flag(fixed, entry["flag"], f"{entry['max']:g}")


def _default(entry: dict[str, Any], version: envrules.Version | None) -> float | None:
    defaults = entry.get("defaults", {})
    if version is None:
        return max(defaults.values()) if defaults else None  # unknown version: the highest default may apply
    return next((float(v) for r, v in defaults.items() if envrules.in_range(version, r)), None)


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


_SERVER_ENV_PREFIXES = ("VLLM_", "FLASHINFER_", "CUTE_DSL_", "NCCL_", "TRITON_", "TORCH_", "CUDA_", "HF_")


def _host_only(result: Result, rules: dict) -> None:
    """Variables set on the host that `docker run` never passes into the container: vLLM does not see them."""
    named = {n for r in rules.get("rule", []) for n in r["set"]} | {e["name"] for e in rules.get("dead", [])}
    for name, line in result.launch.host_only.items():
        if name in named or name.startswith(_SERVER_ENV_PREFIXES):
            message = (
                f"{name} is set on the host but `docker run` does not pass it into the container (no -e {name}, no "
                "--env-file): it never reaches vLLM"
            )
            _add(result, "host-env-not-passed", "warning", message, line, fix=f"pass it: -e {name}")


def _image(result: Result) -> None:
    image = result.launch.image
    if image and "@sha256:" not in image:
        _add(
            result,
            "image-digest",
            "warning",
            f"image {image} is named by tag: the tag can move to another build; pin it by digest "
            f"(spark-agent pin {image} --host H)",
        )


def _checkpoint(model: str, target: Target | None = None) -> dict[str, Any] | None:
    """The safetensors summary (with config.json's quantization_config) of a checkpoint folder: on the target's host
    when lint was given --host H -i INVENTORY, else on this machine; None for a hub id or one that cannot be read."""
    if target and target.host and target.inventory and model.startswith("/"):
        from agent.judging.checkpoints import inspect_remote

        try:
            return dict(inspect_remote(model, target.host, target.inventory))
        except UserError:
            return None
    if not model or not Path(model).is_dir():
        return None
    from agent.hostside.safetensors import inspect_checkpoint

    try:
        return dict(inspect_checkpoint(model))
    except (OSError, ValueError):
        return None


def _memory(result: Result, checkpoint: dict[str, Any] | None, target: Target) -> None:
    memory_gb = target.gpu.get("memory_gb")
    if not checkpoint or not memory_gb:
        return
    util = _float(result.launch.flag("--gpu-memory-utilization") or "") or 0.9
    budget_gib = memory_gb * 1e9 / 1024**3 * util
    weights_gib = checkpoint["total_bytes"] / 1024**3
    if weights_gib >= budget_gib:
        _add(
            result,
            "checkpoint-memory",
            "error",
            f"{result.launch.model}: the weights alone are {weights_gib:.1f} GiB, more than {util:g} of one "
            f"{target.gpu.get('name', target.arch)}'s {memory_gb} GB ({budget_gib:.1f} GiB): it cannot load",
        )


def _set_flag(launch: Launch, flag: str, value: str) -> None:
    """Set `flag value` in a launch's args (replacing every form of it already there)."""
    forms = {flag, flag.replace("-", "_").replace("__", "--")}
    args, out, skip = launch.args, [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        key, eq, _ = arg.partition("=")
        if key in forms:
            skip = not eq and i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(arg)
    launch.args = [*out, flag, value]
