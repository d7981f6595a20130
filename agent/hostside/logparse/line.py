"""One raw line -> (level, message): the wrappers users' tools put in front of vLLM's lines taken off, its header
split off, lost first characters put back; and the cheap tests that decide whether a line is read at all.

Its own family because every other one reads what it leaves: the unwrapping is shared, the facts are not. It keeps
no state. `Then` and `Guarded` are the bounded forms of `A.*B` and of a rare regex the other families match with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A real vLLM line is under 4 KiB (the engine config line is the longest).
MAX_LINE = 64 * 1024  # characters of a line that are looked at; the rest is dropped and counted

# --- unwrapping one raw line ---------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Wrappers users' tools put in front of each line: Kubernetes (CRI), `docker logs --timestamps`,
# journald, docker compose (`svc-1  | `), a Markdown quote. They may nest (compose + timestamps), hence a loop.
_WRAPPER = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)(?: (?:stdout|stderr) [FP])? "
    r"|[^\W\d_]{3,5}\.? [ \d]\d \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?: "  # journald, in any locale's month
    r"|[\w.-]+\s*\| "
    r"|>(?: ?>)* "  # a Markdown quote of someone's log (a reply on an issue)
    r"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\] )"  # a CI runner's stamp (Buildkite, GitHub Actions)
)
# "(" optional: a pasted line that lost its first characters still has "Worker_TP3 pid=7)" (or "orker_TP3 pid=7)").
# "(APIServer pid=1)", "(VllmWorker TP4 pid=7)", "(VllmWorker rank=2 pid=7)", "(RayWorkerWrapper pid=7, ip=10.0.0.2)"
PROC_TAGS = re.compile(r"^(?:\s*\(?[\w.-]+(?: [\w.=-]{1,40})? pid=\d+(?:, ip=[\d.]+)?\))+\s*")
_HEADER = re.compile(
    r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./<>-]+:\d+\]\s?"
)
_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")
# A header whose first characters were lost in copying ("NFO 11-29 ...", "RROR ...", "1-29 18:31:07 [x.py:9]"):
# still vLLM's, recognised by its clock and [file:line]. A level cut to 3+ characters still names one level.
_LEVEL_OF = {level[i:]: level for level in _LEVELS for i in range(len(level) - 2)}
_DAMAGED_HEADER = re.compile(r"^([A-Z]{0,8})\s*[\d-]{0,5} ?\d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./<>-]+:\d+\]\s?")
# A header abbreviated by hand ("INFO ... Using X", "WARNING [config.py:12] ...") and one behind other text (a shell
# prompt, a tool's own prefix): the level still says it is vLLM's logger speaking.
_LAX_HEADER = re.compile(
    r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):?\s+(?:[\d:.,-]{1,12}\s+){0,2}(?:\.\.\.|\u2026|\[[\w./<>-]+:\d+\])\s*"
)
_LATE_HEADER = re.compile(
    r"\s(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./<>-]+:\d+\]\s?"
)
# Two log lines pasted onto one: a second header inside a line starts a new line.
EMBEDDED_HEADER = re.compile(
    r"\s(?=\([\w.-]+(?: [\w.=-]{1,40})? pid=\d+\)\s|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d|INFO:\s{4})"
)  # uvicorn's own lines start "INFO:     "


def clean(raw: str) -> str:
    """The line as a human reads it: no colours, no wrapper of docker/journald/kubernetes."""
    line = _ANSI.sub("", raw) if "\x1b" in raw else raw
    for _ in range(3):
        m = _WRAPPER.match(line)
        if not m:
            break
        line = line[m.end() :]
    return line.strip()


def split_header(line: str) -> tuple[str, str]:
    """(level, message) of a cleaned line; level is "" for lines not from vLLM's logger."""
    level, msg, _ = split_header_damaged(line)
    return level, msg


def split_header_damaged(line: str) -> tuple[str, str, bool]:
    """(level, message, damaged): damaged when the prefix lost its first characters in copying (a process tag
    without "(", a cut level or date); the level is then the one the rest names, "?" when none is left."""
    damaged = False
    m = PROC_TAGS.match(line)
    if m:
        damaged = not line.lstrip().startswith("(")
        line = line[m.end() :]
    m = _HEADER.match(line)
    if m:
        return m.group(1), line[m.end() :], damaged
    if "]" in line and ":" in line:
        m = _DAMAGED_HEADER.match(line)
        if m:
            return _LEVEL_OF.get(m.group(1), "?"), line[m.end() :], True
    m = _LAX_HEADER.match(line)
    if m:
        return m.group(1), line[m.end() :], True
    m = _LATE_HEADER.search(line, 0, 256) if ":" in line else None
    if m:
        return m.group(1), line[m.end() :], True
    return "", line, damaged


# Known message starts. A pasted body that lost up to 4 first characters ("untimeError: ...", "sing 'MARLIN' ...")
# gets them back when what is left (4+ characters) is the rest of one of these.
_KNOWN_STARTS = (
    "Using ",
    "Selected ",
    "Initializing a",
    "non-default args",
    "Unknown vLLM environment variable",
    "Model loading took",
    "Loading model weights took",
    "Application startup complete",
    "Your GPU does not have native support",
    "Engine core initialization failed",
    "EngineCore failed to start",
    "RuntimeError",
    "ValueError",
    "AssertionError",
    "NotImplementedError",
    "AttributeError",
    "TypeError",
    "ImportError",
    "KeyError",
    "Assertion error",
    "torch.OutOfMemoryError",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
)


# What is left of each start after losing 1-4 characters, by its first 4 characters: one dict lookup per line.
_RESTS: dict[str, list[tuple[str, str]]] = {}
for _start in _KNOWN_STARTS:
    for _lost in range(1, 5):
        if len(_start) - _lost >= 4:
            _RESTS.setdefault(_start[_lost : _lost + 4], []).append((_start[_lost:], _start[:_lost]))


def restore_start(msg: str) -> str:
    """`msg` with lost first characters of a known message start put back ("" when nothing fits)."""
    for rest, lost in _RESTS.get(msg[:4], ()):
        if msg.startswith(rest):
            return lost + msg
    return ""


# A line is looked at only if it holds one of these. Each starts with a rare character (capital, "-", "(", the
# logo's block) and they are grouped by that character: the regex engine then skips most positions of a line
# with one table lookup, which keeps unknown lines at tens of MB/s.
_NEEDLES = (
    "Using ",
    "Selected ",
    "MoE",
    "LLM API server version",
    "LLM server version",
    "\u2588",
    "Initializing a",
    "Dumping ",  # dump_input.py: the engine failed in a step while serving
    "-default args",
    "Unknown vLLM",
    "AutoTuner",
    "No tuned config",
    "This causes a latency spike",
    "Model loading took",
    "Loading model weights took",
    "(profile, create kv cache",
    "KV cache size",
    "Available KV cache memory",
    "Application startup complete",
    "Uvicorn running",
    "Starting vLLM API server",
    "Available routes",
    "Methods: ",  # the route list: "Route: /v1/chat/completions, Methods: POST"
    "Draft acceptance rate",
    "Loading draft",
    "NVFP4 linear falling back",
    "Your GPU does not have native support for FP4",
    "Error",
    "ERROR",
    "CRITICAL",
    "Exception",
    "Interrupt",
    "Traceback",
    "Assert",
    "DeepGemm",
    "Unsupported architecture",
    "Unknown recipe",
    "Free memory",
    "CUDA out of memory",
    "OutOfMemory",
    "NV_ERR",
    "CUTE_DSL",
    "ptxas",
    "EngineCore failed",
    "EngineCore encountered",
    "Engine core proc",  # "Engine core proc EngineCore_DP0 died unexpectedly" (the client's monitor)
    "Engine core init",
    "Engine process failed",
    "WorkerProc failed",
    "Worker failed",
    "CUDA error",
    "CUDA_ERROR",
    "cudaError",
    "illegal memory access",
    "killed by signal",
    "Killed process",
    "OOM",
    "Out of memory",
    "Fatal Python error",
    "spark-agent supervisor:",
    "Got fatal signal",
    "[shutdown] ",  # 0.24+: the server was told to stop; what dies after it is no mid-run death
    # capability gates, FlashInfer's version check and DeepGEMM's C++ asserts, as pasted without their exception
    "requires SM",
    "requires sm_",
    "requires Blackwell",
    "supported on",
    "current device",
    "for CUDA device capability",
    "unavailable for",
    "No supported CUDA",
    "cubin version",
    "jit-cache version",
    "jit_cache version",
    "exit_code == 0",
    "is not defined for option",
    "No valid attention backend",
    'File "',  # a traceback's frame: vLLM's own, pasted without the exception, still says a start failed
    "Namespace(",  # 0.4-0.6: "args: Namespace(model='...', quantization='gptq', ...)"
    "Detected that the model can run with",
    "The speed can be slower",  # 0.2-0.6: "awq quantization is not fully optimized yet. The speed can be ..."
    "ssertion error",
    "untimeError",
    "alueError",
    "OutOfResources",  # Triton: "OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 65536"
    "requires GPUs with",  # FlashInfer's JIT: "FlashInfer requires GPUs with sm75 or higher"
    # out of memory in the allocator's own words, also when a wrapped paste lost "CUDA out of memory"
    "Tried to allocate",
    "B is free",
    "GiB total capacity",
    "Cuda failure",
    "CUBLAS_STATUS_ALLOC",
    # pydantic's line under a ValidationError, and a config's list of what it accepts
    "Value error",
    "[type=",
    "Input should be",
    "Valid options",
    "Valid choices",
    # the vLLM version as other tools print it (collect_env, `pip show vllm`, pip, an image tag, a wheel's name)
    "LLM Version",
    "LLM version",
    "LLM: ",
    "Name: vllm",
    "Version: ",
    "Successfully installed",
    "[pip3] vllm",
    "-openai:",
    "-cp3",
    # a launch pasted beside its log: the flags that say what was asked for
    "--speculative",
    "--moe-backend",
    "--attention-backend",
    "--linear-backend",
    "--quantization",
    "--model ",
    "--model=",
    "During handling of the above",  # a chained traceback: an exception happened, whatever the paste kept of it
    "The above exception",
)


def _grouped_alternation(needles: Iterable[str]) -> re.Pattern[str]:
    groups: dict[str, list[str]] = {}
    for needle in needles:
        groups.setdefault(needle[0], []).append(re.escape(needle[1:]))
    return re.compile("|".join(re.escape(first) + "(?:" + "|".join(rest) + ")" for first, rest in groups.items()))


PREFILTER = _grouped_alternation(_NEEDLES)


class Then:
    """`first.*then` without the regex: searched as written, a line holding `first` many times and `then`
    never backtracks once per occurrence (quadratic). The earliest `first` leaves the most room for `then`,
    so one search for each finds the same lines, and the match returned is `then`'s."""

    def __init__(self, first: str, then: str) -> None:
        self.first = re.compile(first)
        self.then = re.compile(then)

    def search(self, text: str) -> re.Match[str] | None:
        m = self.first.search(text)
        return self.then.search(text, m.end()) if m else None


class Guarded:
    """A regex tried only on text that holds `literal` (a substring test is far cheaper than a failed search)."""

    def __init__(self, literal: str, rx: str) -> None:
        self.literal = literal
        self.rx = re.compile(rx)

    def search(self, text: str) -> re.Match[str] | None:
        return self.rx.search(text) if self.literal in text else None


class GuardedAny:
    """A regex tried only on text that holds one of `literals` (an alternation with no common prefix scans slowly)."""

    def __init__(self, literals: tuple[str, ...], rx: str) -> None:
        self.literals = literals
        self.rx = re.compile(rx)

    def search(self, text: str) -> re.Match[str] | None:
        return self.rx.search(text) if any(lit in text for lit in self.literals) else None


Matcher = re.Pattern[str] | Then | Guarded | GuardedAny


def balance(text: str) -> int:
    """Open brackets minus closed ones (a wrapped list or call is still open when > 0)."""
    return text.count("[") + text.count("{") + text.count("(") - text.count("]") - text.count("}") - text.count(")")
