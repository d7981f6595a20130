"""vLLM server log -> facts: what really loaded, what vLLM ignored, and why a start failed.

One implementation for both sides: the host tails the log while the server starts (`Follower`, which
stops the wait as soon as a fatal signature shows), the controller parses collected logs (`parse`).
Standard library only. The log formats it reads (vLLM 0.12 .. 0.33) and their sources: docs/vllm-notes.md.

Speed matters: hours of periodic stats lines make logs big. Each line gets a cheap noise check and one
precompiled prefilter search; only the few lines that pass are unwrapped and matched in detail.

Nothing in a log is trusted, so the work is linear in its size and the memory bounded whatever it holds:
lines are cut at MAX_LINE characters (the cut is counted, the line still counts), every kept list has a
cap and a set behind it, no regex can backtrack over more than a bounded window (`A.*B` is two searches,
free-text captures have bounded repeats), and `parse_file` streams a file in pieces up to MAX_LOG_BYTES.
"""

from __future__ import annotations

import ast
import codecs
import copy
import json
import re
from collections.abc import Iterable
from typing import Any

from . import clusterlog, steady
from .contracts import Attestation, Failure

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
_PROC_TAGS = re.compile(r"^(?:\s*\(?[\w.-]+(?: [\w.=-]{1,40})? pid=\d+(?:, ip=[\d.]+)?\))+\s*")
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
_EMBEDDED_HEADER = re.compile(
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
    m = _PROC_TAGS.match(line)
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


# --- names ---------------------------------------------------------------------------------------

_ALIASES = {
    "deepgemm": "deep_gemm",
    "vllm_cutlass": "cutlass",
    "flashinfer_tensorrt_llm": "flashinfer_trtllm",
    "flashinfer_fp8_moe_trtllm": "flashinfer_trtllm",
    "rocm_aiter": "aiter",
    "cutlassblockscaledgroupedgemm": "cutlass",  # 0.9-0.13's FP8 block-scaled grouped GEMM: --moe-backend cutlass
    "cutlass_blockscaled_groupedgemm": "cutlass",
    "flash_attention": "flash_attn",
    "flashattention": "flash_attn",
}


def normalise_backend(name: str) -> str:
    """One spelling per backend: `MARLIN`, `'MARLIN'`, `AttentionBackendEnum.FLASHINFER`, `FlashInfer CUTLASS`,
    `BATCHED_TRITON` -> `marlin`, `flashinfer`, `flashinfer_cutlass`, `triton` (the value of the CLI flag that
    selects it). "" and "auto" mean no claim and give ""."""
    s = name.strip().strip("'\"").strip()
    if "." in s:  # an enum repr: AttentionBackendEnum.FLASHINFER, NvFp4LinearBackend.CUTLASS
        s = s.rsplit(".", 1)[1]
    s = re.sub(r"[\s\-]+", "_", s).lower()
    s = re.sub(r"_(?:mxfp4|mxfp8|bf16)(?=_|$)", "", s)  # "FlashInfer MXFP4 MXFP8 TRTLLM": the quant is no name
    if s in ("", "auto", "none"):
        return ""
    s = _ALIASES.get(s, s)
    if s.startswith("batched_"):  # same flag; vLLM picks the batched variant for DP/EP layouts
        s = s[len("batched_") :]
    if s.endswith("_batched"):
        s = s[: -len("_batched")]
    return _ALIASES.get(s, s)


_KERNEL_SUFFIX = re.compile(r"(?:ScaledMM)?(?:Linear)?Kernel$")
_QUANT_WORDS = re.compile(r"NvFp4|NVFP4|MxFp8|MXFP8|MxFp4|MXFP4|Fp8|FP8|Fp4|FP4|W4A16|W8A8|W4A8")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def linear_backend_of(kernel: str) -> str:
    """The --linear-backend value a GEMM kernel belongs to: `CutlassNvFp4LinearKernel` -> `cutlass`,
    `FlashInferB12xNvFp4LinearKernel` -> `flashinfer_b12x`, `NvFp4LinearBackend.MARLIN` -> `marlin`."""
    if "." in kernel or "_" in kernel or kernel.isupper():
        return normalise_backend(kernel)
    s = _QUANT_WORDS.sub("", _KERNEL_SUFFIX.sub("", kernel)).replace("FlashInfer", "Flashinfer")
    return normalise_backend(_CAMEL.sub("_", s))


def _quant_of(word: str) -> str:
    w = word.lower()
    for q in ("nvfp4", "mxfp8", "mxfp4", "fp8", "unquantized"):
        if q in w:
            return q
    return w


# --- what the lines say ----------------------------------------------------------------------------

# Periodic lines that make logs big and never matter (stats, access log, --enable-log-requests): skipped first.
_NOISE = (
    "Avg prompt throughput",
    "HTTP/1.",
    "Received request",
    "Generated response",
    "Finished request",
    "Added request",
    "Aborted request",
)
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
    "Application startup complete",
    "Uvicorn running",
    "Starting vLLM API server",
    "Available routes",
    "Methods: ",  # the route list: "Route: /v1/chat/completions, Methods: POST"
    "Draft acceptance rate",
    "Loading draft",
    "--linear-backend=",
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
)


def _grouped_alternation(needles: Iterable[str]) -> re.Pattern[str]:
    groups: dict[str, list[str]] = {}
    for needle in needles:
        groups.setdefault(needle[0], []).append(re.escape(needle[1:]))
    return re.compile("|".join(re.escape(first) + "(?:" + "|".join(rest) + ")" for first, rest in groups.items()))


_PREFILTER = _grouped_alternation(_NEEDLES)


class _Then:
    """`first.*then` without the regex: searched as written, a line holding `first` many times and `then`
    never backtracks once per occurrence (quadratic). The earliest `first` leaves the most room for `then`,
    so one search for each finds the same lines, and the match returned is `then`'s."""

    def __init__(self, first: str, then: str) -> None:
        self.first = re.compile(first)
        self.then = re.compile(then)

    def search(self, text: str) -> re.Match[str] | None:
        m = self.first.search(text)
        return self.then.search(text, m.end()) if m else None


class _Guarded:
    """A regex tried only on text that holds `literal` (a substring test is far cheaper than a failed search)."""

    def __init__(self, literal: str, rx: str) -> None:
        self.literal = literal
        self.rx = re.compile(rx)

    def search(self, text: str) -> re.Match[str] | None:
        return self.rx.search(text) if self.literal in text else None


_Matcher = re.Pattern[str] | _Then | _Guarded

_VERSION_FORMS = (
    re.compile(r"vLLM API server version (\S+?),?\s*$"),  # 0.12-0.14
    re.compile(r"vLLM server version (\S+), serving model (\S+)"),  # 0.15+ with VLLM_DISABLE_LOG_LOGO=1
    _Then("\u2588", r"\bversion (\d\S*)\s*$"),  # the logo
)
_LOGO_MODEL = _Then("\u2588", r"\bmodel\s+(\S+)\s*$")
# V0, V1, 0.2; and the same config in the dump a V1 engine writes when a step fails while serving (dump_input.py)
_ENGINE_INIT = re.compile(
    r"(?:Initializing an?|Dumping input data for) (?:V\d )?LLM engine (?:\(v([^)\s]+)\) )?with config: (.*)"
)
_CONFIG_MODEL = re.compile(r"(?:^|[ ,])model='([^']*)'")
_CONFIG_SPEC = re.compile(r"speculative_config=SpeculativeConfig\(method='([\w-]+)'(?:.*?num_spec_tokens=(\d+))?")
# V0 (0.5-0.8): the draft model stands where the method does; "[ngram]" is the n-gram proposer.
_CONFIG_DRAFT = re.compile(
    r"speculative_config=SpeculativeConfig\(draft_model='?([^',)]{1,300})'?(?:, num_spec_tokens=(\d+))?"
)
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
_NAMESPACE_SPEC = re.compile(r"[(, ]speculative_model='([^']{1,300})'")
_NAMESPACE_SPEC_TOKENS = re.compile(r"[(, ]num_speculative_tokens=(\d{1,4})\b")
_ARGS = re.compile(r"non-default args: (\{.*)")
_INFERENCE_JIT = re.compile(steady.INFERENCE_JIT)  # one wording, shared with the steady-state rule
_CONFIG_LOAD_FORMAT = re.compile(r"(?:^|[ ,])load_format=(?:LoadFormat\.)?'?(\w{1,40})")
_NAMESPACE_LOAD_FORMAT = re.compile(r"[(, ]load_format='(\w{1,40})'")
_UNKNOWN_ENV = re.compile(r"Unknown vLLM environment variable detected: ([A-Za-z_][A-Za-z0-9_]*)")

# 0.12-0.13 fp8.py: "Using FlashInfer FP8 MoE TRTLLM backend for SM100", "... CUTLASS backend for SM90/SM100"
_FLASHINFER_FP8 = re.compile(r"Using (FlashInfer) (FP8) MoE (TRTLLM|CUTLASS) backend")
# 0.10-0.18 gpt-oss (mxfp4.py) says only "Using Marlin backend" / "Using Triton backend" (no period: with one,
# "Using Triton backend." is XPU's attention); "[get_mxfp4_backend_with_lora] Using Marlin backend" too.
_MXFP4_BARE = re.compile(r"Using (Marlin|Triton) backend\s*$")
# (literal, form): a form is only tried on a message that holds its literal. A line of thousands of "Using "
# would otherwise cost every form a bounded scan at every "Using ".
_MOE_FORMS = (
    ("MoE backend", re.compile(r"Using '?([\w-]+)'? (\w+) MoE backend")),  # 0.15+: 'MARLIN' NvFp4 / TRITON Fp8
    (" backend for ", re.compile(r"Using ([\w -]{1,80}?) backend for (\w+) MoE")),  # 0.12-0.14: Marlin ... FP8 MoE
    ("FP8 MoE ", _FLASHINFER_FP8),
    # 0.10-0.13 NVFP4 (modelopt.py, compressed_tensors_moe.py): "Using Cutlass for ModelOptNvFp4FusedMoE.",
    # "Using FlashInfer CUTLASS kernels for ModelOptNvFp4FusedMoE.", "Using Marlin for
    # CompressedTensorsW4A4Nvfp4MoEMethod.", and nvfp4_moe_support.py's "Using FlashInfer kernels for %s."
    (
        "MoE",
        re.compile(
            r"Using (Marlin|Cutlass|FlashInfer(?: (?!kernels\b)[\w-]+)?)(?: kernels)? for "
            r"(?:ModelOpt(\w+?)FusedMoE|CompressedTensors\w*?(Nvfp4|Fp8|Mxfp4|WNA16)\w*MoEMethod)"
        ),
    ),
    # 0.9-0.11 FP8 (fp8.py): "Using DeepGemm kernels for Fp8MoEMethod.", "Using CutlassBlockScaledGroupedGemm ..."
    ("kernels for ", re.compile(r"Using (\w{1,80}) kernels for (Fp8|Fp4|NvFp4|Mxfp4)\w*MoEMethod")),
    # 0.20+ MXFP4 (compressed_tensors_moe_w4a4_mxfp4.py): "Using MarlinExperts for MXFP4 MoE"
    ("Experts", re.compile(r"Using (\w{1,80}?)Experts(?:\w{1,40})? for (MXFP4|NVFP4|FP8) MoE")),
    # 0.10-0.13 gpt-oss (mxfp4.py): "Using FlashInfer MXFP4 BF16 backend for SM90", "... for Blackwell-class GPU"
    ("MXFP4 ", re.compile(r"Using (FlashInfer (MXFP4)(?: [A-Z0-9]{2,8}){0,3}) backend")),
    (" backend", _MXFP4_BARE),
)
_ATTN_FORMS = (
    # auto (+ "out of potential backends"), and 0.2x short form
    (" attention backend", re.compile(r"Using ([\w.]+) attention backend")),
    # V0 / 0.2x short forms: "Using Flash Attention backend.", "Using XFormers backend.", "Using FLASHINFER backend"
    (
        " backend",
        re.compile(
            r"Using ((?:AttentionBackendEnum|_Backend)\.\w+|'?[A-Z][\w-]{0,40}'?(?: [A-Z][\w-]{0,40}){0,2})"
            r" backend\.?\s*$"
        ),
    ),
    (" backend on V1 engine", re.compile(r"Using ([\w ]{1,80}?) backend on V1 engine")),  # old V1
)
_LINEAR_FORMS = (
    # "Using CutlassNvFp4LinearKernel for NVFP4 GEMM" (0.15+); 0.12-0.14 name the backend: "Using flashinfer-cutlass
    # for NVFP4 GEMM"; 0.11 compressed-tensors "Using flashinfer-trtllm for FP4"; 0.16+ MXFP8/MXFP4 GEMMs likewise.
    (" GEMM", re.compile(r"Using ([\w.-]{1,200}?)(?: backend)? for (NVFP4|MXFP8|MXFP4) GEMM")),
    (" for FP4", re.compile(r"Using (flashinfer-[\w-]{1,40}|cutlass|marlin) for (FP4)\s*$")),
    ("Kernel for ", re.compile(r"Selected (\w{1,200}Kernel) for (\w+)")),
    ("LinearKernel for ", re.compile(r"Using (\w{1,200}LinearKernel) for (\w+)")),
)
# The GEMM's quantization method, as the linear lines name it ("Using MarlinLinearKernel for GPTQMarlinLinearMethod",
# "Selected MacheteLinearKernel for CompressedTensorsWNA16"): vLLM's own --quantization value for it.
_METHOD_QUANT = (
    ("AWQMarlin", "awq_marlin"),
    ("GPTQMarlin", "gptq_marlin"),
    ("GPTQBitBLAS", "gptq_bitblas"),
    ("AutoGPTQ", "gptq"),
    ("CompressedTensors", "compressed-tensors"),
    ("ModelOptNvFp4", "modelopt_fp4"),
    ("ModelOpt", "modelopt"),
    ("Mxfp4", "mxfp4"),
    ("Quark", "quark"),
)
_LINEAR_FALLBACK = re.compile(
    r"--linear-backend=\S{1,200} (?:has no kernel|was requested, but no)|NVFP4 linear falling back to the slow"
)
_MARLIN_FP4 = "Your GPU does not have native support for FP4 computation"
_OTHER_MODEL = re.compile(r"vit attention|[Vv]ision|[Ee]ncoder|\bViT\b|mm_encoder|MMEncoder")
_ALL_REDUCE = re.compile(r"all[-_ ]?reduce|allreduce|AllReduce|custom_ar", re.I)
_DRAFT_START = re.compile(r"Loading (?:drafter|draft) model")
_MODEL_LOAD = re.compile(r"(?:Model loading|Loading model weights) took ([\d.]+) Gi?B(?: memory)?(?: and ([\d.]+) s)?")
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
# Every version's wording: V0 "Speculative metrics: Draft acceptance rate: 0.651" (a fraction), 0.8-0.9 V1
# "SpecDecoding metrics: Draft acceptance rate: 57.1%", 0.10+ "... Avg Draft acceptance rate: 72.9%", and lines
# that give only the counts ("Accepted: 245 tokens, Drafted: 300 tokens").
_ACCEPT_RATE = re.compile(r"Draft acceptance rate: ([\d.]{1,20})(%?)")
_ACCEPT_COUNTS = re.compile(r"Accepted: (\d{1,20}) tokens, Drafted: (\d{1,20}) tokens")
_ENGINE_READY = "init engine (profile, create kv cache, warmup model) took"
_SERVER_MARKERS = re.compile(
    r"API server version|vLLM server version|api_server|APIServer|\u2588|Uvicorn|serving model"
)
# The server is up: uvicorn's lines, and what the API server says once the engine is ready ("Starting vLLM API
# server [0] on URL", then "Available routes are:" / one "Route: /path" line each).
_READY = re.compile(
    r"Application startup complete|Uvicorn running on|Starting vLLM API server (?:\d+ )?on |Available routes are"
    r"|^Route: /"
)

# --- serving: proof that the start was over ---------------------------------------------------------
# A server that answered a request (uvicorn's access line with 200), took one into its engine, or failed inside the
# engine's busy loop had started: what dies after that is a crash while serving, never a failed start. An excerpt
# can show this without the start's own lines.
_SERVED_ACCESS = re.compile(r'"(?:GET|POST|PUT|DELETE|PATCH) /\S{0,300} HTTP/\d(?:\.\d)?" 200\b')
_SERVED_REQUEST = ("Added request", "Received request", "Finished request", "Generated response")
# Only the loops that serve log these: V1's busy loop (core.py) and its step dump (dump_input.py, which carries the
# version and the engine config), the API server's output handler (started by the first request), and V0's engine
# loop (MQLLMEngine, AsyncLLMEngine).
_SERVING_ENGINE = re.compile(
    r"\bin (?:run_busy_loop|_process_engine_step|step_with_batch_queue|run_engine_loop|engine_step|output_handler)\b"
    r"|output_handler failed"
    r"|EngineCore encountered (?:a fatal error|an issue)|EngineDeadError|Dumping (?:input data|scheduler output)"
    r"|Engine core proc \w{1,40} died unexpectedly"
)
# V0's engine loop logs the exception's repr when it dies: "ERROR ... engine.py:158] NotImplementedError('...')"
_EXCEPTION_REPR = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\(")

# --- failure classes -------------------------------------------------------------------------------
# (class, signatures). Checked in this order on each line; the first that matches decides the line.
_FATAL_SIGNATURES: tuple[tuple[str, tuple[_Matcher, ...]], ...] = (
    (
        "deep_gemm_assert",
        (
            re.compile(
                r"DeepGemmQuantScaleFMT oracle cache not initialized"
                r"|hyperconnection\.hpp:\d+\): Unsupported architecture"
            ),
            _Then(r"layout\.hpp", "Unknown recipe"),
            _Then("deep_gemm", "Assertion"),
            # DeepGEMM's JIT/runtime asserts, whatever kernel they came from: "Assertion error (<path>.hpp:N): cond"
            # (DG_HOST_ASSERT's form) or its kernel_runtime "exit_code == 0" (the JIT compile failed).
            _Then(r"kernel_runtime\.hpp", r"Assert|exit_code == 0|!= nullptr"),
            _Then("jit_kernels/", r"Assert|exit_code == 0|!= nullptr"),
            _Then("ssertion error", r"\.(?:hpp|cuh):\d+"),
            # any error DeepGEMM's own sources raise ("CUDA driver error (.../deepgemm-src/.../runtime_utils.hpp:144)")
            _Then(r"deepgemm-src|DeepGEMM/csrc", r"\.(?:hpp|cuh):\d+"),
        ),
    ),
    (
        "no_moe_backend",
        (_Guarded("MoE backend supports the", r"No [\w ]{0,80}MoE backend supports the deployment configuration"),),
    ),
    ("unsupported_moe_backend", (re.compile(r"moe_backend='[^']*' is not supported for"),)),
    (
        "invalid_args",  # argparse refused the command line, or the config refused a value: nothing started
        (
            re.compile(
                r"^(?:usage: )?[\w./ -]{1,80}: error: (?:unrecognized arguments|argument |the following arguments"
                r"|invalid choice|ambiguous option|expected one argument)"
            ),
            re.compile(r"ValidationError: \d{1,4} validation errors? for \w{0,60}(?:Config|Args)\b"),
            _Guarded("does not match the quantization method", r"Quantization method specified in the model config"),
        ),
    ),
    ("attention_backend_invalid", (re.compile(r"Selected backend \S+ is not valid for this configuration"),)),
    (
        "cluster_incomplete",  # multi-node: the Ray cluster lacks the nodes or GPUs TP x PP needs
        (re.compile(r"exceeds the total number of available GPUs|placement group of \d+ GPU bundle"),),
    ),
    # Kernels' own errors, each its family's class (the failure names the backend and, where the message says it,
    # what the chip must have: Failure.requires). FlashInfer's JIT found no target for this GPU's architecture
    # (vllm#31740, flashinfer#3633); Triton's kernel needs more shared memory than the GPU has (vllm#36802).
    (
        "flashinfer_jit_arch",
        (
            _Guarded("No supported CUDA architectures found", "No supported CUDA architectures found"),
            _Guarded("requires GPUs with", r"FlashInfer requires GPUs with sm_?\d{2,3}"),
        ),
    ),
    ("triton_shared_memory", (_Guarded("out of resource", r"out of resource: shared memory"),)),
    # A backend that cannot run this deployment: the chip (compute capability: the hard requirement, said in any of
    # vLLM's and its kernels' words), the model ("FusedMoE flashinfer kernels are only supported for Llama4") or the
    # configuration ("X does not support the deployment configuration since ..."). The failure names the backend.
    (
        "unsupported_backend",  # each form tried only on text that holds its literal: near misses stay cheap
        (
            _Guarded("the deployment configuration since", r"does not support the deployment configuration since"),
            _Guarded("only supported ", r"(?:[Kk]ernels?|[Bb]ackend) (?:are|is) only supported (?:for|with|by) "),
            _Guarded(
                "requires ", r"requires (?:SM ?1\d\d|sm_?1\d\da?|Blackwell datacenter|datacenter Blackwell|Hopper)"
            ),
            _Guarded("upported ", r"supported (?:only )?on (?:[\w-]{1,20} ){0,4}\(?(?:SM ?\d{2,3}|sm_\d{2,3}a?)\b"),
            _Guarded("current device", r"does not support current device(?! since)"),
            _Guarded(" for CUDA device capability", r"compiled \w{1,80} for CUDA device capability"),
            _Guarded(" on current platform", r"unavailable for \w{1,80} on current platform"),
        ),
    ),
    ("no_attention_backend", (re.compile(r"No valid attention backend found"),)),
    ("free_memory_check", (_Then("Free memory on device", "is less than desired GPU memory utilization"),)),
    ("oom", (re.compile(r"CUDA out of memory|OutOfMemoryError|NV_ERR_NO_MEMORY"),)),
    ("ptxas_arch", (_Then("ptxas", r"sm_12\d"), re.compile(r"sm_12\da?'? is not defined for option"))),
    (
        "flashinfer_version",
        (_Then("cubin version ", " does not match"), _Then(r"jit[-_]cache version ", " does not match")),
    ),
    (
        "cute_dsl_arch",
        (re.compile(r"expects arch to be one of|CUTE_DSL_ARCH matches"), _Then("[Ee]rror", "CUTE_DSL_ARCH")),
    ),
)
# The engine died. "Dying" lines are logged with a traceback after them (its last line names the cause);
# "died" lines are the API server's final word, after the engine's traceback (or before, when streams interleave).
_ENGINE_DYING = re.compile(
    r"EngineCore failed to start|WorkerProc failed to start|Worker failed with error"
    r"|EngineCore encountered a fatal error|AsyncLLM output_handler failed"
)
_ENGINE_DIED = re.compile(
    r"Engine core initialization failed|Engine process failed to start|EngineDeadError"
    r"|Got fatal signal from worker processes"  # 0.7's V1 wording
    r"|Engine core proc \w{1,40} died unexpectedly"  # V1 core_client's monitor, which runs once the engine is up
)
# After readiness, the root cause of an engine that died mid-run: checked before the startup signatures. The OOM
# killer and signals leave no line of vLLM's own; the supervisor adds one when the server ends (SUPERVISOR_PREFIX).
_DEATH_CAUSES = (
    # a multi-node cell: a rank's Ray actor (its node) went away
    ("worker_lost", re.compile(r"ActorDiedError|ActorUnavailableError|The actor died unexpectedly|its node has died")),
    (
        "oom",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY|NV_ERR_NO_MEMORY"
            r"|Out of memory: Killed process|OOMKilled|OOM killer"
        ),
    ),
    ("cuda_error", re.compile(r"CUDA error|CUDA_ERROR_\w+|cudaError\w+|illegal memory access was encountered")),
    ("killed_by_signal", re.compile(r"killed by signal \d+|Fatal Python error: (?:Segmentation fault|Aborted)")),
)
SUPERVISOR_PREFIX = "spark-agent supervisor: "  # lines the host-side supervisor appends to a server's log
# "ValueError: ...", "torch.OutOfMemoryError: ...", and Ray's wrapper "ray.exceptions.RayTaskError(ValueError): ..."
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt)(?:\(\w{1,80}\))?(?::|$)")
# An exception named inside a sentence ("... and then it crashes with KeyError: 'model.layers.0'"): a paste's prose.
_PROSE_EXCEPTION = re.compile(r"(?<![\w.])(?:[A-Za-z_]\w{0,60}\.){0,4}[A-Z]\w{0,60}(?:Error|Exception): \S")
# A traceback's frame and caret lines: never the root cause, even when logged at ERROR level.
_FRAME_LINE = re.compile(r"^(?:\s|Traceback|File \"|\^)")
_MOE_CLASSES = ("no_moe_backend", "unsupported_moe_backend", "unsupported_backend")
ENDED_BEFORE_READY = "ended_before_ready"  # no error, no readiness: a cut log or an excerpt proves no start
# "X is disabled for this configuration": fatal when raised; a warning only explains a start that then fails with
# no cause of its own (the failure becomes this backend's).
_DISABLED = re.compile(r"([\w.-]{1,80}(?: [\w.-]{1,80}){0,3}) (?:is|are) disabled for this configuration")
# What a kernel's error says the chip must have: "major versions [10]", "sm75 or higher", "Required capability: 90 or
# 100", "requires SM100", "supported on SM90", "arch_major == 9", Triton's "Required: 81920, Hardware limit: 65536".
_REQUIRES = (
    (re.compile(r"for major versions \[([\d, ]{1,40})\]"), "compute capability {0}.x (FlashInfer's JIT targets)"),
    (re.compile(r"requires GPUs with (sm_?\d{2,3}a? or higher)"), "{0}"),
    (re.compile(r"Required capability: ([\d]{2,3}(?: or \d{2,3})*)"), "compute capability {0}"),
    (re.compile(r"requires (SM ?1\d\da?|sm_?1\d\da?|Blackwell datacenter|datacenter Blackwell|Hopper)"), "{0}"),
    (re.compile(r"supported (?:only )?on (?:[\w-]{1,20} ){0,4}\(?(SM ?\d{2,3}a?|sm_\d{2,3}a?)\b"), "{0}"),
    (re.compile(r"\barch_major == (\d{1,2})"), "compute capability {0}.x (DeepGEMM)"),
    (
        re.compile(r"shared memory, Required: (\d{1,9}), Hardware limit: (\d{1,9})"),
        "{0} bytes of shared memory per block (this GPU has {1})",
    ),
)
# The backend family a kernel's own failure class is about.
_CLASS_BACKEND = {
    "flashinfer_jit_arch": "flashinfer",
    "triton_shared_memory": "triton",
    "deep_gemm_assert": "deep_gemm",
    "flashinfer_version": "flashinfer",
}
# The candidate a selection line is about: "NvFp4 MoE backend 'FLASHINFER_TRTLLM' does not support ..."
_CANDIDATE = re.compile(r"backend '([\w-]{1,80})' does not support")
_BACKEND_CLASSES = ("unsupported_backend", "cutlass_disabled")  # classes whose `backend` the message names
_UNEXPLAINED = ("root_cause_not_in_excerpt",)  # a start that failed, its cause not shown (a log that just ends: no)
_BARE_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w+(?:Error|Exception)?:?\s*$")  # "AssertionError" with no message
# Backend names as messages spell them (class names, flag values, words): the failure's `backend`.
_BACKEND_WORDS = re.compile(
    r"(?i)(?<![a-z0-9])(flashinfer[_ -]?(?:cutlass|trtllm|trt-llm|tensorrt[_-]llm|cutedsl|cute[_-]dsl|b12x|mla)?"
    r"|vllm_cutlass|cutlass(?:_mla)?|marlin|deep_?gemm|triton(?:_attn|_mla)?|flash_?attn|flash[_ ]attention"
    r"|flash_?mla|aiter|b12x|machete|xformers|torch_sdpa|flex_attention|trtllm)"
)
# Names that are MoE (or GEMM) kernels, never attention: a bare "Using Marlin backend" is the MoE's.
_MOE_ONLY = {"marlin", "deep_gemm", "cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cutedsl", "b12x"}
_MOE_ERROR_QUANT = re.compile(r"\b(\w{1,40}) MoE\b")
_MAX_EVIDENCE = 12
_PARSE_CHUNK = 1 << 20

# Bounds (see the module docstring). A real vLLM line is under 4 KiB (the engine config line is the longest);
# a log of days of serving is a few GB.
MAX_LINE = 64 * 1024  # characters of a line that are looked at; the rest is dropped and counted
MAX_ITEMS = 64  # entries of each list of names or lines in the facts
MAX_RATES = 10_000  # acceptance-rate intervals kept (27 h of 10 s intervals)
MAX_LOG_BYTES = 8 * 1024**3  # parse_file stops here and says so

# Pasted fragments (see Attestation.confidence): what the parser repaired, and how it says so.
ROOT_CAUSE_MISSING = "root_cause_not_in_excerpt"  # only "Engine core initialization failed. See root cause above"
_REPAIRS = {
    "damaged": "line(s) whose vLLM prefix lost its first characters",
    "restored": "message(s) whose lost first characters were put back",
    "joined": "line(s) holding two log lines, split",
    "wrapped": "wrapped line(s) joined to the line they continue",
    "ellipsis": "list(s) cut with '...'",
    "lenient_args": "non-default args read pair by pair (the dict was cut or damaged)",
    "prose": "exception read from the paste's prose (no vLLM prefix; vLLM's frames around it)",
}
_MAX_WRAPPED = 16  # continuation lines joined to one open line
_CONTINUATION = "[]{}()'\",.=:0123456789"  # how a wrapped list or call carries on (or a lower-case word)
_ELLIPSIS = re.compile(r",\s?(?:\.\.\.|\u2026)\s*[\]})]*\.?\s*$")  # a list that ends "'A', ..."
_FRAME_SOURCE = re.compile(r"^(?:\s|File \")")  # a traceback's source line: its brackets never close below


def _new_facts() -> Attestation:
    """The facts of a log, "" / -1 / [] / {} where the log does not say. Backends are normalised (see
    normalise_backend), `*_raw` as logged. spec_acceptance_rates: fractions 0..1, one per logged interval.
    evidence: axis (moe, attention, linear, linear_fallback, marlin_fp4, draft_load, draft_moe, version,
    unknown_env:VAR) -> the first line that said it."""
    return {
        "vllm_version": "",
        "served_model": "",
        "non_default_args": {},
        "moe_backend": "",
        "moe_backend_raw": "",
        "moe_quant": "",
        "quantization": "",
        "attention_backend": "",
        "linear_kernels": [],
        "linear_backend": "",
        "linear_fallbacks": [],
        "marlin_fp4_weight_only": False,
        "unknown_env": [],
        "autotuner_cliff_count": 0,
        "jit_warning_count": 0,
        "load_format": "",
        "speculative": {
            "method": "",
            "num_speculative_tokens": -1,
            "draft_moe_backend": "",
            "draft_moe_backend_raw": "",
            "draft_attention_backend": "",
            "requested_moe_backend": "",
        },
        "spec_acceptance_rates": [],
        "model_load_gib": -1.0,
        "model_load_s": -1.0,
        "kv_cache_tokens": -1,
        "engine_ready": False,
        "startup_complete": False,
        "other_model_lines": [],  # vision tower / encoder / all-reduce choices: kept apart, never the answer
        "failure": {},
        "runtime_failure": {},  # after readiness: {class, root_cause, evidence} of an engine that died mid-run
        "evidence": {},
        "vllm_log_lines": 0,
        "cluster": clusterlog.new(),
        "confidence": "",
        "repairs": [],
    }


class Follower:
    """Reads a vLLM log line by line (the host tails it during startup; `parse` feeds a whole file).

    `.fatal` is a failure dict as soon as a fatal signature is seen before readiness, else None;
    `.ready` turns True at `Application startup complete`. `feed(text)` takes whole lines (one or many);
    `feed_chunk(data)` takes arbitrary pieces of a stream and keeps a cut-off last line for the next call
    (at most MAX_LINE characters of it: a line that never ends costs no memory).
    `.lines_cut` counts lines longer than MAX_LINE, `.items_dropped` list entries past their cap.
    """

    def __init__(self) -> None:
        self.fatal: Failure | None = None
        self.ready = False
        self.lines_cut = 0
        self.items_dropped = 0
        self.bytes_read = 0  # parse_file's count
        self.stopped_early = False  # parse_file reached its byte cap before the end of the file
        self._f = _new_facts()
        self._seen: dict[str, set[str]] = {}  # list key -> what the list holds, for O(1) de-duplication
        self._partial_cut = False
        self._args_tries = 0
        self._in_draft = False
        self._server_seen = False
        self._last_exception = ""
        self._last_error = ""
        self._last_words = ""  # the last line that is neither vLLM's log nor the supervisor's: the process's own
        self._dying = False
        self._fail_lines: list[str] = []
        self._death: dict[str, Any] = {"class": "", "root_cause": "", "evidence": []}  # dying after readiness
        self._death_dying = False
        self._stopping = False  # the server was told to stop (0.24+: "[shutdown] ... signal=SIGTERM")
        self._partial = ""
        self._cluster = clusterlog.ClusterFollower()
        self._open = ""  # a line whose brackets are not closed yet: wrapped lines that continue it are joined
        self._open_lines = 0
        self._repairs = dict.fromkeys(_REPAIRS, 0)
        self._disabled = ""  # a "... is disabled for this configuration" warning (see _DISABLED)
        self._rejected: list[tuple[str, str]] = []  # (part, message): candidates automatic selection passed over
        self._prose_exception = ""  # an exception named inside prose (see _PROSE_EXCEPTION)
        self._early_death = ("", "", "")  # (class, message, line): a runtime cause seen before the log showed serving
        self._error_frames = False
        self._probe = 256  # lines still looked at for a vLLM prefix while none was seen (see _probe_line)
        self._served = False  # the log shows the server serving (see _SERVED_ACCESS): the start was over

    # -- input --
    def feed(self, text: str) -> None:
        handle = self._handle
        self._note_last_words(text)
        for line in text.split("\n"):
            if len(line) > MAX_LINE:
                line = line[:MAX_LINE]
                self.lines_cut += 1
            if self._open:
                if self._continues(line):
                    continue
                self._close_open()
            if (
                (
                    "HTTP/1." in line
                    or "Avg prompt throughput" in line
                    or "Received request" in line  # = _NOISE,
                    or "Generated response" in line
                    or "Finished request" in line  # spelled out: any() is 4x slower
                    or "Added request" in line
                    or "Aborted request" in line
                )
                and line.count(" pid=") < 2  # unless another line was pasted onto it
                and "startup complete" not in line
            ):
                if not (self.ready or self._served) and (
                    _SERVED_ACCESS.search(line) or any(r in line for r in _SERVED_REQUEST)
                ):
                    self._serving(clean(line), api=True)
                continue
            if "SpecDecoding metrics" in line:  # periodic, and wanted: the cheap path
                self._acceptance(line)
                continue
            if clusterlog.interesting(line):  # multi-node: world size, TP/PP, Ray nodes, NCCL transport
                self._cluster.feed(line)
            if not self._server_seen and _SERVER_MARKERS.search(line):
                self._server_seen = True
            if self._probe:  # only at the start of a log that has shown no vLLM line yet
                self._probe_line(line)
            if "\r" in line:  # progress bars redraw with CR; each piece is its own line
                for piece in line.split("\r"):
                    if _PREFILTER.search(piece):
                        handle(piece)
            elif _PREFILTER.search(line) or ": error: " in line or "for this configuration" in line:
                handle(line)

    def _note_last_words(self, text: str) -> None:
        """A server that dies before vLLM logs anything (python cannot import it, a missing binary) says why in a
        bare line: kept so the failure names it. Only the last few lines are looked at (cheap on any log)."""
        for raw in reversed(text.rstrip().rsplit("\n", 8)[-8:]):
            line = clean(raw[:MAX_LINE]).rstrip()
            if not line.strip() or line.startswith(SUPERVISOR_PREFIX) or _FRAME_LINE.match(line.strip()):
                continue
            if not split_header(line)[0] and _LAST_WORDS.match(line):  # an error said at column 0, not prose
                self._last_words = line
            return

    def feed_chunk(self, data: str) -> None:
        last = data.rfind("\n")
        if last < 0:
            self._hold(data)
            return
        start = 0
        if self._partial or self._partial_cut:  # the held line ends in this chunk
            start = data.find("\n") + 1
            self._hold(data[: start - 1])
            self._feed_held()
        if start <= last:
            self.feed(data[start:last])
        self._hold(data[last + 1 :])

    def flush(self) -> None:
        """Feed what `feed_chunk` held back (a last line without newline: a log cut off mid-line)."""
        if self._partial or self._partial_cut:
            self._feed_held()
        self._close_open()

    def _probe_line(self, line: str) -> None:
        """A log whose first lines hold no fact is still vLLM's when they carry its prefix: the first such line
        counts (then this check stops, and it stops for good after 256 lines: a cost only at the start)."""
        self._probe -= 1
        if ("INFO" in line or "WARN" in line or "ERROR" in line or "DEBUG" in line) and not _PREFILTER.search(line):
            level, _, damaged = split_header_damaged(clean(line))
            if level and not damaged:
                self._f["vllm_log_lines"] += 1
                self._probe = 0

    # -- wrapped lines: a list or call whose brackets close on a later line (pasted, or wrapped by a terminal) --
    def _continues(self, line: str) -> bool:
        """Join `line` to the open one if it carries on its brackets; True when it was taken."""
        piece = clean(line)
        if not piece or self._open_lines >= _MAX_WRAPPED or len(self._open) + len(piece) > MAX_LINE:
            return False
        carries_on = piece[0] in _CONTINUATION or piece[0].islower() or self._open.rstrip().endswith(",")
        if not carries_on or _PROC_TAGS.match(piece):
            return False
        if split_header(piece)[0]:  # a line of its own
            return False
        self._open += " " + piece
        self._open_lines += 1
        if _balance(self._open) <= 0 or _ELLIPSIS.search(piece):
            self._close_open()
        return True

    def _close_open(self) -> None:
        if self._open:
            if self._open_lines:
                self._repairs["wrapped"] += 1
            line, self._open, self._open_lines = self._open, "", 0
            self._handle(line, joined=True)

    def _hold(self, piece: str) -> None:
        room = MAX_LINE - len(self._partial)
        if len(piece) > room:
            self._partial += piece[: max(room, 0)]
            self._partial_cut = True
        else:
            self._partial += piece

    def _feed_held(self) -> None:
        line, self._partial = self._partial, ""
        if self._partial_cut:
            self.lines_cut += 1
            self._partial_cut = False
        self.feed(line)

    def limits(self) -> dict[str, Any]:
        """What the bounds dropped: {lines_cut, items_dropped, bytes_read, stopped_early}."""
        return {
            "lines_cut": self.lines_cut,
            "items_dropped": self.items_dropped,
            "bytes_read": self.bytes_read,
            "stopped_early": self.stopped_early,
        }

    # -- output --
    def facts(self) -> Attestation:
        self._close_open()  # a wrapped line still open at the end of what was read counts as it is
        f = copy.deepcopy(self._f)  # the caller's to keep: later lines must not change it
        f["startup_complete"] = self.ready or (f["engine_ready"] and not self._server_seen)
        backends = sorted({linear_backend_of(k) for k in f["linear_kernels"]} - {""})
        f["linear_backend"] = backends[0] if len(backends) == 1 else ("mixed" if backends else "")
        f["failure"] = {} if f["startup_complete"] or self._served else self._failure()
        f["runtime_failure"] = self._runtime_failure()
        f["cluster"] = self._cluster.result()
        f["repairs"] = [f"{n} {_REPAIRS[key]}" for key, n in self._repairs.items() if n]
        f["confidence"] = self._confidence(f)
        return f

    def _confidence(self, f: Attestation) -> str:
        damaged = (
            self._repairs["damaged"]
            or self._repairs["restored"]
            or self._repairs["lenient_args"]
            or self._repairs["prose"]
        )
        if f["vllm_log_lines"] == 0 and not _recognised(f) and not self._repairs["prose"]:
            return ""
        if damaged or f["vllm_log_lines"] == 0:  # beside prefixed lines, bare ones (uvicorn, print) are normal
            return "low"
        return "high"

    # -- one line --
    def _handle(self, raw: str, joined: bool = False, piece: bool = False) -> None:
        line = clean(raw)
        level, msg, damaged = split_header_damaged(line)
        if not piece and (
            " pid=" in msg
            or msg.find("INFO:    ", 1) > 0
            or (level and ("INFO " in msg or "WARNING " in msg or "ERROR " in msg))
        ):
            pieces = self._pieces(msg)
            if len(pieces) > 1:  # lines pasted as one
                self._repairs["joined"] += 1
                self._handle(line[: len(line) - len(msg)] + pieces[0], joined, piece=True)
                for rest in pieces[1:]:
                    self._handle(rest, joined, piece=True)
                return
        if not joined and _balance(msg) > 0 and not _FRAME_SOURCE.match(msg):
            self._open, self._open_lines = raw, 0  # wait for the lines that close it
            if not self.ready and _signature_of(msg):  # but a fatal line stops a start now; the whole one follows
                self._watch_failure(level, msg, line)
            return
        if (not level or damaged) and msg and not msg[0].isupper() and msg[0] not in "([-'\"{ ":
            restored = restore_start(msg)
            if restored:
                msg, damaged = restored, True
                self._repairs["restored"] += 1
        if damaged:
            self._repairs["damaged"] += 1
        if level:
            self._f["vllm_log_lines"] += 1
            self._probe = 0
        if ("..." in msg or "\u2026" in msg) and _ELLIPSIS.search(msg):
            self._repairs["ellipsis"] += 1
        if not (self.ready or self._served) and _SERVING_ENGINE.search(msg):  # an excerpt that starts mid-serving
            self._serving(line, api=False)
        if not (self.ready or self._served):
            self._watch_failure(level, msg, line)
        else:
            self._watch_death(level, msg, line)
        if "Using " in msg or "Selected " in msg:
            self._using(msg, line)
        else:
            self._other(msg, line)

    @staticmethod
    def _pieces(msg: str) -> list[str]:
        """A message split where another log line starts inside it (at most MAX_ITEMS pieces)."""
        pieces: list[str] = []
        start = 0
        while len(pieces) < MAX_ITEMS:
            m = _EMBEDDED_HEADER.search(msg, start)
            if not m:
                break
            pieces.append(msg[start : m.start()])
            start = m.end()
        return [*pieces, msg[start:]]

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

    def _add(self, key: str, value: str) -> bool:
        """Append `value` to the facts list `key` once; past MAX_ITEMS entries it is counted, not kept."""
        seen = self._seen.setdefault(key, set())
        if value in seen:
            return False
        items: list[str] = self._f[key]  # type: ignore[literal-required]  # one of the list keys of Attestation
        if len(items) >= MAX_ITEMS:
            self.items_dropped += 1
            return False
        seen.add(value)
        items.append(value)
        return True

    def _evidence(self, axis: str, line: str) -> None:
        self._f["evidence"].setdefault(axis, line)

    def _using(self, msg: str, line: str) -> None:
        if _ALL_REDUCE.search(msg) or _OTHER_MODEL.search(msg):
            self._add("other_model_lines", line)
            return
        for literal, rx in _MOE_FORMS:
            m = rx.search(msg) if literal in msg else None
            if m:
                return self._moe(m, line)
        for literal, rx in _LINEAR_FORMS:
            m = rx.search(msg) if literal in msg else None
            if m:
                return self._linear(m, line)
        for literal, rx in _ATTN_FORMS:
            m = rx.search(msg) if literal in msg else None
            if m:
                return self._attention(m.group(1), line)
        self._other(msg, line)

    def _moe(self, m: re.Match[str], line: str) -> None:
        quants = [g for g in m.groups()[1:] if g]
        if m.re is _FLASHINFER_FP8:  # "FlashInfer ... TRTLLM": the name in two parts
            raw, quant = f"{m.group(1)} {m.group(3)}", m.group(2)
        else:
            raw, quant = m.group(1), quants[0] if quants else ("mxfp4" if m.re is _MXFP4_BARE else "")
        if quant.lower() == "mxfp4":  # the MXFP4 lines are gpt-oss's: the checkpoint's method
            self._quantization("mxfp4")
        spec = self._f["speculative"]
        if self._in_draft:
            if not spec["draft_moe_backend_raw"]:
                spec["draft_moe_backend_raw"] = raw
                spec["draft_moe_backend"] = normalise_backend(raw)
                self._evidence("draft_moe", line)
            return
        if self._f["moe_backend_raw"]:  # the first line of the main model wins
            return
        self._f["moe_backend_raw"] = raw
        self._f["moe_backend"] = normalise_backend(raw)
        self._f["moe_quant"] = _quant_of(quant)
        self._evidence("moe", line)

    def _attention(self, name: str, line: str) -> None:
        if normalise_backend(name) in _MOE_ONLY:  # "Using Marlin backend": a MoE kernel named without its quant
            if not self._f["moe_backend_raw"] and not self._in_draft:
                self._f["moe_backend_raw"] = name.strip("'\"")
                self._f["moe_backend"] = normalise_backend(name)
                self._evidence("moe", line)
            return
        if self._in_draft:
            spec = self._f["speculative"]
            if not spec["draft_attention_backend"]:
                spec["draft_attention_backend"] = normalise_backend(name)
            return
        if not self._f["attention_backend"]:
            self._f["attention_backend"] = normalise_backend(name)
            self._evidence("attention", line)

    def _linear(self, m: re.Match[str], line: str) -> None:
        kernel = m.group(1)
        if self._in_draft:
            return
        method = m.group(2) if m.lastindex and m.lastindex > 1 else ""
        quant = next((q for word, q in _METHOD_QUANT if word in method), "") if method else ""
        self._quantization(quant or (method.lower() if method in ("MXFP4", "MXFP8") else ""))
        if self._add("linear_kernels", kernel):
            self._evidence("linear", line)

    def _other(self, msg: str, line: str) -> None:
        f = self._f
        if _DRAFT_START.search(msg):
            self._in_draft = True
            self._evidence("draft_load", line)
            return
        m = _MODEL_LOAD.search(msg)
        if m:
            self._in_draft = False
            if f["model_load_gib"] < 0:
                f["model_load_gib"] = float(m.group(1))
                f["model_load_s"] = float(m.group(2)) if m.group(2) else -1.0
            return
        if "Unknown vLLM environment" in msg:
            m = _UNKNOWN_ENV.search(msg)
            if m and self._add("unknown_env", m.group(1)):
                self._evidence("unknown_env:" + m.group(1), line)
            return
        if "No tuned config covers" in msg or "perf cliff" in msg:
            f["autotuner_cliff_count"] += 1
            return
        if "during inference" in msg and _INFERENCE_JIT.search(msg):
            f["jit_warning_count"] += 1
            return
        if _LINEAR_FALLBACK.search(msg):
            self._add("linear_fallbacks", msg)
            self._evidence("linear_fallback", line)
            return
        if _MARLIN_FP4 in msg:
            f["marlin_fp4_weight_only"] = True
            self._evidence("marlin_fp4", line)
            return
        if "acceptance rate" in msg or "Drafted: " in msg:
            self._acceptance(msg)
            return
        m = _CONVERTIBLE.search(msg) if "convertible to" in msg or "so forcing" in msg else None
        if m:
            f["quantization"] = f["quantization"] or m.group(1) or m.group(2)
            return
        if "Namespace(" in msg and _NAMESPACE.search(msg):
            m = _NAMESPACE_MODEL.search(msg)
            if m and not f["served_model"]:
                f["served_model"] = m.group(1)
            m = _NAMESPACE_QUANT.search(msg)
            if m and not f["quantization"]:
                f["quantization"] = m.group(1)
            m = _NAMESPACE_LOAD_FORMAT.search(msg)
            self._load_format(m.group(1) if m else None)
            m = _NAMESPACE_SPEC.search(msg)
            spec = f["speculative"]
            if m and not spec["method"]:
                spec["method"] = _draft_method(m.group(1))
                m = _NAMESPACE_SPEC_TOKENS.search(msg)
                spec["num_speculative_tokens"] = int(m.group(1)) if m else spec["num_speculative_tokens"]
            return
        if "quantization is not fully" in msg or "serialized in " in msg:
            m = _QUANT_WORDED.search(msg)
            if m and not f["quantization"]:
                f["quantization"] = (m.group(1) or m.group(2)).lower()
            return
        if _READY.search(msg):
            self.ready = True
            self._in_draft = False
            return
        if _ENGINE_READY in msg:
            f["engine_ready"] = True
            self._in_draft = False
            return
        m = _KV_TOKENS.search(msg)
        if m:
            self._in_draft = False  # models are loaded once the KV cache is sized, even with no "Model loading took"
            if f["kv_cache_tokens"] < 0:
                f["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
            return
        self._identity(msg, line)

    def _identity(self, msg: str, line: str) -> None:
        f = self._f
        m = _ARGS.search(msg)
        if m:
            if not f["non_default_args"] and self._args_tries < 4:  # a log of bad reprs costs 4 evals, not one each
                self._args_tries += 1
                f["non_default_args"] = _literal_dict(m.group(1))
                cut = not m.group(1).rstrip().endswith("}") or _balance(m.group(1)) != 0
                self._repairs["lenient_args"] += bool(f["non_default_args"]) and cut  # the pairs that are whole
                self._args_speculative(f["non_default_args"])
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

    def _quantization(self, method: str) -> None:
        """The checkpoint's method from a line that names it: the engine config and the args, read earlier, win."""
        if method and not self._f["quantization"]:
            self._f["quantization"] = method

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
        f, spec = self._f, self._f["speculative"]
        m = _CONFIG_LOAD_FORMAT.search(config)
        self._load_format(m.group(1) if m else None)
        m = _CONFIG_MODEL.search(config)
        if m and not f["served_model"]:
            f["served_model"] = m.group(1)
        m = _CONFIG_QUANT.search(config)
        if m and m.group(1) != "None" and not f["quantization"]:
            f["quantization"] = m.group(1)
        m = _CONFIG_SPEC.search(config) or _CONFIG_DRAFT.search(config)
        if m and not spec["method"] and m.group(1) != "None":
            spec["method"] = m.group(1) if m.re is _CONFIG_SPEC else _draft_method(m.group(1))
            if m.group(2):
                spec["num_speculative_tokens"] = int(m.group(2))

    def _args_speculative(self, args: dict[str, Any]) -> None:
        spec = self._f["speculative"]
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

    # -- failures --
    def _watch_failure(self, level: str, msg: str, line: str) -> None:
        cls = _signature_of(msg)
        if cls == "unsupported_backend" and level in ("DEBUG", "INFO") and self._passed_over(msg, line):
            return
        if not cls and "disabled for this" in msg and _DISABLED.search(msg):
            if level in ("ERROR", "CRITICAL") or _EXCEPTION_LINE.match(msg) or "ssert" in msg:
                cls = _disabled_class(msg)
            elif level not in ("INFO", "DEBUG"):  # a warning (or a bare paste); an INFO note explains nothing
                self._disabled = self._disabled or msg
                self._keep(line)
                return
        if not cls and msg.startswith(SUPERVISOR_PREFIX):  # killed while starting (the OOM killer, loading weights)
            cls = _death_cause_of(msg)
        if cls:
            self._keep(line)
            if self.fatal is None or self.fatal["class"] in ("engine_init_failed", ROOT_CAUSE_MISSING):
                self._declare(cls, msg)  # the first decisive line wins; "engine died" gives way to its cause
            elif self.fatal["class"] == cls and _EXCEPTION_LINE.match(msg):
                self._declare(cls, msg)  # the exception line says it better than the traceback's source line
            return
        if not self._early_death[0] and level in ("ERROR", "CRITICAL"):  # a cause that a later line may show was
            death_cls = _death_cause_of(msg)  # a crash while serving (an excerpt that starts mid-crash)
            if death_cls:
                self._early_death = (death_cls, msg, line)
        final = bool(_ENGINE_DIED.search(msg))
        if final or _ENGINE_DYING.search(msg):
            self._keep(line)
            if final and self.fatal and self.fatal["class"] == ROOT_CAUSE_MISSING and _EXCEPTION_LINE.match(msg):
                self.fatal["root_cause"] = msg  # the wrapper's exception line says it better than its source line
            self._dying = True  # a traceback follows; its exception line is the decisive one
            if final and self.fatal is None:
                cause = self._last_exception or self._last_error
                # Only the generic wrapper survived (a pasted excerpt, a cut log): say so, never guess.
                self._declare("engine_init_failed" if cause else ROOT_CAUSE_MISSING, cause or msg)
            return
        if _EXCEPTION_LINE.match(msg):
            self._last_exception = msg
            if self._dying and (self.fatal is None or self.fatal["class"] == ROOT_CAUSE_MISSING):
                self._keep(line)
                self._declare("engine_init_failed", msg)
        elif level in ("ERROR", "CRITICAL") and not _FRAME_LINE.match(msg):
            self._last_error = msg
        elif level in ("ERROR", "CRITICAL") or ("/vllm/" in msg and msg.lstrip().startswith('File "')):
            self._error_frames = True  # a traceback (logged as errors, or vLLM's own frames): something failed
        elif not level and not self._prose_exception and ("Error: " in msg or "Exception: " in msg):
            m = _PROSE_EXCEPTION.search(msg)
            if m and not _FRAME_LINE.match(msg):
                self._prose_exception = msg[m.start() :]

    def _serving(self, line: str, api: bool) -> None:
        """The log shows the server at work: the start was over (ready when the API server answered). A failure
        declared from lines before this one (an excerpt that begins with the API server's EngineDeadError) was a
        crash while serving: its lines move to the runtime failure, and the start failed no more."""
        self._served = True
        self._f["evidence"].setdefault("served", line)
        if api:
            self.ready = True
        else:
            self._f["engine_ready"] = True
        early_cls, early_msg, early_line = self._early_death
        if early_cls and not self._death["class"]:
            self._death["class"], self._death["root_cause"] = early_cls, early_msg
            self._keep_death(early_line)
        if self.fatal is not None:
            cls = self.fatal.get("class", "")
            if cls not in ("engine_init_failed", ROOT_CAUSE_MISSING) and not self._death["class"]:
                self._death["class"], self._death["root_cause"] = cls, self.fatal.get("root_cause", "")
            for kept in self._fail_lines:
                self._keep_death(kept)
            self._death_dying = True
        self.fatal, self._fail_lines, self._dying = None, [], False

    # -- candidates that automatic selection passed over --
    def _passed_over(self, msg: str, line: str) -> bool:
        """A DEBUG/INFO line saying a candidate backend cannot run ("NvFp4 MoE backend 'FLASHINFER_TRTLLM' does not
        support the deployment configuration since ...") while vLLM goes on to select another: no failure, unless
        that backend was asked for. Kept: it becomes the cause if the start then fails with nothing selected."""
        m = _CANDIDATE.search(msg) or _BACKEND_WORDS.search(msg)
        name = normalise_backend(m.group(1)) if m else ""
        part = "attention" if "ttention" in msg else ("moe" if "MoE" in msg or "Experts" in msg else "linear")
        args = self._f["non_default_args"]
        asked = normalise_backend(str(args.get(f"{part}_backend", "") or "")) if isinstance(args, dict) else ""
        if name and name == asked:
            return False
        if len(self._rejected) < _MAX_EVIDENCE:
            self._rejected.append((part, msg))
        self._evidence(f"passed_over:{name or part}", line)
        return True

    def _fallback_cause(self) -> str:
        """The cause of a start that failed without one of its own: a candidate passed over for a part where nothing
        was selected after it, else a backend's "disabled for this configuration" warning."""
        f = self._f
        selected = {"moe": f["moe_backend"], "attention": f["attention_backend"], "linear": bool(f["linear_kernels"])}
        for part, msg in self._rejected:
            if not selected[part]:
                return msg
        return self._disabled

    def _watch_death(self, level: str, msg: str, line: str) -> None:
        """After readiness: lines that say the engine died mid-run and why. They name the root cause of a death
        the host saw (the supervisor's exit line, a dead /health); on their own they prove nothing."""
        if msg.startswith("[shutdown] ") and ("signal=SIG" in msg or "shutdown triggered" in msg):
            self._stopping = True
        if self._stopping:
            # vLLM 0.24 tears the engine down under the API server's output handler, which then logs
            # EngineDeadError (tests/data/logs/vllm-0.24-h200/h200-fp8-deep_gemm.log): a stop, not a death
            return
        death = self._death
        cls = _death_cause_of(msg)
        if cls:
            self._keep_death(line)
            if death["class"] in ("", "other"):  # the first line that names a cause wins
                death["class"], death["root_cause"] = cls, msg
            return
        if _ENGINE_DIED.search(msg) or _ENGINE_DYING.search(msg):
            self._keep_death(line)
            self._death_dying = True  # a traceback follows; its exception line is the cause
            return
        if msg.startswith(("Dumping input data", "Dumping scheduler output")):  # a step failed: its traceback follows
            self._keep_death(line[: line.find(" with config: ") + 1 or 300] + "...")  # the config itself is no cause
            self._death_dying = True
            return
        if level in ("ERROR", "CRITICAL") and _EXCEPTION_REPR.match(msg):  # V0's engine loop died of this
            self._keep_death(line)
            if death["class"] in ("", "other"):
                death["class"], death["root_cause"] = "other", msg
            return
        if msg.startswith(SUPERVISOR_PREFIX) or (self._death_dying and _EXCEPTION_LINE.match(msg)):
            self._keep_death(line)
            if not death["class"]:
                death["class"], death["root_cause"] = "other", msg
        elif level in ("ERROR", "CRITICAL") and self._death_dying:
            self._keep_death(line)

    def _keep_death(self, line: str) -> None:
        evidence = self._death["evidence"]
        if len(evidence) < _MAX_EVIDENCE and line not in evidence:  # at most _MAX_EVIDENCE lines to look through
            evidence.append(line)

    def _runtime_failure(self) -> Failure:
        if not self._death["evidence"]:
            return Failure()
        return Failure(
            {
                # only the engine's "died" lines, no exception after them: the cause is not in this log
                "class": self._death["class"] or (ROOT_CAUSE_MISSING if self._death_dying else "other"),
                "root_cause": self._death["root_cause"] or self._death["evidence"][-1],
                "evidence": list(self._death["evidence"]),
            }
        )

    def _draft_hint(self, cls: str, cause: str) -> str:
        """vLLM's MoE errors do not say which model they are about. With speculative decoding on and a quantized
        main model whose MoE already loaded, an error about an unquantized MoE is the (BF16) draft head's."""
        m = _MOE_ERROR_QUANT.search(cause)
        main = self._f["moe_quant"]
        if (
            cls in _MOE_CLASSES
            and m
            and _quant_of(m.group(1)) == "unquantized"
            and main not in ("", "unquantized")
            and self._f["speculative"]["method"]
        ):
            return (
                f"probably the draft model (the main model's MoE is {main} and loaded; set moe_backend in "
                "--speculative-config): "
            )
        return ""

    def _keep(self, line: str) -> None:
        if len(self._fail_lines) < _MAX_EVIDENCE and line not in self._fail_lines:  # at most 12: a list will do
            self._fail_lines.append(line)

    def _declare(self, cls: str, cause: str) -> None:
        where = "while loading the draft model: " if self._in_draft else self._draft_hint(cls, cause)
        self.fatal = Failure(
            {
                "class": cls,
                "evidence": self._evidence_lines(),
                "root_cause": where + cause,
                "draft_model": self._in_draft,
            }
        )
        self._name_backend(self.fatal)

    def _name_backend(self, failure: Failure) -> None:
        """An unsupported backend names which one: the backend the message names, else the one vLLM had picked for
        the part the message is about (MoE, attention, GEMM)."""
        failure["backend"] = _CLASS_BACKEND.get(failure.get("class", ""), "")
        failure["requires"] = requirement(failure.get("root_cause", ""))
        if failure.get("class") not in _BACKEND_CLASSES:
            return
        cause = failure.get("root_cause", "")
        m = _BACKEND_WORDS.search(cause)
        name = normalise_backend(m.group(1)) if m else ""
        if not name:
            f = self._f
            if "ttention" in cause:
                name = f["attention_backend"]
            elif "GEMM" in cause or "Linear" in cause:
                name = f["linear_backend"] or (linear_backend_of(f["linear_kernels"][0]) if f["linear_kernels"] else "")
            else:
                name = f["moe_backend"] or f["attention_backend"]
        failure["backend"] = name

    def _evidence_lines(self) -> list[str]:
        lines = list(self._fail_lines)
        if self._in_draft and "draft_load" in self._f["evidence"]:
            lines.insert(0, self._f["evidence"]["draft_load"])
        return lines

    def _failure(self) -> Failure:
        if self.fatal is not None:
            failure = self.fatal.copy()
            failure["evidence"] = self._evidence_lines()
        else:
            # a log where vLLM said nothing we know: the process's own last words are the cause (never vLLM's)
            words = self._last_words if not (self._f["vllm_log_lines"] or _recognised(self._f)) else ""
            # an exception named in the paste's prose counts when vLLM's own frames show it was vLLM's (low confidence)
            prose = (
                self._prose_exception if self._error_frames and not (self._last_exception or self._last_error) else ""
            )
            self._repairs["prose"] = int(bool(prose))
            cause = self._last_exception or self._last_error or prose or words
            evidence = self._evidence_lines() + [c for c in (self._last_error, self._last_exception) if c]
            # A dying engine whose traceback was cut before its exception: say the cause is missing, never guess.
            cls = (
                ("engine_init_failed" if cause else ROOT_CAUSE_MISSING)
                if self._dying
                else ("other" if cause else (ROOT_CAUSE_MISSING if self._error_frames else ENDED_BEFORE_READY))
            )
            failure = Failure(
                {
                    "class": cls,
                    "evidence": _unique_lines(evidence),
                    "root_cause": cause or "the log ends before the server was ready",
                    "draft_model": self._in_draft,
                }
            )
        unexplained = failure["class"] in _UNEXPLAINED or (
            failure["class"] in ("other", "engine_init_failed") and _BARE_EXCEPTION.match(failure["root_cause"])
        )
        fallback = self._fallback_cause()
        if fallback and unexplained:  # the start failed with nothing more specific
            failure["class"] = _disabled_class(fallback) if fallback == self._disabled else "unsupported_backend"
            failure["root_cause"] = fallback
        self._name_backend(failure)
        return failure


def requirement(cause: str) -> str:
    """What the chip must have, as a failure's message says it ("" when it says nothing of the kind)."""
    for rx, form in _REQUIRES:
        m = rx.search(cause)
        if m:
            return form.format(*(g.strip() for g in m.groups()))
    return ""


def _disabled_class(msg: str) -> str:
    """ "X is disabled for this configuration": CUTLASS's own refusal, or another backend's."""
    m = _DISABLED.search(msg)
    return "cutlass_disabled" if m and "cutlass" in m.group(1).lower() else "unsupported_backend"


def _unique_lines(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _draft_method(draft: str) -> str:
    """The method of a V0 speculative draft model: "[ngram]" is the n-gram proposer, anything else a draft model."""
    return "ngram" if "ngram" in draft.lower() else "draft_model"


def _balance(text: str) -> int:
    """Open brackets minus closed ones (a wrapped list or call is still open when > 0)."""
    return text.count("[") + text.count("{") + text.count("(") - text.count("]") - text.count("}") - text.count(")")


# What a process that died before vLLM logged anything says last: an exception line, or the shell's and loader's
# own complaints (python cannot import vLLM, a missing binary or file, a killed process). Anything else is not taken.
_LAST_WORDS = re.compile(
    r"(?:[\w.]*(?:Error|Exception)\b|.*\b(?:No module named|command not found|not found|No such file or directory|"
    r"Permission denied|can't open file|Segmentation fault|Killed)\b)"
)


def _recognised(f: Attestation) -> bool:
    """Whether lines without vLLM's prefix still said something only vLLM says (a fact, or a failure class)."""
    failure = f["failure"]
    return bool(
        f["vllm_version"]
        or f["moe_backend"]
        or f["attention_backend"]
        or f["linear_kernels"]
        or f["linear_fallbacks"]
        or f["marlin_fp4_weight_only"]
        or f["unknown_env"]
        or f["non_default_args"]
        or f["speculative"]["method"]
        or f["model_load_gib"] >= 0
        or f["kv_cache_tokens"] >= 0
        or f["engine_ready"]
        or f["startup_complete"]
        or (failure and failure.get("class") not in ("other", ENDED_BEFORE_READY))
        or f["quantization"]
        or f["spec_acceptance_rates"]
        or f["runtime_failure"]
    )


def _death_cause_of(msg: str) -> str:
    for cls, rx in _DEATH_CAUSES:
        if msg and rx.search(msg):
            return cls
    return _signature_of(msg)


def _signature_of(msg: str) -> str:
    if not msg:
        return ""
    for cls, matchers in _FATAL_SIGNATURES:
        for rx in matchers:
            if rx.search(msg):
                return cls
    return ""


def _literal_dict(text: str) -> dict:
    """The dict repr vLLM logs: ast.literal_eval (never eval) when it is clean, else the pairs `_Repr` reads whole
    ({} for nothing). Nested dicts stay nested (compilation_config's), whatever else the repr holds."""
    try:
        value = ast.literal_eval(text.strip())
        return _plain(value) if isinstance(value, dict) else {}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return _plain(_Repr(text).top_dict())
    except (_Stop, ValueError, SyntaxError, MemoryError, RecursionError):
        return {}


# --- Python reprs as vLLM logs them (non-default args) ------------------------------------------------
# ast.literal_eval reads a clean repr exactly. What it refuses (enum reprs `<X.Y: 1>`, `Config(...)` calls, a
# dict cut by the paste) is read by this small parser: one left-to-right pass, bounded depth, and only the pairs
# that are whole are kept, at the depth where they stand (a nested dict's keys never leak to the top).

_TOKEN = re.compile(
    r"\s*(?:('(?:[^'\\\n]|\\.){0,4000}'|\"(?:[^\"\\\n]|\\.){0,4000}\")"  # 1 string
    r"|(-?(?:\d[\d_]{0,40}(?:\.\d{0,40})?|\.\d{1,40})(?:[eE][-+]?\d{1,3})?)(?![\w.])"  # 2 number
    r"|([A-Za-z_][\w.]{0,200})"  # 3 name
    r"|(<[^<>\n]{0,400}>)"  # 4 an object's repr: <CUDAGraphMode.FULL: 2>
    r"|(\.\.\.|\u2026)"  # 5 the paste's cut
    r"|([{}\[\]():,=]))"  # 6 punctuation
)
_MAX_DEPTH = 24
_CLOSE = {"{": "}", "[": "]", "(": ")"}


class _Stop(Exception):
    """The repr ends here (cut, or something no repr holds): keep what was whole before it."""


class _Repr:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def token(self) -> re.Match[str]:
        m = _TOKEN.match(self.text, self.pos)
        if not m or m.lastindex is None or m.lastindex == 5:
            raise _Stop
        self.pos = m.end()
        return m

    def peek(self) -> str:
        m = _TOKEN.match(self.text, self.pos)
        return m.group(6) or "" if m and m.lastindex == 6 else ""

    def value(self, depth: int) -> Any:
        m = self.token()
        kind = m.lastindex
        if kind == 1:
            return ast.literal_eval(m.group(1))
        if kind == 2:
            number = m.group(2).replace("_", "")
            return float(number) if any(c in number for c in ".eE") else int(number)
        if kind == 3:
            name = m.group(3)
            if self.peek() == "(":  # a call, Config(a=1): kept as the text it was logged as
                start = m.start(3)
                self.token()
                self.items(")", depth + 1, keyed="=")
                return self.text[start : self.pos][:2000]
            return {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}.get(
                name, name
            )
        if kind == 4:
            return m.group(4)[1:-1]
        opener = m.group(6)
        if opener not in _CLOSE or depth >= _MAX_DEPTH:
            raise _Stop
        if opener == "{":
            return self.items("}", depth + 1, keyed=":")
        items = self.items(_CLOSE[opener], depth + 1, keyed="")
        return items

    def items(self, close: str, depth: int, keyed: str) -> Any:
        """The items of a container up to `close`: a dict when its items are `key: value` (or `key=value`)."""
        pairs: dict[str, Any] = {}
        values: list[Any] = []
        while len(pairs) + len(values) <= MAX_ITEMS * 4:
            if self.peek() == close:
                self.token()
                return pairs if pairs or (close == "}" and not values) else values
            first = self.value(depth)
            sep = self.peek()
            if keyed and sep == keyed:
                self.token()
                pairs[str(first)] = self.value(depth)
                sep = self.peek()
            else:
                values.append(first)
            if sep == ",":
                self.token()
            elif sep != close:
                raise _Stop
        raise _Stop

    def top_dict(self) -> dict[str, Any]:
        """The whole pairs of a dict repr, those before a cut or damage included."""
        out: dict[str, Any] = {}
        if self.token().group(6) != "{":
            return out
        try:
            while len(out) < MAX_ITEMS:
                if self.peek() == "}":
                    break
                key = self.value(0)
                if self.peek() != ":":
                    break
                self.token()
                value, sep = self.value(0), self.peek()
                if sep not in (",", "}"):  # a value counts only when it ends where the dict says: a cut 12 is no 1
                    break
                out[str(key)] = value
                if sep == "}":
                    break
                self.token()
        except (_Stop, ValueError, SyntaxError, MemoryError, RecursionError):
            pass
        return out


def _plain(value: Any) -> Any:
    """JSON/TOML-friendly: no None, no tuples/sets, string keys."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value if v is not None]
    if isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def parse(text: str) -> Attestation:
    """Facts of one whole log (see `_new_facts` for the keys; unknown values are "" / -1 / [] / {})."""
    follower = Follower()
    for pos in range(0, len(text), _PARSE_CHUNK):  # pieces: a 100 MB log never becomes a million strings at once
        follower.feed_chunk(text[pos : pos + _PARSE_CHUNK])
    follower.flush()
    return follower.facts()


def follow_file(path: str, max_bytes: int = MAX_LOG_BYTES) -> Follower:
    """A Follower fed a log file in pieces (memory stays bounded whatever the file holds), up to `max_bytes`.
    Bytes that are not UTF-8 become U+FFFD, as `bytes.decode(errors="replace")` would make them."""
    follower = Follower()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(path, "rb") as fh:
        while block := fh.read(min(_PARSE_CHUNK, max_bytes - follower.bytes_read)):
            follower.bytes_read += len(block)
            follower.feed_chunk(decoder.decode(block))
        follower.stopped_early = bool(fh.read(1))
    follower.feed_chunk(decoder.decode(b"", final=True))
    follower.flush()
    return follower


def parse_file(path: str, max_bytes: int = MAX_LOG_BYTES) -> Attestation:
    """Facts of a log file, read as a stream (see follow_file); the same facts as parse() of its text."""
    return follow_file(path, max_bytes).facts()


def classify_failure(text_or_facts: str | Attestation) -> Failure:
    """The failure dict {class, evidence, root_cause, draft_model} of a log or of its facts; {} if it started."""
    facts = parse(text_or_facts) if isinstance(text_or_facts, str) else text_or_facts
    return Failure(**(facts.get("failure") or {}))
