"""The Follower: reads a vLLM log line by line (the host tails it while the server starts; `parse` feeds a whole
file) and hands each line that can matter to the families that read it.

Its own module because it owns the reading, not a wording: the cheap noise check and prefilter every line gets,
lines cut at MAX_LINE, pieces of a stream joined, wrapped lines and pasted-together lines repaired, and the order in
which the families are asked. The start's own progress (weights loaded, KV cache sized, server up) is read here.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from .. import steady
from ..contracts import Attestation
from . import cluster
from .attestation import MAX_ITEMS, REPAIRS
from .backend import linear_backend_of
from .failure import SERVED_ACCESS, SERVED_REQUEST, SERVING_ENGINE, FailureLines, recognised
from .launch import LaunchLines
from .line import (
    EMBEDDED_HEADER,
    MAX_LINE,
    PREFILTER,
    PROC_TAGS,
    balance,
    clean,
    restore_start,
    split_header,
    split_header_damaged,
)
from .signature import signature_of
from .speculation import SpeculationLines

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
_INFERENCE_JIT = re.compile(steady.INFERENCE_JIT)  # one wording, shared with the steady-state rule
_MODEL_LOAD = re.compile(r"(?:Model loading|Loading model weights) took ([\d.]+) Gi?B(?: memory)?(?: and ([\d.]+) s)?")
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
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
_MAX_WRAPPED = 16  # continuation lines joined to one open line
_CONTINUATION = "[]{}()'\",.=:0123456789"  # how a wrapped list or call carries on (or a lower-case word)
_ELLIPSIS = re.compile(r",\s?(?:\.\.\.|\u2026)\s*[\]})]*\.?\s*$")  # a list that ends "'A', ..."
_FRAME_SOURCE = re.compile(r"^(?:\s|File \")")  # a traceback's source line: its brackets never close below


class Follower(FailureLines, LaunchLines, SpeculationLines):
    """Reads a vLLM log line by line (the host tails it during startup; `parse` feeds a whole file).

    `.fatal` is a failure dict as soon as a fatal signature is seen before readiness, else None;
    `.ready` turns True at `Application startup complete`. `feed(text)` takes whole lines (one or many);
    `feed_chunk(data)` takes arbitrary pieces of a stream and keeps a cut-off last line for the next call
    (at most MAX_LINE characters of it: a line that never ends costs no memory).
    `.lines_cut` counts lines longer than MAX_LINE, `.items_dropped` list entries past their cap.
    Each family's class adds its handling of lines; the facts and state they share are attestation.Recorder's.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lines_cut = 0
        self.bytes_read = 0  # parse_file's count
        self.stopped_early = False  # parse_file reached its byte cap before the end of the file
        self._partial = ""
        self._partial_cut = False
        self._server_seen = False
        self._cluster = cluster.ClusterFollower()
        self._open = ""  # a line whose brackets are not closed yet: wrapped lines that continue it are joined
        self._open_lines = 0
        self._probe = 256  # lines still looked at for a vLLM prefix while none was seen (see _probe_line)

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
                    SERVED_ACCESS.search(line) or any(r in line for r in SERVED_REQUEST)
                ):
                    self._serving(clean(line), api=True)
                continue
            if "SpecDecoding metrics" in line:  # periodic, and wanted: the cheap path
                self._acceptance(line)
                continue
            if cluster.interesting(line):  # multi-node: world size, TP/PP, Ray nodes, NCCL transport
                self._cluster.feed(line)
            if not self._server_seen and _SERVER_MARKERS.search(line):
                self._server_seen = True
            if self._probe:  # only at the start of a log that has shown no vLLM line yet
                self._probe_line(line)
            if "\r" in line:  # progress bars redraw with CR; each piece is its own line
                for piece in line.split("\r"):
                    if PREFILTER.search(piece):
                        handle(piece)
            elif (
                PREFILTER.search(line) or ": error: " in line or "for this configuration" in line or self.exc_pending
            ):  # exc_pending: an exception's message may go on in the next line, whatever that line holds
                handle(line)

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
        if "vllm serve " in line or "api_server " in line:  # a pasted launch: its model and flags
            self._pasted_launch(clean(line))
        elif "ersion" in line:  # prose at the top of a report: "vllm version: 0.9.2"
            self._tool_version_line(clean(line), line)
        if ("INFO" in line or "WARN" in line or "ERROR" in line or "DEBUG" in line) and not PREFILTER.search(line):
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
        if not carries_on or PROC_TAGS.match(piece):
            return False
        if split_header(piece)[0]:  # a line of its own
            return False
        self._open += " " + piece
        self._open_lines += 1
        if balance(self._open) <= 0 or _ELLIPSIS.search(piece):
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
        self._launch_facts(f)  # what other tools and a pasted launch said, where the log said nothing
        f["startup_complete"] = self.ready or (f["engine_ready"] and not self._server_seen)
        backends = sorted({linear_backend_of(k) for k in f["linear_kernels"]} - {""})
        f["linear_backend"] = backends[0] if len(backends) == 1 else ("mixed" if backends else "")
        f["failure"] = {} if f["startup_complete"] or self._served else self._failure()
        f["runtime_failure"] = self._runtime_failure()
        f["cluster"] = self._cluster.result()
        f["repairs"] = [f"{n} {REPAIRS[key]}" for key, n in self._repairs.items() if n]
        f["confidence"] = self._confidence(f)
        return f

    def _confidence(self, f: Attestation) -> str:
        damaged = (
            self._repairs["damaged"]
            or self._repairs["restored"]
            or self._repairs["lenient_args"]
            or self._repairs["prose"]
            or self._repairs["tool_version"]
        )
        if f["vllm_log_lines"] == 0 and not recognised(f) and not self._repairs["prose"]:
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
        if not joined and balance(msg) > 0 and not _FRAME_SOURCE.match(msg):
            self._open, self._open_lines = raw, 0  # wait for the lines that close it
            if not self.ready and signature_of(msg):  # but a fatal line stops a start now; the whole one follows
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
        if not (self.ready or self._served) and SERVING_ENGINE.search(msg):  # an excerpt that starts mid-serving
            self._serving(line, api=False)
        if not (self.ready or self._served):
            self._watch_failure(level, msg, line)
        else:
            self.exc_pending = ""  # started: no failed start to read on
            self._watch_death(level, msg, line)
        if ("Using " in msg or "Selected " in msg) and self._using(msg, line):
            return
        self._other(msg, line)

    @staticmethod
    def _pieces(msg: str) -> list[str]:
        """A message split where another log line starts inside it (at most MAX_ITEMS pieces)."""
        pieces: list[str] = []
        start = 0
        while len(pieces) < MAX_ITEMS:
            m = EMBEDDED_HEADER.search(msg, start)
            if not m:
                break
            pieces.append(msg[start : m.start()])
            start = m.end()
        return [*pieces, msg[start:]]

    def _other(self, msg: str, line: str) -> None:
        """A line that names no kernel: each family in turn takes it or leaves it, in this order (the first that
        takes it decides); what none takes may still name the version, the model or the args."""
        if (
            self._draft_start(msg, line)
            or self._model_load(msg)
            or self._unknown_env(msg, line)
            or self._warning_count(msg)
            or self._fallback_note(msg, line)
            or self._acceptance_note(msg)
            or self._convertible(msg)
            or self._namespace(msg)
            or self._worded_quant(msg)
            or self._progress(msg)
            or self._tool_version_line(msg, line)
            or self._pasted_launch(msg)
        ):
            return
        self._identity(msg, line)

    def _model_load(self, msg: str) -> bool:
        m = _MODEL_LOAD.search(msg)
        if not m:
            return False
        self._in_draft = False
        f = self._f
        if f["model_load_gib"] < 0:
            f["model_load_gib"] = float(m.group(1))
            f["model_load_s"] = float(m.group(2)) if m.group(2) else -1.0
        return True

    def _warning_count(self, msg: str) -> bool:
        """Warnings counted, not kept: the autotuner's perf cliff, a JIT compile while serving (hostside/steady.py)."""
        if "No tuned config covers" in msg or "perf cliff" in msg:
            self._f["autotuner_cliff_count"] += 1
            return True
        if "during inference" in msg and _INFERENCE_JIT.search(msg):
            self._f["jit_warning_count"] += 1
            return True
        return False

    def _progress(self, msg: str) -> bool:
        """The start's progress: the server up, the engine ready, the KV cache sized."""
        f = self._f
        if _READY.search(msg):
            self.ready = True
            self._in_draft = False
            return True
        if _ENGINE_READY in msg:
            f["engine_ready"] = True
            self._in_draft = False
            return True
        m = _KV_GIB.search(msg)
        if m:
            if f["kv_cache_gib"] < 0:
                f["kv_cache_gib"] = float(m.group(1))
            return True
        m = _KV_TOKENS.search(msg)
        if m:
            self._in_draft = False  # models are loaded once the KV cache is sized, even with no "Model loading took"
            if f["kv_cache_tokens"] < 0:
                f["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
            return True
        return False
