"""A launch text with lint's fixes applied where they stand: the wrapper (script, docker run, compose, manifest),
the image and every other line are kept; a dead variable is removed (replaced by its flag when its value says
which), a missing variable is added beside the others, a flag's value is replaced or the flag added.

Text edits only, line by line, on the lines `launch.Launch` says each thing came from. What cannot be placed
(a flag added to a YAML list, a variable in a manifest with no env list) is left undone and said, so that
`lint --fix` never claims a fix it did not make.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from agent.hostside.logparse import normalise_backend
from agent.planning.launch import Launch

_GONE = "\x00"  # marks a removed line until finish()
# The flag a dead variable's value turns into (rules/env.toml [[dead]] replacement), when the value says it.
_MOE_BY_FLASHINFER = {"throughput": "flashinfer_cutlass", "latency": "flashinfer_trtllm"}


@dataclass
class Fixed:
    text: str
    done: list[str] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)


def replacement(name: str, value: str, flag: str, env: dict[str, str]) -> str:
    """The value of `flag` that says what the dead variable `name=value` meant ("" when it says nothing)."""
    if flag == "--attention-backend":
        return normalise_backend(value)
    if flag == "--linear-backend" and name == "VLLM_NVFP4_GEMM_BACKEND" and value:
        return normalise_backend(value)  # marlin, cutlass, flashinfer-cutlass, ...: the same names as the flag's
    if flag == "--moe-backend":
        if name == "VLLM_FLASHINFER_MOE_BACKEND":
            return _MOE_BY_FLASHINFER.get(value.lower(), "")
        if name.startswith("VLLM_USE_FLASHINFER_MOE") and value == "1":
            return _MOE_BY_FLASHINFER.get(env.get("VLLM_FLASHINFER_MOE_BACKEND", "throughput").lower(), "")
        if name == "VLLM_TEST_FORCE_FP8_MARLIN" and value == "1":
            return "marlin"
        if name.startswith("VLLM_USE_FLASHINFER_MOE") and value == "0" and _marlin_meant(env):
            return "marlin"  # the "Marlin fix": FlashInfer's MoE off beside Marlin chosen for the rest
        if name.endswith("_MOE_BACKEND") and value:
            return normalise_backend(value)
    return ""


def _marlin_meant(env: dict[str, str]) -> bool:
    return env.get("VLLM_NVFP4_GEMM_BACKEND", "").lower() == "marlin" or env.get("VLLM_TEST_FORCE_FP8_MARLIN") == "1"


def _assignment(name: str) -> re.Pattern[str]:
    value = r"(?:\"[^\"]*\"|'[^']*'|[^\s\"';&|]*)"
    return re.compile(
        rf"(?:(?:-e|--env)(?:\s+|=))?[\"']?(?:export\s+)?\b{re.escape(name)}={value}[\"']?\s?"
        rf"|^\s*-\s*[\"']?{re.escape(name)}=.*$|^\s*[\"']?{re.escape(name)}[\"']?\s*:.*$"
        rf"|^\s*-\s*name:\s*[\"']?{re.escape(name)}[\"']?\s*$"
        rf"|\$env:{re.escape(name)}\s*=\s*{value}\s?"  # PowerShell, as Windows guides write it
    )


def apply(text: str, launch: Launch, fixed: Launch) -> Fixed:
    lines = text.split("\n")
    out = Fixed(text)
    drop: set[int] = set()  # emptied now, removed at the end: line numbers hold for the edits in between
    for name in [n for n in launch.env if n not in fixed.env]:
        where = [launch.env_lines.get(name, 0) - 1]
        where += list(_launch_lines(lines, launch.line - 1, launch.kind)) if 0 < launch.line <= len(lines) else []
        found = [
            (i, m)
            for i in where
            if 0 <= i < len(lines) and i not in drop and not lines[i].startswith(_GONE)
            for m in [_assignment(name).search(lines[i])]
            if m
        ]
        if not found:
            out.undone.append(f"remove {name}")
            continue
        at, m = found[0]
        rest = (lines[at][: m.start()] + lines[at][m.end() :]).rstrip()
        if m.group(0).lstrip().startswith("- name:") and at + 1 < len(lines) and "value" in lines[at + 1]:
            drop.add(at + 1)  # Kubernetes: its value line goes with it
            lines[at + 1] = _GONE + lines[at + 1]
        if not rest.strip() or rest.strip() in ("export", "\\", "-"):
            drop.add(at)
            lines[at] = _GONE + lines[at]
        else:
            lines[at] = rest if not lines[at].rstrip().endswith("\\") or rest.endswith("\\") else rest + " \\"
        out.done.append(f"removed {name}")
    start = launch.line - 1
    for name, value in fixed.env.items():
        if name in launch.env:
            continue
        if _add_env(lines, start, launch, name, value):
            out.done.append(f"set {name}={value}")
        else:
            out.undone.append(f"set {name}={value}")
    for flag, value in _flag_changes(launch, fixed):
        if _set_flag(lines, start, launch, flag, value):
            out.done.append(f"{flag} {value}")
        else:
            out.undone.append(f"set {flag} {value}")
    out.text = "\n".join(lines)
    return out


def finish(text: str) -> str:
    """The text once every launch's edits are made: the removed lines go (kept until now so that line numbers held)."""
    return "\n".join(line for line in text.split("\n") if not line.startswith(_GONE))


def _flag_changes(launch: Launch, fixed: Launch) -> list[tuple[str, str]]:
    changes = []
    args = fixed.args
    for i, arg in enumerate(args):
        if arg.startswith("--") and "=" not in arg and i + 1 < len(args) and launch.flag(arg) != args[i + 1]:
            changes.append((arg, args[i + 1]))
    return changes


def _launch_lines(lines: list[str], start: int, kind: str) -> range:
    """The lines of the launch that starts at `start`: its backslash-continued lines, or a YAML block's next 60."""
    if kind in ("compose", "kubernetes"):
        return range(start, min(start + 60, len(lines)))
    end = start
    while end + 1 < len(lines) and lines[end].rstrip().endswith("\\"):
        end += 1
    return range(start, end + 1)


def _add_env(lines: list[str], start: int, launch: Launch, name: str, value: str) -> bool:
    if not 0 <= start < len(lines):
        return False
    line = lines[start]
    pair = f"{name}={shlex.quote(value)}"
    if launch.kind == "docker":
        m = re.search(r"\b(?:docker|podman)\s+(?:run|exec)\s", line)
        if m:
            lines[start] = line[: m.end()] + f"-e {pair} " + line[m.end() :]
            return True
    if launch.kind == "shell":
        m = re.search(r"(?:^|[\s\"'])((?:[^\s\"']*/)?vllm\s+serve|[^\s\"']*python\S*\s+-m\s+vllm)", line)
        if m:
            lines[start] = line[: m.start(1)] + pair + " " + line[m.start(1) :]
            return True
    for i in _launch_lines(lines, start, launch.kind):  # compose / Kubernetes: beside the variables already listed
        m = re.match(r"^(\s*)(environment|env):\s*$", lines[i])
        if m and i + 1 < len(lines):
            item = re.match(r"^(\s*)-\s*(name:)?", lines[i + 1].lstrip(_GONE))
            if item and item.group(2):
                pad = item.group(1)
                lines[i + 1 : i + 1] = [f"{pad}- name: {name}", f'{pad}  value: "{value}"']
                return True
            if item:
                lines.insert(i + 1, f"{item.group(1)}- {name}={value}")
                return True
            pad = re.match(r"^(\s*)", lines[i + 1].lstrip(_GONE)).group(1)  # type: ignore[union-attr]
            if len(pad) > len(m.group(1)):
                lines.insert(i + 1, f'{pad}{name}: "{value}"')
                return True
    return False


def _set_flag(lines: list[str], start: int, launch: Launch, flag: str, value: str) -> bool:
    forms = "|".join(re.escape(f) for f in {flag, flag.replace("-", "_").replace("__", "--")})
    given = re.compile(rf"({forms})(=|\s+|[\"']?,\s*[\"']?)(\"[^\"]*\"|'[^']*'|[^\s\"',\]]+)")
    for i in _launch_lines(lines, start, launch.kind) if 0 <= start < len(lines) else ():
        m = given.search(lines[i])
        if m:
            quoted = shlex.quote(value) if launch.kind in ("shell", "docker") else value
            lines[i] = lines[i][: m.start(3)] + quoted + lines[i][m.end(3) :]
            return True
    if not 0 <= start < len(lines):
        return False
    if launch.kind not in ("shell", "docker"):  # a flow list (`command: ["--model", "m"]`): one more pair in it
        for i in _launch_lines(lines, start, launch.kind):
            script = re.search(r"([\"'])[^\"']*vllm\s+serve[^\"']*()\1", lines[i])
            if script:  # `args: ["vllm serve m --x 1"]`: the flag goes inside the script's string
                lines[i] = lines[i][: script.start(2)] + f" {flag} {value}" + lines[i][script.start(2) :]
                return True
            m = re.match(r"^(\s*(?:command|args|entrypoint):\s*\[.*)\](\s*)$", lines[i])
            if m and "--" in lines[i]:
                lines[i] = f'{m.group(1)}, "{flag}", "{value}"]{m.group(2)}'
                return True
        return False
    span = list(_launch_lines(lines, start, launch.kind))
    last = span[-1]
    line = lines[last].rstrip()
    cont = line.endswith("\\")
    body = line[:-1].rstrip() if cont else line
    m = re.search(r"\s(?:&&|\|\||;|\||>|2>|&\s*$)", body)  # the launch ends before a pipe or redirection
    cut = m.start() if m else len(body)
    serve = re.search(r"vllm\s+serve|-m\s+vllm", body)
    if serve:  # `sh -c "vllm serve ..."`: inside the quotes that hold it
        quote = next((q for q in "\"'" if body[: serve.start()].count(q) % 2), "")
        close = body.find(quote, serve.end()) if quote else -1
        if close > 0:
            cut = close
    lines[last] = body[:cut] + f" {flag} {shlex.quote(value)}" + body[cut:] + (" \\" if cont else "")
    return True
