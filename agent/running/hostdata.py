"""What a host sends back is untrusted: one validator per shape, before anything on the controller uses it.

A host (or whatever controls it) can return any JSON through Ansible and any bytes in a cell's archive. Every value
the controller uses is checked here for type, bounds (string lengths, list sizes, finite numbers) and enums; what
is not used is dropped. A bad shape raises BadHostData with one bounded, escaped line that says what was wrong.

Host strings never go back to Ansible as templates: `unsafe()` marks values so that Ansible (which templates extra
vars, even from a file) passes them on as plain text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, get_type_hints

from agent.escape import plain
from agent.hostside import longdecode
from agent.hostside.contracts import ServerView, WarmupRecord, Window, WindowTelemetry

MAX_TEXT = 4096  # one log line, one error message
MAX_NAME = 256  # a GPU name, a host name, a version
MAX_LIST = 256  # notes, errors, evidence lines
MAX_REASON = 300  # the reason shown for a rejection
CELL_ID = re.compile(r"[0-9a-f]{12}")
# a plain printable token: versions, driver strings, arch names (no braces, quotes, spaces or control characters)
TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:/-]*")
ARCH = re.compile(r"[a-z0-9_]{0,32}")
SM = re.compile(r"(sm_[0-9]{2,3}[a-z]?)?")
COMPUTE_CAPABILITY = re.compile(r"([0-9]{1,2}\.[0-9]{1,2})?")
FINGERPRINT = re.compile(r"[0-9a-f]{8}")
FAILURE_CLASS = re.compile(r"[a-z][a-z0-9_]{0,47}")


class BadHostData(ValueError):
    """What a host sent back does not have the expected shape; str() is one bounded line."""

    def __init__(self, reason: str):
        super().__init__(one_line(reason))

    @property
    def reason(self) -> str:
        return str(self)


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """Control characters (newlines, escape sequences) become spaces; long text is cut with an ellipsis."""
    flat = plain(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _shown(value: Any) -> str:
    return one_line(repr(value), 60)


# ---------------------------------------------------------------- scalars


def text(value: Any, where: str, limit: int = MAX_TEXT) -> str:
    """Any string up to `limit` characters without NUL (escaping for display happens where it is shown)."""
    if not isinstance(value, str):
        raise BadHostData(f"{where}: expected a string, got {type(value).__name__}")
    if len(value) > limit:
        raise BadHostData(f"{where}: {len(value)} characters, more than {limit}")
    if "\x00" in value:
        raise BadHostData(f"{where}: contains NUL")
    return value


def token(value: Any, where: str, pattern: re.Pattern[str] = TOKEN, limit: int = MAX_NAME) -> str:
    """A string that must match `pattern` as a whole, or "" (a fact the host could not read)."""
    value = text(value, where, limit)
    if value and not pattern.fullmatch(value):
        raise BadHostData(f"{where}: {_shown(value)} is not a valid value")
    return value


def number(value: Any, where: str, lo: float = 0.0, hi: float = 1e15) -> float:
    """A finite int or float within [lo, hi] (bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadHostData(f"{where}: expected a number, got {type(value).__name__}")
    number_ = float(value)
    if not math.isfinite(number_) or not lo <= number_ <= hi:
        raise BadHostData(f"{where}: {_shown(value)} is not a finite number in [{lo:g}, {hi:g}]")
    return number_


def integer(value: Any, where: str, lo: int = 0, hi: int = 2**53) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadHostData(f"{where}: expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise BadHostData(f"{where}: {value} is not in [{lo}, {hi}]")
    return value


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise BadHostData(f"{where}: expected true or false, got {type(value).__name__}")
    return value


def cell_id(value: Any, where: str = "cell id") -> str:
    """Cell ids are 12 lower-case hex characters (a hash): the only form that may name a folder or reach a playbook."""
    if not isinstance(value, str) or not CELL_ID.fullmatch(value):
        raise BadHostData(f"{where}: {_shown(value)} is not a cell id (12 hex characters)")
    return value


def texts(value: Any, where: str, limit: int = MAX_TEXT, items: int = MAX_LIST) -> list[str]:
    if not isinstance(value, list):
        raise BadHostData(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > items:
        raise BadHostData(f"{where}: {len(value)} items, more than {items}")
    return [text(v, f"{where}[{i}]", limit) for i, v in enumerate(value)]


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadHostData(f"{where}: expected an object, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------- shapes

Field = tuple[Callable[[Any, str], Any], Any]  # validator, default when the key is absent
ABSENT = object()  # a default that keeps an absent key absent (a key only some records have)


def shape(value: Any, where: str, fields: dict[str, Field], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The known keys of an object, each validated (absent: its default); unknown keys are dropped, unread."""
    obj = mapping(value, where)
    missing = [k for k in required if k not in obj]
    if missing:
        raise BadHostData(f"{where}: missing {', '.join(missing)}")
    return {
        k: (check(obj[k], f"{where}.{k}") if k in obj else default)
        for k, (check, default) in fields.items()
        if k in obj or default is not ABSENT
    }


def _num(lo: float = 0.0, hi: float = 1e15) -> Callable[[Any, str], float]:
    return lambda v, w: number(v, w, lo, hi)


def _int(lo: int = 0, hi: int = 2**53) -> Callable[[Any, str], int]:
    return lambda v, w: integer(v, w, lo, hi)


def _text(limit: int = MAX_TEXT) -> Callable[[Any, str], str]:
    return lambda v, w: text(v, w, limit)


def _token(pattern: re.Pattern[str] = TOKEN, limit: int = MAX_NAME) -> Callable[[Any, str], str]:
    return lambda v, w: token(v, w, pattern, limit)


def _texts(limit: int = MAX_TEXT, items: int = MAX_LIST) -> Callable[[Any, str], list[str]]:
    return lambda v, w: texts(v, w, limit, items)


FACTS: dict[str, Field] = {
    "gpu_name": (_text(MAX_NAME), ""),
    "compute_capability": (_token(COMPUTE_CAPABILITY, 8), ""),
    "driver": (_token(TOKEN, 64), ""),
    "cuda": (_token(TOKEN, 64), ""),
    "gpu_count": (_int(0, 1024), 0),
    "gpu_mem_gib": (_num(0, 1e6), 0.0),
    "simulated": (flag, False),
    "mem_total_gib": (_num(0, 1e6), 0.0),
    "mem_available_gib": (_num(0, 1e6), 0.0),
    "disk_free_gib": (_num(0, 1e9), 0.0),
    "cache_dir": (_text(MAX_TEXT), ""),
    "python": (_token(TOKEN, 64), ""),
    "docker": (flag, False),
    "docker_runtimes": (lambda v, w: [token(x, f"{w}[{i}]", TOKEN, 64) for i, x in enumerate(texts(v, w, 64, 32))], []),
    "nvidia_runtime": (flag, False),
    "hostname": (_text(MAX_NAME), ""),
    "kernel": (_text(MAX_NAME), ""),
    "machine": (_token(TOKEN, 64), ""),
    "arch": (_token(ARCH, 32), ""),
    "sm": (_token(SM, 16), ""),
    "notes": (_texts(1024, 64), []),
    "fingerprint": (_token(FINGERPRINT, 8), ""),
    "interfaces": (lambda v, w: interfaces(v, w), ABSENT),
    "build": (lambda v, w: build(v, w), ABSENT),
}
SM121 = re.compile(r"yes|no|unknown")


def build(value: Any, where: str) -> dict[str, Any]:
    """The vLLM build the host runs (hostside/facts.build_origin): an image's ref, version and CUDA targets."""
    return shape(
        value,
        where,
        {
            "source": (_token(re.compile(r"(image|wheel)?"), 8), ""),
            "ref": (_text(MAX_NAME + 100), ""),
            "vllm_version": (_token(TOKEN, 64), ""),
            "cuda_targets": (lambda v, w: [token(x, w, TOKEN, 16) for x in texts(v, w, 16, 32)], []),
            "sm121": (_token(SM121, 8), "unknown"),
        },
    )


IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,31}")  # what reaches NCCL_SOCKET_IFNAME and NCCL_IB_HCA
IPV4_CIDR = re.compile(r"(?:[0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}")
STATE = re.compile(r"[a-z]{0,16}")


def interfaces(value: Any, where: str) -> list[dict[str, Any]]:
    """The host's network interfaces: names and RDMA devices become env values and link choices, so each is a plain
    token; addresses are IPv4 CIDRs."""
    if not isinstance(value, list) or len(value) > 64:
        raise BadHostData(f"{where}: expected a list of at most 64 interfaces")
    out = []
    for i, item in enumerate(value):
        w = f"{where}[{i}]"
        out.append(
            shape(
                item,
                w,
                {
                    "name": (_token(IFNAME, 32), ""),
                    "state": (_token(STATE, 16), "unknown"),
                    "addresses": (lambda v, ww: [token(a, ww, IPV4_CIDR, 18) for a in texts(v, ww, 18, 16)], []),
                    "speed_mbps": (_int(-1, 10**7), -1),
                    "rdma": (lambda v, ww: [token(a, ww, IFNAME, 32) for a in texts(v, ww, 32, 16)], []),
                    "simulated": (flag, False),
                },
                required=("name",),
            )
        )
    return out


def facts(value: Any, host: str) -> dict[str, Any]:
    """spark_facts of one host: the [facts] table. arch and sm must be plain tokens: they choose env rules and
    reach the simulator's environment."""
    return shape(value, f"host {host}: facts", FACTS, required=("gpu_name", "fingerprint"))


HOLDER: dict[str, Field] = {
    "user": (_text(MAX_NAME), ""),
    "controller_host": (_text(MAX_NAME), ""),
    "controller_pid": (_int(0, 2**31), 0),
    "since": (_text(64), ""),
    "sweep": (_text(MAX_NAME), ""),
    "cell_id": (lambda v, w: v if v == "" else cell_id(v, w), ""),
}


def holder(value: Any, where: str = "lock holder") -> dict[str, Any]:
    """The host lock's holder record (running/identity.py controller_identity, as written on the host)."""
    return shape(value, where, HOLDER)


FAILURE: dict[str, Field] = {
    "class": (_token(FAILURE_CLASS, 48), "other"),
    "evidence": (_texts(MAX_TEXT, 64), []),
    "root_cause": (_text(MAX_TEXT), ""),
    "backend": (_text(MAX_NAME), ""),
    "requires": (_text(MAX_NAME), ""),
}


def failure(value: Any, where: str) -> dict[str, Any]:
    """A startup failure as the host classified it; {} stays {} (no failure)."""
    return shape(value, where, FAILURE) if mapping(value, where) else {}


def serve_status(value: Any, where: str = "serve.json") -> dict[str, Any]:
    """serve.json in a cell's archive (hostside/supervise.py wait_ready). facts are re-read from server.log."""
    obj = shape(value, where, {"ready": (flag, False), "startup_s": (_num(0, 1e7), 0.0)}, required=("ready",))
    obj["failure"] = failure(mapping(value, where).get("failure", {}), f"{where}.failure")
    return obj


def serve_result(value: Any, where: str = "serve") -> dict[str, Any]:
    """The spark_server task's result as far as the controller reads it: host error, busy, holder, message."""
    obj = mapping(value, where)
    out = shape(obj, where, {"host_error": (flag, False), "busy": (flag, False), "msg": (_text(MAX_TEXT), "")})
    out["holder"] = holder(obj.get("holder") or {}, f"{where}.holder")
    return out


def bench_item(value: Any, where: str = "bench") -> dict[str, Any]:
    """One spark_bench loop item (one concurrency level): only its host-side time is used."""
    return shape(value, where, {"elapsed_s": (_num(0, 1e7), 0.0), "level": (_int(1, 1 << 20), 0)})


# the window's numbers, by type, from its one definition (hostside/contracts.py)
_WINDOW_TYPES = get_type_hints(Window)
_MEASURE_FLOATS = tuple(k for k, t in _WINDOW_TYPES.items() if t is float)
_MEASURE_INTS = tuple(k for k, t in _WINDOW_TYPES.items() if t is int and k != "concurrency")


def _floats(lo: float, hi: float, items: int) -> Callable[[Any, str], list[float]]:
    def check(value: Any, where: str) -> list[float]:
        if not isinstance(value, list) or len(value) > items:
            raise BadHostData(f"{where}: expected a list of at most {items} numbers")
        return [number(x, f"{where}[{i}]", lo, hi) for i, x in enumerate(value)]

    return check


def _typed_fields(hints: dict[str, Any], special: dict[str, Field]) -> dict[str, Field]:
    """A shape from a TypedDict's hints: numbers finite (-1.0 = unknown), strings capped; lists/maps in `special`."""
    out: dict[str, Field] = {}
    for key, kind in hints.items():
        if key in special:
            out[key] = special[key]
        elif kind is bool:
            out[key] = (flag, False)
        elif kind is int:
            out[key] = (_int(0, 2**53), 0)
        elif kind is float:
            out[key] = (_num(-1.0, 1e15), -1.0)
        elif kind is str:
            out[key] = (_text(MAX_TEXT), "")
    return out


# Reason and field names are plain tokens; the timeline is capped (telemetry.TIMELINE_POINTS is 240).
TELEMETRY: dict[str, Field] = _typed_fields(
    get_type_hints(WindowTelemetry),
    {
        "throttle_reasons": (lambda v, w: [token(x, w, TOKEN, 64) for x in texts(v, w, 64, 16)], []),
        "unsupported": (lambda v, w: [token(x, w, TOKEN, 64) for x in texts(v, w, 64, 64)], []),
        "timeline": (
            lambda v, w: {
                k: _floats(-1e6, 1e9, 1024)(x, f"{w}.{k}")
                for k, x in _small_map(v, w, 8).items()
                if k in ("t_s", "power_w", "temp_c", "throttled")
            },
            {},
        ),
    },
)
SERVER: dict[str, Field] = _typed_fields(
    get_type_hints(ServerView),
    {
        "deltas": (lambda v, w: {k: number(x, f"{w}.{k}", -1e18, 1e18) for k, x in _small_map(v, w).items()}, {}),
        "gauges": (
            lambda v, w: {
                k: {s: number(x, f"{w}.{k}.{s}", -1.0, 1e15) for s, x in _small_map(g, f"{w}.{k}", 4).items()}
                for k, g in _small_map(v, w, 16).items()
            },
            {},
        ),
        "accepted_per_position": (_floats(0.0, 1e6, 16), []),
        "server_generation_tokens": (_num(-1e18, 1e18), -1.0),
    },
)

WARMUP: dict[str, Field] = _typed_fields(
    get_type_hints(WarmupRecord), {"output_throughputs": (_floats(0.0, 1e15, 100), [])}
)

RUN: dict[str, Field] = {
    "concurrency": (_int(1, 1 << 20), 0),
    "repeat": (_int(1, 1 << 20), 0),
    "ok": (flag, False),
    "error": (_text(MAX_TEXT), ""),
    "errors": (_texts(MAX_TEXT, 16), []),
    "started_at": (_text(64), ""),
    **{k: (_num(0, 1e15), 0.0) for k in _MEASURE_FLOATS},
    **{k: (_int(0, 2**53), 0) for k in _MEASURE_INTS},
    "spec_decode_acceptance_rate": (_num(-1.0, 1e6), -1.0),
    "engine_died": (flag, ABSENT),  # only in the window the server died in (it was cut short)
    "dataset": (_token(re.compile(r"[a-z]{0,16}"), 16), ABSENT),  # absent from windows measured before issue 15
    "prefix_cache": (_token(re.compile(r"[a-z]{0,16}"), 16), ABSENT),
    "exact_lengths": (flag, ABSENT),
    "metrics_delta": (lambda v, w: {k: number(x, f"{w}.{k}", -1e18, 1e18) for k, x in _small_map(v, w).items()}, {}),
    "telemetry": (lambda v, w: shape(v, w, TELEMETRY), ABSENT),  # absent in results of hosts without a sampler
    "warmup_telemetry": (lambda v, w: shape(v, w, TELEMETRY), ABSENT),
    "server": (lambda v, w: shape(v, w, SERVER), ABSENT),
    "warmup": (lambda v, w: shape(v, w, WARMUP), ABSENT),  # a warmup until steady (hostside/steady.py)
    "jit_lines": (_int(0, 2**53), ABSENT),  # absent: nobody read the server log during the window
    "jit_evidence": (_text(MAX_TEXT), ABSENT),
}


def _small_map(value: Any, where: str, items: int = 64) -> Mapping[str, Any]:
    obj = mapping(value, where)
    if len(obj) > items:
        raise BadHostData(f"{where}: {len(obj)} keys, more than {items}")
    for k in obj:
        token(k, f"{where} key", TOKEN, 64)
    return obj


def run_result(value: Any, where: str) -> dict[str, Any]:
    """One measurement window (cNNN-rK.json; hostside/loadgen.py summarize + run_levels)."""
    return shape(value, where, RUN, required=("concurrency", "repeat", "ok"))


DIED: dict[str, Field] = {
    "at": (_num(0, 1e11), 0.0),  # epoch seconds, as the host's clock says
    "detected_at": (_num(0, 1e11), 0.0),
    "how": (_text(MAX_TEXT), "the server died"),
    "window": (_text(MAX_NAME), ""),
    "exit_code": (lambda v, w: None if v is None else integer(v, w, -255, 255), None),
}


def died_record(value: Any, where: str) -> dict[str, Any]:
    """died.json: the server died mid-cell (hostside/serving.record_death, from loadgen.EngineWatch.died)."""
    return shape(value, where, DIED)


PROBE_OUTPUT: dict[str, Field] = {
    "id": (_token(re.compile(r"[a-z]{1,16}-[0-9]{1,3}"), 24), ""),
    "text": (_text(2048), ""),  # the host keeps 512 characters; a wider bound for a non-ASCII-heavy output
    "finish_reason": (_token(re.compile(r"[a-z_]{0,16}"), 16), ""),
    "error": (_text(MAX_TEXT), ""),
    "seconds": (_num(0, 1e6), 0.0),
}


def _probe_outputs(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or len(value) > 256:
        raise BadHostData(f"{where}: expected a list of at most 256 outputs")
    return [shape(v, f"{where}[{i}]", PROBE_OUTPUT, required=("id",)) for i, v in enumerate(value)]


def _ints(hi: int, items: int) -> Callable[[Any, str], list[int]]:
    def check(value: Any, where: str) -> list[int]:
        if not isinstance(value, list) or len(value) > items:
            raise BadHostData(f"{where}: expected a list of at most {items} integers")
        return [integer(v, where, 0, hi) for v in value]

    return check


LONG_OUTPUT: dict[str, Field] = {
    "id": (_token(re.compile(r"long-[0-9]{1,2}"), 8), ""),
    "path": (_token(re.compile(r"c1|batch"), 8), ""),
    "text": (_text(longdecode.MAX_CHARS), ""),
    "token_ids": (_ints(2**31, longdecode.MAX_TOKENS), []),
    "chunk_tokens": (_ints(2**31, longdecode.MAX_TOKENS), []),
    "chunk_chars": (_ints(2**31, longdecode.MAX_TOKENS), []),
    "error": (_text(MAX_TEXT), ""),
    "seconds": (_num(0, 1e6), 0.0),
}


def _long_outputs(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or len(value) > 2 * longdecode.MAX_PROMPTS:
        raise BadHostData(f"{where}: expected a list of at most {2 * longdecode.MAX_PROMPTS} long outputs")
    out = [shape(v, f"{where}[{i}]", LONG_OUTPUT, required=("id", "path")) for i, v in enumerate(value)]
    for i, o in enumerate(out):
        if len(o["chunk_tokens"]) != len(o["chunk_chars"]):
            raise BadHostData(f"{where}[{i}]: chunk_tokens and chunk_chars differ in length")
    return out


PROBE: dict[str, Field] = {
    "set_version": (_int(0, 10_000), 0),
    "outputs": (_probe_outputs, []),
    "seconds": (_num(0, 1e6), 0.0),
    "batch_outputs": (_probe_outputs, []),
    "batch_concurrency": (_int(0, 1 << 20), 0),
    "long": (_long_outputs, []),
    "long_seconds": (_num(0, 1e6), 0.0),
}


def probe_run(value: Any, where: str) -> dict[str, Any]:
    """probe.json: the correctness probe's outputs (hostside/probe.py run); judged on the controller."""
    return shape(value, where, PROBE, required=("set_version", "outputs"))


CHECKPOINT: dict[str, Field] = {
    "bytes_per_token": (lambda v, w: 0 if v is None else integer(v, w, 0, 2**53), 0),
    "total_gib": (_num(0, 1e7), 0.0),
    "packed_fp4_tensors": (_int(0, 2**40), 0),
    "high_precision_weights": (_int(0, 2**40), 0),
    "expert_format": (_token(re.compile(r"[a-z0-9_]{0,32}"), 32), ""),
    "mtp": (lambda v, w: shape(v, w, {"present": (flag, False), "quantized": (flag, False)}), {}),
}


def checkpoint_summary(value: Any, where: str) -> dict[str, Any]:
    """What provision's spark_inspect returns per checkpoint folder, reduced to what cell.toml keeps."""
    s = shape(value, where, CHECKPOINT)
    mtp = s.pop("mtp") or {}
    return {**s, "mtp_present": bool(mtp.get("present")), "mtp_quantized": bool(mtp.get("quantized"))}


def _parts(value: Any, where: str) -> dict[str, int]:
    obj = mapping(value, where)
    kinds = ("fp4_weights", "fp4_scales", "fp8_weights", "fp8_scales", "high_precision")
    return {k: integer(obj[k], f"{where}.{k}", 0, 2**50) for k in kinds if k in obj}


_DTYPE = re.compile(r"[a-z0-9_.]{1,32}")
MODEL_MEMORY: dict[str, Field] = {  # hostside/contracts.ModelMemory: every key required
    "source": (lambda v, w: token(v, w, re.compile(r"headers|config|simulator"), 16), ABSENT),
    "weight_bytes": (_int(0, 2**50), ABSENT),
    "weight_parts": (_parts, ABSENT),
    "expert_bytes": (_int(0, 2**50), ABSENT),
    "mtp_bytes": (_int(0, 2**50), ABSENT),
    "layers": (_int(1, 10_000), ABSENT),
    "attention_layers": (_int(0, 10_000), ABSENT),
    "sliding_layers": (_int(0, 10_000), ABSENT),
    "sliding_window": (_int(0, 2**31), ABSENT),
    "linear_layers": (_int(0, 10_000), ABSENT),
    "kv_heads": (_int(0, 100_000), ABSENT),
    "head_dim": (_int(0, 100_000), ABSENT),
    "kv_dtype": (lambda v, w: token(v, w, _DTYPE, 32), ABSENT),
    "kv_bytes_per_token": (_int(0, 2**40), ABSENT),
    "state_bytes_per_seq": (_int(0, 2**50), ABSENT),
    "max_position": (_int(0, 2**40), ABSENT),
    "notes": (lambda v, w: texts(v, w, 300, 16), ABSENT),
}


def model_memory(value: Any, where: str) -> dict[str, Any] | None:
    """spark_inspect's `memory` (hostside/memplan.model_memory): None when the host had none; BadHostData when
    it is not that shape (every key there, in range)."""
    if value is None:
        return None
    return shape(value, where, MODEL_MEMORY, required=tuple(MODEL_MEMORY))


# ---------------------------------------------------------------- generic bounded JSON (inspect's full summary)

MAX_DEPTH = 12
MAX_NODES = 200_000


def bounded_json(value: Any, where: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    """Any JSON shape, bounded: depth, node count, string lengths, finite numbers, string keys. For data that is
    only shown (escaped where it is shown), like `inspect --host`'s full summary."""
    budget = [max_nodes]

    def walk(v: Any, path: str, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise BadHostData(f"{where}: more than {max_nodes} values")
        if depth > max_depth:
            raise BadHostData(f"{where}: nested deeper than {max_depth} at {path or 'top'}")
        if v is None or isinstance(v, bool | str):
            return text(v, path or where, 1 << 16) if isinstance(v, str) else v
        if isinstance(v, int | float):
            return integer(v, path, -(2**63), 2**63) if isinstance(v, int) else number(v, path, -1e300, 1e300)
        if isinstance(v, list):
            return [walk(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]
        if isinstance(v, Mapping):
            return {text(k, f"{path} key", MAX_NAME): walk(x, f"{path}.{k}", depth + 1) for k, x in v.items()}
        raise BadHostData(f"{path or where}: unexpected {type(v).__name__}")

    return walk(value, "", 0)


# ---------------------------------------------------------------- back to Ansible


def unsafe(value: Any) -> Any:
    """Mark every string so Ansible never templates it: extra vars are templates to Ansible (a file given with
    -e @file too, ansible-core 2.19 tags it trusted); {"__ansible_unsafe": s} is its JSON form of a plain string."""
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    if isinstance(value, Mapping):
        return {k: unsafe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [unsafe(v) for v in value]
    return value


CACHE_KEY = re.compile(r"^[0-9a-f]{16}$")
CACHE_ENTRY: dict[str, Field] = {"key": (_token(CACHE_KEY, 16), ""), "bytes": (_int(), 0), "files": (_int(), 0)}


def cache_entries(value: Any, where: str) -> list[dict[str, Any]]:
    """spark_cache's `caches`: a bounded list of {key (16 hex), bytes, files}."""
    if not isinstance(value, list) or len(value) > 4096:
        raise BadHostData(f"{where}: not a list of at most 4096 cache folders")
    return [shape(v, f"{where}[{i}]", CACHE_ENTRY, required=("key",)) for i, v in enumerate(value)]
