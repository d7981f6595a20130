"""What the server was launched as: the vLLM version, the served model, the non-default args, the engine config
(0.4-0.6: the argparse Namespace), the quantization and load format, and the environment variables vLLM ignored.

Its own family because these lines say what was asked for, once, at the start; the other families say what the
engine then did, and judging/verdict.py compares the two.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from ..contracts import Attestation
from . import pyrepr, speculation
from .attestation import Recorder
from .line import Then, balance

_VERSION_FORMS = (
    re.compile(r"vLLM API server version (\S+?),?\s*$"),  # 0.12-0.14
    re.compile(r"vLLM server version (\S+), serving model (\S+)"),  # 0.15+ with VLLM_DISABLE_LOG_LOGO=1
    Then("\u2588", r"\bversion (\d\S*)\s*$"),  # the logo
)
_LOGO_MODEL = Then("\u2588", r"\bmodel\s+(\S+)\s*$")
# V0, V1, 0.2; and the same config in the dump a V1 engine writes when a step fails while serving (dump_input.py)
_ENGINE_INIT = re.compile(
    r"(?:Initializing an?|Dumping input data for) (?:V\d )?LLM engine (?:\(v([^)\s]+)\) )?with config: (.*)"
)
_CONFIG_MODEL = re.compile(r"(?:^|[ ,])model='([^']*)'")
_CONFIG_QUANT = re.compile(r"(?:^|[ ,])quantization=([\w-]{1,40})")  # compressed-tensors too
# 0.5-0.6: a GPTQ/AWQ checkpoint upgraded to the Marlin kernels ("... is convertible to gptq_marlin during runtime").
_QUANT_WORDED = re.compile(
    r"(?:^|\s)(\w{1,40}) quantization is not fully optimized|model is serialized in (\w{1,40}) format"
)
_CONVERTIBLE = re.compile(
    r"convertible to (\w{1,40}) during runtime|you specified quantization=\w{1,40} explicitly, so forcing (\w{1,40})"
)
# 0.4-0.6 print their arguments as an argparse Namespace: the model and the quantization are read from it.
_NAMESPACE = re.compile(r"args: Namespace\(")
_NAMESPACE_MODEL = re.compile(r"[(, ]model(?:_tag)?='([^']{1,300})'")
_NAMESPACE_QUANT = re.compile(r"[(, ]quantization='(\w{1,40})'")
_ARGS = re.compile(r"non-default args: (\{.*)")
_CONFIG_LOAD_FORMAT = re.compile(r"(?:^|[ ,])load_format=(?:LoadFormat\.)?'?(\w{1,40})")
_NAMESPACE_LOAD_FORMAT = re.compile(r"[(, ]load_format='(\w{1,40})'")
_UNKNOWN_ENV = re.compile(r"Unknown vLLM environment variable detected: ([A-Za-z_][A-Za-z0-9_]*)")
# The version as other tools print it, beside or instead of the log: collect_env ("vLLM Version : 0.11.0"), `pip show
# vllm` ("Name: vllm" then "Version: 0.11.0"), pip ("Successfully installed ... vllm-0.11.0", "[pip3] vllm==0.11.0"),
# a wheel's file name, the official image's tag (vllm/vllm-openai:v0.10.1.1). The server's own line wins over these.
_V = r"v?(\d{1,3}\.\d{1,3}(?:\.\d{1,4})?(?:(?:\.|\+|rc|\.post|\.dev)[\w.+]{0,40})?)"
_TOOL_VERSIONS = (
    re.compile(r"^vLLM Version\s*:\s*" + _V),
    # an issue template's list ("- **vLLM version**: 0.11.1rc6", "- vLLM: `0.29.1rc1`") and prose ("vllm version: 0.9.2")
    re.compile(r"^(?:[-*]\s{1,4})?\**vllm(?: version)?\**\s{0,4}:\s{0,4}\**\s{0,4}`?" + _V, re.IGNORECASE),
    # "vllm" first (a literal prefix the regex engine scans for fast); that it starts a word is checked after
    re.compile(r"vllm(?:==|-)" + _V + r"(?:\s|$|-cp3)"),
    re.compile(r"vllm/vllm-openai(?:-[a-z]{1,10})?:" + _V + r"(?:\s|$|[\"'@])"),
)
_WORD_START = " \t\"'=/"
_PIP_VERSION = re.compile(r"^Version:\s*" + _V + r"\s*$")
# A command line pasted beside the log: the flags that say what the server was asked for (the log's own
# `non-default args` win; these count only where the log printed none). Values as a shell passes them.
_FLAG = re.compile(  # "--" first: a literal prefix the regex engine scans for fast; a flag starts a word (checked)
    r"--(speculative[-_]config|moe[-_]backend|linear[-_]backend|attention[-_]backend|quantization|model"
    r"|load[-_]format)(?:=|\s+)('[^']{0,2000}'|\"(?:[^\"\\]|\\.){0,2000}\"|[^\s'\"]{1,300})"
)
_SPEC_DOTTED = re.compile(r"--speculative[-_]config\.(\w{1,40})(?:=|\s+)([^\s'\"]{1,100})")
_SERVE_MODEL = re.compile(r"vllm serve\s+([\w./:@-]{1,300})")
_MAX_FLAGS = 16  # flags read from one line: a hostile line of them costs no more


class LaunchLines(Recorder):
    """The launch's lines; the first that says a thing wins."""

    def __init__(self) -> None:
        super().__init__()
        self._args_tries = 0
        self._tool_version = ("", "")  # (version, line) another tool printed; used only if the log names none
        self._pip_vllm = False  # `pip show vllm` began: its "Version:" line is vLLM's
        self.pasted_args: dict[str, Any] = {}  # flags of a launch pasted beside the log

    def _tool_version_line(self, msg: str, line: str) -> bool:
        """The version as another tool printed it (see _TOOL_VERSIONS); the first one counts."""
        text = msg.strip()
        if text.startswith("Name: "):
            self._pip_vllm = text == "Name: vllm"
            return self._pip_vllm
        m = _PIP_VERSION.match(text) if self._pip_vllm and text.startswith("Version:") else None
        if not m and ("llm" in text or "LLM" in text):  # every other form names vLLM
            m = _tool_version(text[:4000])
        if not m:
            return False
        if not self._tool_version[0]:
            self._tool_version = (m.group(1), line)
        return not self._pasted_launch(msg)  # an image tag in a `docker run` line: its flags still count

    def _pasted_launch(self, msg: str) -> bool:
        """The flags of a command line pasted in the text (bounded: the first _MAX_FLAGS of a line)."""
        if "--" not in msg and "vllm serve" not in msg:
            return False
        found = False
        args = self.pasted_args
        text = msg[:8000]
        for i, m in enumerate(_FLAG.finditer(text)):
            if i >= _MAX_FLAGS:
                break
            if m.start() and not text[m.start() - 1].isspace():
                continue
            key, raw = m.group(1).replace("-", "_"), _unquote(m.group(2))
            value: Any = _json_object(raw) or _spec_pairs(text) if key == "speculative_config" else raw
            if value is not None:
                args.setdefault(key, value)
                found = True
        for i, m in enumerate(_SPEC_DOTTED.finditer(text) if "--speculative" in text else ()):  # the dotted form
            if i >= _MAX_FLAGS:
                break
            conf = args.setdefault("speculative_config", {})
            if isinstance(conf, dict):
                value = _unquote(m.group(2))
                conf.setdefault(m.group(1), int(value) if value.isdigit() else value)
                found = True
        served = _SERVE_MODEL.search(text) if "vllm serve" in text else None
        if served and not served.group(1).startswith("-"):
            args.setdefault("model", served.group(1))
            found = True
        return found

    def _launch_facts(self, f: Attestation) -> None:
        """Into the facts `f` (a copy: later lines may still name the version): another tool's version, and a pasted
        launch's args, where the log itself said neither."""
        version, line = self._tool_version
        self._repairs["tool_version"] = int(bool(version and not f["vllm_version"]))
        if self._repairs["tool_version"]:
            f["vllm_version"] = version
            f["evidence"].setdefault("version", line)
        self._repairs["pasted_launch"] = int(bool(self.pasted_args and not f["non_default_args"]))
        if not self._repairs["pasted_launch"]:
            return
        args = copy.deepcopy(self.pasted_args)
        f["non_default_args"] = args
        if not f["speculative"]["method"]:
            speculation.from_args(f["speculative"], args)
        if isinstance(args.get("quantization"), str) and not f["quantization"]:
            f["quantization"] = args["quantization"]
        if isinstance(args.get("model"), str) and not f["served_model"]:
            f["served_model"] = args["model"]
        if isinstance(args.get("load_format"), str) and not f["load_format"]:
            f["load_format"] = args["load_format"].lower()[:40]

    def _unknown_env(self, msg: str, line: str) -> bool:
        if "Unknown vLLM environment" not in msg:
            return False
        m = _UNKNOWN_ENV.search(msg)
        if m and self._add("unknown_env", m.group(1)):
            self._evidence("unknown_env:" + m.group(1), line)
        return True

    def _convertible(self, msg: str) -> bool:
        """0.5-0.6: a GPTQ/AWQ checkpoint upgraded to the Marlin kernels."""
        m = _CONVERTIBLE.search(msg) if "convertible to" in msg or "so forcing" in msg else None
        if not m:
            return False
        self._f["quantization"] = self._f["quantization"] or m.group(1) or m.group(2)
        return True

    def _namespace(self, msg: str) -> bool:
        """0.4-0.6's "args: Namespace(...)": the model, quantization, load format and speculative model."""
        if "Namespace(" not in msg or not _NAMESPACE.search(msg):
            return False
        f = self._f
        m = _NAMESPACE_MODEL.search(msg)
        if m and not f["served_model"]:
            f["served_model"] = m.group(1)
        m = _NAMESPACE_QUANT.search(msg)
        if m and not f["quantization"]:
            f["quantization"] = m.group(1)
        m = _NAMESPACE_LOAD_FORMAT.search(msg)
        self._load_format(m.group(1) if m else None)
        speculation.from_namespace(f["speculative"], msg)
        return True

    def _worded_quant(self, msg: str) -> bool:
        """0.2-0.6 name the checkpoint's method in a sentence ("awq quantization is not fully optimized yet")."""
        if "quantization is not fully" not in msg and "serialized in " not in msg:
            return False
        m = _QUANT_WORDED.search(msg)
        if m and not self._f["quantization"]:
            self._f["quantization"] = (m.group(1) or m.group(2)).lower()
        return True

    def _identity(self, msg: str, line: str) -> None:
        f = self._f
        m = _ARGS.search(msg)
        if m:
            if not f["non_default_args"] and self._args_tries < 4:  # a log of bad reprs costs 4 evals, not one each
                self._args_tries += 1
                f["non_default_args"] = pyrepr.literal_dict(m.group(1))
                cut = not m.group(1).rstrip().endswith("}") or balance(m.group(1)) != 0
                self._repairs["lenient_args"] += bool(f["non_default_args"]) and cut  # the pairs that are whole
                speculation.from_args(f["speculative"], f["non_default_args"])
                quant = f["non_default_args"].get("quantization")
                if isinstance(quant, str) and not f["quantization"]:
                    f["quantization"] = quant
                self._load_format(f["non_default_args"].get("load_format"))
                model = f["non_default_args"].get("model_tag") or f["non_default_args"].get("model")
                if isinstance(model, str) and not f["served_model"]:
                    f["served_model"] = model
            return
        m = _ENGINE_INIT.search(msg)
        if m:
            if m.group(1):
                self._set_version(m.group(1), line)
            self._engine_config(m.group(2))
            return
        for rx in _VERSION_FORMS:
            m = rx.search(msg)
            if m:
                self._set_version(m.group(1), line)
                if m.lastindex and m.lastindex > 1 and not f["served_model"]:
                    f["served_model"] = m.group(2)
                return
        m = _LOGO_MODEL.search(msg)
        if m and not f["served_model"]:
            f["served_model"] = m.group(1)

    def _set_version(self, version: str, line: str) -> None:
        if not self._f["vllm_version"]:
            self._f["vllm_version"] = version.lstrip("v")
            self._evidence("version", line)

    def _load_format(self, value: Any) -> None:
        """--load-format as the server took it (the launch's flag, in non-default args or the engine config):
        `dummy` = random weights, whose outputs are never judged (judging/correctness.py)."""
        if isinstance(value, str) and value and not self._f["load_format"]:
            self._f["load_format"] = value.lower()[:40]

    def _engine_config(self, config: str) -> None:
        f = self._f
        m = _CONFIG_LOAD_FORMAT.search(config)
        self._load_format(m.group(1) if m else None)
        m = _CONFIG_MODEL.search(config)
        if m and not f["served_model"]:
            f["served_model"] = m.group(1)
        m = _CONFIG_QUANT.search(config)
        if m and m.group(1) != "None" and not f["quantization"]:
            f["quantization"] = m.group(1)
        speculation.from_engine_config(f["speculative"], config)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner.replace('\\"', '"') if value[0] == '"' else inner
    return value


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


_SPEC_PAIR = re.compile(r'"(method|num_speculative_tokens|moe_backend)"\s?:\s?(?:"([\w.-]{1,60})"|(\d{1,4}))')


def _spec_pairs(line: str) -> dict[str, Any] | None:
    """The pairs that matter of a --speculative-config JSON that does not parse (cut, or spliced with a shell
    variable: '{"method": "eagle3", "model": "'$MODEL'/draft"}')."""
    pairs = {m.group(1): m.group(2) or int(m.group(3)) for m in _SPEC_PAIR.finditer(line[:8000])}
    return pairs or None


def _tool_version(text: str) -> re.Match[str] | None:
    for rx in _TOOL_VERSIONS:
        if rx.pattern.startswith("^"):
            m = rx.match(text)
            if m:
                return m
            continue
        for i, m in enumerate(rx.finditer(text)):
            if i >= 8:
                break
            if not m.start() or text[m.start() - 1] in _WORD_START:
                return m
    return None
