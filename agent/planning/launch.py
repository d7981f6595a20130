"""Launches people are about to run -> every `vllm serve` invocation and the environment it gets.

Read from what people copy: a command line, a shell script, `docker run`, a docker compose file, a Kubernetes
manifest, or a model card's Markdown (its fenced blocks). Nothing is executed or expanded beyond the script's own
assignments (`MODEL=x` then `$MODEL`). Input is text a user pasted: it is bounded (MAX_BYTES, MAX_LAUNCHES,
boundedyaml.MAX_NODES) and a bad one is one line naming the file (UserError, exit 2).
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from agent.errors import UserError
from agent.planning import boundedyaml

MAX_BYTES = 4 * 1024 * 1024  # a script, a compose file or a model card; anything bigger is not one
MAX_LAUNCHES = 256

# `docker run` options that take a value as the next word (the rest are switches, or `--opt=value`).
_DOCKER_VALUE_OPTS = {
    "-e", "--env", "--env-file", "-v", "--volume", "-p", "--publish", "--name", "--gpus", "--ipc", "--shm-size",
    "--network", "--net", "--runtime", "-w", "--workdir", "--entrypoint", "--ulimit", "--device", "--mount", "-u",
    "--user", "-l", "--label", "--restart", "--platform", "--cpus", "-m", "--memory", "-h", "--hostname",
    "--add-host", "--cap-add", "--security-opt", "--pull", "--log-driver", "--log-opt", "--cpuset-cpus",
}  # fmt: skip
_STOP = {";", "&&", "||", "|", "&", ")", "(", ">", ">>", "<", ">&", "&>", "<<", "|&"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$(?:\{([A-Za-z_]\w*|\d)(?::?([-+])([^}]*))?\}|([A-Za-z_]\w*))")  # ${1:-default}, ${X:+word}
_FENCE = re.compile(r"^\s*(?:>\s*)*(```+|~~~+)\s*([\w+-]*)")  # inside a Markdown quote too
_INLINE_CODE = re.compile(r"`([^`\n]{1,2000})`")
_FENCED = re.compile(r"^\s*(?:>\s*)*(?:```|~~~)", re.M)  # a Markdown text with code blocks: only they are read
_YAML_HINT = re.compile(r"^(?:services|apiVersion|kind|spec|containers|command|args)\s*:", re.M)
_WRAPPERS = {"env", "sudo", "nohup", "exec", "time", "nice", "setsid", "stdbuf", "taskset", "numactl", "command"}
_SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_BENCH_SCRIPTS = ("benchmark_throughput.py", "benchmark_latency.py")
_BENCH_THROUGHPUT, _BENCH_LATENCY = ["bench", "throughput"], ["bench", "latency"]
_SHELLS = {"sh", "bash", "zsh", "dash", "/bin/sh", "/bin/bash", "/usr/bin/bash", "/usr/bin/env"}
# Flags only vLLM's server takes: `docker run IMAGE serve ...` of an image whose name does not say vLLM is one
# when these follow.
_VLLM_FLAGS = {
    "--tensor-parallel-size", "-tp", "--gpu-memory-utilization", "--max-model-len", "--served-model-name",
    "--quantization", "--kv-cache-dtype", "--max-num-seqs", "--enforce-eager", "--moe-backend",
    "--speculative-config", "--trust-remote-code", "--enable-prefix-caching", "--max-num-batched-tokens",
    "--model",
}  # fmt: skip
# What a paste puts before a command: a Markdown quote ("> "), the shell's continuation prompt ("> "), its prompt.
# A notebook's shell escape ("!vllm serve ...", "!VLLM_USE_V1=0 vllm serve ...") too.
_PROMPT = re.compile(r"^\s*(?:>\s*)+(?=\S)|^\s*\$\s+|^\s*!(?=[A-Za-z_])")
_DOCKERFILE = re.compile(r"^FROM\s+\S+.*$(?:.|\n)*^(?:ENTRYPOINT|CMD)\s", re.M | re.I)
_DOCKERFILE_LINE = re.compile(r"^\s*(FROM|ENV|ENTRYPOINT|CMD)\s+(.*)$", re.I)
# ${X:+words}: its words when X is set; taken out before the line is split into words (they may hold quotes).
_PLUS = re.compile(r"\$\{([A-Za-z_]\w*):?\+([^}]{0,500})\}")
_SUBST = re.compile(r"\$\([^()`]{0,500}\)|`[^`]{0,500}`")
_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_YAML_LIST = re.compile(r"^\s*- \S", re.M)
_DIFF = re.compile(r"^(?:@@ |\+\+\+ |--- a/|diff --git )", re.M)


@dataclass
class Launch:
    """One `vllm serve` invocation: its arguments (model first when given positionally), its environment and the
    image it runs in. `line` is where it starts in `source`; `env_lines` where each variable was set."""

    source: str
    line: int
    kind: str  # shell | docker | compose | kubernetes | dockerfile | yaml (an argv list) | python (`LLM(...)`) | guide;
    # inside a Markdown file: the same, from its fenced block
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    env_lines: dict[str, int] = field(default_factory=dict)
    image: str = ""
    # Set on the host but never passed into the container (`export X=1` then `docker run` without `-e X`): name ->
    # line. vLLM never sees these.
    host_only: dict[str, int] = field(default_factory=dict)
    flag_lines: dict[str, int] = field(default_factory=dict)  # a guide's flags: where each is said

    def flag(self, name: str) -> str | None:
        """The value of `--name` (`--name V`, `--name=V`, or `--name_with_underscores`); the last one wins;
        "" for a switch; None when absent."""
        want = {name, name.replace("-", "_").replace("__", "--")}
        value = None
        for i, arg in enumerate(self.args):
            key, eq, val = arg.partition("=")
            if key in want or _abbreviates(key, want):
                if eq:
                    value = val
                elif i + 1 < len(self.args) and not self.args[i + 1].startswith("--"):
                    value = self.args[i + 1]
                else:
                    value = ""
        return value

    def set_flag(self, flag: str, value: str) -> None:
        """`flag value` in the args, replacing every form of it already there (abbreviated ones too)."""
        want = {flag, flag.replace("-", "_").replace("__", "--")}
        out: list[str] = []
        skip = False
        for i, arg in enumerate(self.args):
            if skip:
                skip = False
                continue
            key, eq, _ = arg.partition("=")
            if key in want or _abbreviates(key, want):
                skip = not eq and i + 1 < len(self.args) and not self.args[i + 1].startswith("--")
                continue
            out.append(arg)
        self.args = [*out, flag, value]

    def dotted(self, prefix: str) -> dict[str, str]:
        """`--speculative-config.method mtp` style: {"method": "mtp"} for prefix `--speculative-config`."""
        out = {}
        for i, arg in enumerate(self.args):
            key, eq, val = arg.partition("=")
            for form in (prefix, prefix.replace("-", "_").replace("__", "--")):
                if key.startswith(form + "."):
                    nxt = self.args[i + 1] if i + 1 < len(self.args) else ""
                    out[key[len(form) + 1 :]] = val if eq else nxt
        return out

    @property
    def model(self) -> str:
        flagged = self.flag("--model")
        if flagged:
            return flagged
        return self.args[0] if self.args and not self.args[0].startswith("-") else ""

    def command(self) -> str:
        """The launch as one shell line: assignments, then `vllm serve ARGS`."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        argv = " ".join(shlex.quote(a) for a in ["vllm", "serve", *self.args])
        return f"{env} {argv}".strip()


# --- the input ---------------------------------------------------------------------------------------


# vLLM's parser is argparse's with abbreviations allowed (FlexibleArgumentParser keeps allow_abbrev): a flag cut to a
# prefix of its name ("--gpu-memory-util=0.9") is that flag. A prefix must keep a word and a part of the next one.
_MIN_ABBREV = 8


def _abbreviates(key: str, names: set[str]) -> bool:
    return (
        len(key) >= _MIN_ABBREV
        and key.startswith("--")
        and "." not in key
        and any(n.startswith(key) and n != key and ("-" in key[2:] or "_" in key[2:]) for n in names)
    )


def read_text(data: bytes, source: str) -> str:
    """The launch text of a file or stdin: small UTF-8 text with something in it."""
    if len(data) > MAX_BYTES:
        raise UserError(f"{source}: {len(data)} bytes is too big for a launch (at most {MAX_BYTES}); pass the script")
    if b"\x00" in data:
        raise UserError(f"{source}: binary data; pass a command line, script, compose file, manifest or model card")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{source}: not UTF-8 text (byte {exc.start}); pass a text file") from None
    if not text.strip():
        raise UserError(f"{source}: empty; pass a `vllm serve` command line or a file that holds one")
    return text


def _is_diff(text: str) -> bool:
    """A unified diff, or lines pasted from one (each starts with +, - or a space, and some add)."""
    if _DIFF.search(text):
        return True
    lines = [line for line in text.split("\n") if line.strip()]
    return any(line.startswith("+") for line in lines) and all(line[0] in "+- " for line in lines)


def undiff(text: str) -> str:
    """A unified diff as the text it makes: `+` lines without their `+`, removed lines blank (line numbers kept)."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.startswith(("+++", "---", "@@", "diff --git", "index ")):
            out.append("")
        elif line.startswith("-"):
            # a removed line inside a continued command keeps the command whole (a lone "\" continues it)
            inside = bool(out) and out[-1].rstrip().endswith("\\") and line.rstrip().endswith("\\")
            out.append("\\" if inside else "")
        elif line.startswith(("+", " ")):
            out.append(line[1:])
        else:
            out.append(line)
    return "\n".join(out)


def extract(text: str, source: str) -> list[Launch]:
    """Every `vllm serve` invocation in a text (see the module docstring); [] when there is none."""
    launches: list[Launch] = []
    if not _FENCED.search(text) and _is_diff(text):  # a patch: the launch it adds
        text = undiff(text)
    if _FENCED.search(text):
        for first_line, lang, block in _fenced_blocks(text):
            if lang in ("diff", "patch") or (not lang and _is_diff(block)):
                block, lang = undiff(block), ""
            launches += _extract_block(block, source, first_line, lang)
        if not launches:  # a card that gives its command inline: `vllm serve ...` in a sentence
            for n, line in enumerate(text.splitlines(), 1):
                for code in _INLINE_CODE.findall(line) if "vllm" in line else ():
                    launches += _from_shell(code, source, n)
    else:
        launches = _extract_block(text, source, 1, "")
    if not launches:  # a guide or model card that recommends variables and flags without a command line
        launches = _from_guide(text, source)
    return launches[:MAX_LAUNCHES]


def _extract_block(text: str, source: str, first_line: int, lang: str) -> list[Launch]:
    if lang in ("python", "py") or (lang == "" and _PY_LLM.search(text) and _PY_HINT.search(text)):
        return _from_python(text, source, first_line)
    if lang == "dockerfile" or (lang == "" and _DOCKERFILE.search(text)):
        return _from_dockerfile(text, source, first_line)
    if lang in ("yaml", "yml") or (lang == "" and _YAML_HINT.search(text)):
        found = _from_yaml(text, source, first_line)
        if found is not None:
            return found
    found = _from_shell(text, source, first_line)
    if not found and _YAML_LIST.search(text):  # a YAML list of argv words under a key of its own (`start_command:`)
        found = _from_yaml(text, source, first_line) or []
    return found


def _fenced_blocks(text: str) -> Iterator[tuple[int, str, str]]:
    """(line of the block's first line, language, body) of each fenced code block of a Markdown text."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().lstrip("> ").startswith(fence):
            i += 1
        yield start + 1, lang, "\n".join(lines[start:i])
        i += 1


# --- Dockerfile: ENV, then ENTRYPOINT + CMD (exec or shell form) -------------------------------------------


def _from_dockerfile(text: str, source: str, first_line: int) -> list[Launch]:
    image, at = "", first_line
    env: dict[str, tuple[str, int]] = {}
    entrypoint: list[str] = []
    cmd: list[str] = []
    for n, line in _logical_lines(text):
        m = _DOCKERFILE_LINE.match(line)
        if not m:
            continue
        op, rest, line_no = m.group(1).upper(), m.group(2).strip(), first_line + n - 1
        if op == "FROM":
            image, env, entrypoint, cmd = rest.split()[0] if rest else "", {}, [], []  # a new stage starts over
        elif op == "ENV":
            pairs = _words(rest)
            if len(pairs) >= 2 and "=" not in pairs[0]:  # the old form: ENV NAME value
                env[pairs[0]] = (" ".join(pairs[1:]), line_no)
            for word in pairs:
                m2 = _ASSIGN.match(word)
                if m2:
                    env[m2[1]] = (m2[2], line_no)
        elif op in ("ENTRYPOINT", "CMD"):
            words = _exec_form(rest)
            if op == "ENTRYPOINT":
                entrypoint, cmd, at = words, [], line_no
            else:
                cmd, at = words, (at if entrypoint else line_no)
    words = [_expand(w, {k: v for k, (v, _) in env.items()}) for w in entrypoint + cmd]
    found = _launch_of(words, source, at, env) if words else []
    for one in found:
        one.kind, one.image = "dockerfile", one.image or image
    if not found and image and (_is_openai_image(image) or "vllm" in image.lower()):
        serve = _entrypoint_args(image, words)
        if serve is not None:
            found = [_launch(source, at, "dockerfile", serve, env, image)]
    return found


def _unplus(text: str, variables: dict[str, str]) -> str:
    return _PLUS.sub(lambda m: m.group(2) if variables.get(m.group(1)) else "", text) if "${" in text else text


def _exec_form(rest: str) -> list[str]:
    """`["vllm", "serve", "m"]` (JSON) or a shell command line (run by /bin/sh -c: its words)."""
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except ValueError:
            value = None
        if isinstance(value, list):
            return [str(v) for v in value]
    return _words(_unplus(rest, {}))


# --- shell -------------------------------------------------------------------------------------------


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, command) with backslash-continued lines joined."""
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _PROMPT.sub("", raw.rstrip())
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        yield start, buf + line
        buf = ""
    if buf:
        yield start, buf


def _words(command: str) -> list[str]:
    if "$(" in command or "`" in command:  # a command substitution is one word here, never a subshell's brackets
        command = _SUBST.sub("CMD_SUBST", command)
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:  # an unclosed quote in a paste: words as they stand
        return command.split()


def _expand(word: str, variables: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        if m.group(2) == "+":  # ${X:+word}: the word when X is set, nothing when it is not
            return m.group(3) if variables.get(name) else ""
        if name in variables:
            return variables[name]
        return m.group(3) if m.group(2) == "-" else m.group(0)

    return _VAR.sub(one, word) if "$" in word else word


def _from_shell(
    text: str, source: str, first_line: int, inherited: dict[str, tuple[str, int]] | None = None
) -> list[Launch]:
    launches: list[Launch] = []
    exported: dict[str, tuple[str, int]] = dict(inherited or {})  # what later commands inherit
    variables: dict[str, str] = {k: v for k, (v, _) in exported.items()}  # every assignment (for $VAR later)
    for n, command in _logical_lines(text):
        line_no = first_line + n - 1
        words = _words(_unplus(command[1:] if command.startswith("$ ") else command, variables))
        for segment in _segments(words):
            segment = [_expand(w, variables) for w in segment]
            if segment and segment[0] == "export":
                for word in segment[1:]:
                    m = _ASSIGN.match(word)
                    if m:
                        variables[m[1]] = m[2]
                        exported[m[1]] = (m[2], line_no)
                continue
            prefix: dict[str, tuple[str, int]] = {}
            wrapped = False  # `env A=1 ...`, `sudo -E ...`, `nohup ...`: the command after them is the one that runs
            while segment:
                m = _ASSIGN.match(segment[0])
                if m:
                    prefix[m[1]] = (m[2], line_no)
                    segment = segment[1:]
                elif segment[0] in _WRAPPERS:
                    wrapped, segment = True, _after_wrapper(segment)
                else:
                    break
            if not segment:
                if wrapped:
                    continue
                variables.update({k: v for k, (v, _) in prefix.items()})
                continue
            launches += _launch_of(segment, source, line_no, {**exported, **prefix})
    return launches


def _after_wrapper(words: list[str]) -> list[str]:
    """The words after a command wrapper and its options (`nice -n 10`, `sudo -E -u root`, `env -i`)."""
    i = 1
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in ("-n", "-u", "-g", "-C") and i + 1 < len(words) else 1
    return words[i:]


def _segments(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a line (split at ; && || |), redirections dropped."""
    current: list[str] = []
    skip_next = False
    for i, word in enumerate(words):
        if skip_next:
            skip_next = False
            continue
        if word in _STOP or word.startswith((">", "<")):
            if word in (">", ">>", "<", ">&", "&>") and i + 1 < len(words):
                skip_next = True  # the redirection's target
            if word not in (">", ">>", "<", ">&", "&>"):
                yield current
                current = []
            continue
        if word.isdigit() and i + 1 < len(words) and words[i + 1].startswith((">", "<")):
            continue  # the 2 of 2>&1
        current.append(word)
    yield current


def _launch_of(words: list[str], source: str, line: int, env: dict[str, tuple[str, int]]) -> list[Launch]:
    """The launches these words run: `vllm serve` (directly, via the OpenAI server module, in `docker run`), or
    a script given to a shell (`bash -c "..."`, `docker exec C sh -c "..."`) that runs one."""
    for i in range(len(words) - 1):
        if words[i].endswith(("docker", "podman")) and words[i + 1] == "run":
            return _docker_run(words[i + 2 :], source, line, env)
        if words[i].endswith(("docker", "podman")) and words[i + 1] == "exec":  # a running container: no image
            found = _docker_run(words[i + 2 :], source, line, {})  # and none of this shell's variables
            for one in found:
                one.image = ""
            return found
        if words[i].endswith("docker") and words[i + 2 : i + 3] == ["run"] and words[i + 1] in ("compose", "container"):
            found = _docker_run(words[i + 3 :], source, line, env)  # `docker compose run SERVICE ...` too
            for one in found if words[i + 1] == "compose" else ():
                one.image = ""  # a service name, not an image: its compose file says which
            return found
    serve = _serve_args(words)
    if serve is not None:
        return [_launch(source, line, "shell", serve, env, "")]
    script = _shell_script(words)
    return _from_shell(script, source, line, env) if script else []


def _shell_script(words: list[str]) -> str:
    """The script of `sh -c SCRIPT` (bash -lc, env bash -c ...) among these words; "" when there is none."""
    for i, word in enumerate(words[:-2] if len(words) > 2 else []):
        if word in _SHELLS or word.endswith(("/sh", "/bash")):
            flag = words[i + 1]
            if flag.startswith("-") and not flag.startswith("--") and "c" in flag:
                return words[i + 2]
    return ""


def _serve_args(words: list[str]) -> list[str] | None:
    for i, word in enumerate(words):
        if (word == "vllm" or word.endswith("/vllm")) and i + 1 < len(words) and words[i + 1] == "serve":
            return words[i + 2 :]
        if word == "-m" and i + 1 < len(words) and words[i + 1] in _SERVER_MODULES:
            return words[i + 2 :]
        if word == "-m" and words[i + 1 : i + 3] == ["vllm.entrypoints.cli.main", "serve"]:
            return words[i + 3 :]
        # vLLM's own benchmark scripts and `vllm bench throughput|latency` start an engine in-process: launches too
        if word.endswith(_BENCH_SCRIPTS) and (i == 0 or words[i - 1].split("/")[-1].startswith("python")):
            return words[i + 1 :]
        if (word == "vllm" or word.endswith("/vllm")) and words[i + 1 : i + 3] in (_BENCH_THROUGHPUT, _BENCH_LATENCY):
            return words[i + 3 :]
    return None


def _docker_run(words: list[str], source: str, line: int, env: dict[str, tuple[str, int]]) -> list[Launch]:
    container_env: dict[str, tuple[str, int]] = {}
    entrypoint = ""
    env_file = False
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            break
        key, eq, val = word.partition("=")
        env_file = env_file or key == "--env-file"
        if key in ("-e", "--env"):
            val = val if eq else (words[i + 1] if i + 1 < len(words) else "")
            m = _ASSIGN.match(val)
            if m:
                container_env[m[1]] = (m[2], line)
            elif val in env:
                container_env[val] = env[val]  # `-e NAME` passes the caller's value
        if key == "--entrypoint":
            entrypoint = val if eq else (words[i + 1] if i + 1 < len(words) else "")
        if key in _DOCKER_VALUE_OPTS and not eq:
            i += 1
        i += 1
    if i >= len(words):
        return []
    image, rest = words[i], words[i + 1 :]
    if entrypoint:  # `--entrypoint python3 IMAGE -m vllm...`, `--entrypoint vllm IMAGE serve ...`
        rest = [*_words(entrypoint), *rest]
    serve = _serve_args(rest)
    if serve is None:
        script = _shell_script(rest)
        if script:  # `docker run IMAGE bash -c "... vllm serve ..."`: the script's launches, in this container
            found = _from_shell(script, source, line)
            for one in found:
                one.kind, one.image = "docker", image
                for name, (value, at) in container_env.items():
                    one.env.setdefault(name, value)
                    one.env_lines.setdefault(name, at)
            return found
        serve = _entrypoint_args(image, rest)
    if serve is None:
        return []
    launch = _launch(source, line, "docker", serve, container_env, image)
    if not env_file:  # an env file may pass anything: unknown here
        launch.host_only = {k: n for k, (_, n) in env.items() if k not in container_env}
    return [launch]


def _entrypoint_args(image: str, words: list[str]) -> list[str] | None:
    """The server's arguments when the image's entrypoint is vLLM: the OpenAI image takes them directly, an image
    whose entrypoint is `vllm` takes `serve ARGS`."""
    if words and words[0] == "serve" and ("vllm" in image.lower() or _VLLM_FLAGS & _flag_names(words)):
        return words[1:]
    if _is_openai_image(image):
        return words
    if "vllm" in image.lower() and words and words[0].startswith("-") and _VLLM_FLAGS & _flag_names(words):
        return words  # an image named for vLLM whose entrypoint takes the server's flags (vastai/vllm, my-vllm)
    return None


def _flag_names(words: list[str]) -> set[str]:
    return {w.split("=")[0].replace("_", "-") for w in words if w.startswith("-")}


def _is_openai_image(image: str) -> bool:
    name = image.split("@")[0].rsplit(":", 1)[0] if "/" in image or ":" in image else image
    return name.endswith("vllm-openai") or name.endswith("vllm/vllm-openai")


def _launch(source: str, line: int, kind: str, args: list[str], env: dict[str, tuple[str, int]], image: str) -> Launch:
    return Launch(
        source=source,
        line=line,
        kind=kind,
        args=list(args),
        env={k: v for k, (v, _) in env.items()},
        env_lines={k: n for k, (_, n) in env.items()},
        image=image,
    )


# --- Python: vLLM's `LLM(...)` API in a snippet ------------------------------------------------------------------

_PY_LLM = re.compile(r"\bLLM\(")
_PY_HINT = re.compile(r"^\s*(?:>>>\s*)?(?:from vllm import|import vllm)|^>>> .{0,200}\bLLM\(", re.M)
_PY_PROMPT = re.compile(r"^(?:>>>|\.\.\.)(?: |$)")


def _from_python(text: str, source: str, first_line: int) -> list[Launch]:
    """`LLM(model=..., quantization=..., tensor_parallel_size=...)` as the engine arguments it passes (keywords as
    their flags), with `os.environ["X"] = "v"` set before it. Only literals and names bound to literals are read."""
    lines = text.splitlines()
    if any(line.startswith(">>>") for line in lines):  # an interpreter session: its input lines, not its output
        lines = [_PY_PROMPT.sub("", line) if _PY_PROMPT.match(line) else "" for line in lines]
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: dict[str, Any] = {}
    env: dict[str, tuple[str, int]] = {}
    found: list[Launch] = []
    for node in ast.walk(tree):
        if len(found) >= MAX_LAUNCHES:
            break
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], _py_value(node.value, names)
            if isinstance(target, ast.Name) and value is not None:
                names[target.id] = value
            elif isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ":
                key = _py_value(target.slice, names)
                if isinstance(key, str) and value is not None:
                    env[key] = (str(value), first_line + node.lineno - 1)
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "LLM":
            args: list[str] = []
            for pos in node.args[:1]:
                value = _py_value(pos, names)
                args += ["--model", str(value)] if value is not None else []
            for kw in node.keywords:
                value = _py_value(kw.value, names)
                if kw.arg and value is not None:
                    flag = "--" + kw.arg.replace("_", "-")
                    if value is True:
                        args.append(flag)
                    elif value is not False:
                        args += [flag, json.dumps(value) if isinstance(value, (dict, list)) else str(value)]
            found.append(_launch(source, first_line + node.lineno - 1, "python", args, env, ""))
    return found


def _py_value(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


# --- a guide's prose: variables and flags it recommends, with no command line ------------------------------------

_GUIDE_ENV = re.compile(
    r"(?<![\w$])((?:VLLM|FLASHINFER|CUTE_DSL|NCCL|TRITON|TORCH_CUDA)_[A-Z0-9_]{1,80})\s*=\s*[\"'`]?([^\s\"'`,;)|]{0,200})"
)
# A model card's table of settings: `| VLLM_X | 1 |` (the value a single word: a table of descriptions is no setting)
_GUIDE_ENV_ROW = re.compile(
    r"\|\s*`?((?:VLLM|FLASHINFER|CUTE_DSL|NCCL|TRITON|TORCH_CUDA)_[A-Z0-9_]{1,80})`?\s*\|\s*`?([^\s|`]{1,200})`?\s*\|"
)
# `--flag value`, `--flag=value`, `--flag '{"json": 1}'`, and a JSON list's `"--flag", "value"`
_GUIDE_FLAG = re.compile(
    r"(?<![\w-])(--[a-z][a-z0-9-]{1,60})"
    r"(?:(?:[ =]|\",\s{0,4}\")(?:'([^'\n]{1,2000})'|\"([^\"\n]{1,2000})\"|`?([^\s\"'`,;)|]{1,300})))?"
)
# A hub id said in prose (`Qwen/Qwen3-30B-A3B-FP8`), never one quoted inside a JSON value (a draft model's)
_GUIDE_MODEL = re.compile(r"(?<![\w./:\"'-])([A-Za-z0-9][\w.-]{1,60}/[A-Za-z0-9][\w.-]{1,100})(?![\w/\"'])")
_GUIDE_FLAGS = {"--moe-backend", "--attention-backend", "--linear-backend", "--speculative-config", "--model"}


def _from_guide(text: str, source: str) -> list[Launch]:
    """One launch of what a guide section or model card recommends, each variable and flag at the line that says it;
    [] for a text that names no vLLM variable or flag."""
    if "vllm" not in text.lower():
        return []
    env: dict[str, tuple[str, int]] = {}
    args: list[str] = []
    flag_lines: dict[str, int] = {}
    model, first = "", 0
    known = _VLLM_FLAGS | _GUIDE_FLAGS
    for n, line in enumerate(text.splitlines(), 1):
        for m in (*_GUIDE_ENV.finditer(line), *_GUIDE_ENV_ROW.finditer(line)):
            env.setdefault(m.group(1), (m.group(2), n))
            first = first or n
        for m in _GUIDE_FLAG.finditer(line):
            if m.group(1) in known and m.group(1) not in args:
                value = m.group(2) or m.group(3) or m.group(4) or ""
                args += [m.group(1)] + ([value] if value and not value.startswith("-") else [])
                flag_lines[m.group(1)] = n
                first = first or n
        if not model and "model" in line.lower():
            named = _GUIDE_MODEL.search(line)
            model = named.group(1) if named and not named.group(1).startswith(("http", "www.")) else ""
    if not env and not args:
        return []
    if model and "--model" not in args:
        args = ["--model", model, *args]
    guide = _launch(source, first, "guide", args, env, "")
    guide.flag_lines = flag_lines
    return [guide]


# --- YAML: docker compose, Kubernetes, and any YAML whose strings hold a `vllm serve` command ----------


def _from_yaml(text: str, source: str, first_line: int) -> list[Launch] | None:
    """Launches of a YAML text; None when it is no YAML (then it is read as shell)."""
    try:
        docs = [d for d in boundedyaml.load_all(text) if d is not None]
    except boundedyaml.YamlBomb as exc:
        raise UserError(f"{source}:{first_line + exc.line}: {exc.why}: refused; pass the file without it") from None
    except (yaml.YAMLError, RecursionError):
        return None
    if not docs or not all(isinstance(d, (dict, list)) for d in docs):
        return None
    out: list[Launch] = []
    budget = [boundedyaml.MAX_NODES]
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("services"), dict):
            for name, service in doc["services"].items():
                if isinstance(service, dict):
                    out += _container(service, str(name), text, source, first_line, "compose")
            continue
        for container in _containers(doc, budget):
            out += _container(container, str(container.get("name", "")), text, source, first_line, "kubernetes")
        if not out:  # an argv kept as a YAML list: ["python", "-m", "vllm.entrypoints.openai.api_server", ...]
            for words in _word_lists(doc, budget):
                serve = _serve_args(words)
                if serve is not None:
                    line = first_line + _line_of(text, words[0])
                    out.append(_launch(source, line, "yaml", serve, {}, ""))
        if not out:
            for value, _ in _strings(doc, budget):
                if "vllm" in value and "serve" in value:
                    line = first_line + _line_of(text, value.strip().splitlines()[0])
                    out += _from_shell(value, source, line)
    return out


def _containers(node: Any, budget: list[int]) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack and budget[0] > 0:
        item = stack.pop()
        budget[0] -= 1
        if isinstance(item, dict):
            for key in ("containers", "initContainers"):
                for c in item.get(key) or []:
                    if isinstance(c, dict) and "image" in c:
                        yield c
            stack.extend(v for k, v in item.items() if k not in ("containers", "initContainers"))
        elif isinstance(item, list):
            stack.extend(item)


def _word_lists(node: Any, budget: list[int]) -> Iterator[list[str]]:
    stack = [node]
    while stack and budget[0] > 0:
        item = stack.pop()
        budget[0] -= 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            if item and all(isinstance(v, (str, int, float)) for v in item):
                yield [str(v) for v in item]
            else:
                stack.extend(item)


def _strings(node: Any, budget: list[int]) -> Iterator[tuple[str, None]]:
    stack = [node]
    while stack and budget[0] > 0:
        item = stack.pop()
        budget[0] -= 1
        if isinstance(item, str):
            yield item, None
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _container(c: dict[str, Any], name: str, text: str, source: str, first_line: int, kind: str) -> list[Launch]:
    """A compose service or a Kubernetes container: image + entrypoint/command + command/args + environment."""
    image = _expand(str(c.get("image") or ""), {})  # ${IMAGE:-vllm/vllm-openai:v0.11.0}: its default
    at = first_line + _line_of(text, f"{name}:" if kind == "compose" and name else f"image: {image}")
    words: list[str] = []
    for key in ("entrypoint", "command", "args"):
        value = c.get(key)
        if isinstance(value, str):
            words += _words(value)
        elif isinstance(value, list):
            words += [str(v) for v in value]
    env = {k: (v, first_line + _line_of(text, k, at - first_line)) for k, v in _container_env(c).items()}
    if kind == "kubernetes":  # Kubernetes expands $(VAR) in command and args from the container's env
        words = [_K8S_VAR.sub(lambda m: env[m.group(1)][0] if m.group(1) in env else m.group(0), w) for w in words]
    script = _shell_script(words)
    if script and _serve_args(words) is None:
        if words.index(script) < len(words) - 1:  # k8s `command: [sh, -c]` + `args: ["vllm serve", ...]` pieces
            script = " ".join(words[words.index(script) :])
        found = _from_shell(script, source, at)  # `sh -c "...; vllm serve ..."`
        for launch in found:
            launch.kind, launch.image = kind, image
            for k, (v, n) in env.items():
                launch.env.setdefault(k, v)
                launch.env_lines.setdefault(k, n)
        return found
    serve = _serve_args(words)
    if serve is None:
        serve = _entrypoint_args(image, words)
    if serve is None:
        return []
    return [_launch(source, at, kind, serve, env, image)]


def _container_env(c: dict[str, Any]) -> dict[str, str]:
    env = c.get("environment", c.get("env"))
    out: dict[str, str] = {}
    if isinstance(env, dict):
        out = {str(k): "" if v is None else str(v) for k, v in env.items()}
    elif isinstance(env, list):
        for item in env:
            if isinstance(item, dict) and "name" in item:  # Kubernetes: {name, value} (valueFrom: unknown here)
                out[str(item["name"])] = str(item.get("value", ""))
            elif isinstance(item, str):
                key, _, value = item.partition("=")
                out[key] = value
    return out


def _line_of(text: str, needle: str, after_line: int = 0) -> int:
    """0-based line of the first occurrence of needle at or after a line (0 when not found)."""
    lines = text.splitlines()
    for i in range(max(after_line, 0), len(lines)):
        if needle and needle in lines[i]:
            return i
    return max(after_line, 0)
