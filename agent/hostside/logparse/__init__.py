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

One module per family of log lines, each reading the message that `line` unwraps (the vLLM header split off, the
wrappers users' tools add taken away):
  launch       version, model, non-default args (`pyrepr` reads their repr), engine config, quantization, load format
  backend      the MoE, attention and GEMM kernels selected, and the candidates passed over (`normalise_backend`)
  speculation  speculative method and tokens, the draft model's load, acceptance rates
  failure      a failed start, and a death while serving, from the lines around them (`signature`: the class table)
  cluster      multi-node: world size, TP/PP, Ray nodes, NCCL's transport per rank
Each family's handling of a line is a class of its module (`LaunchLines`, ...); the `follower` reads the lines and asks
the families in turn, and `Follower` is all of them over one `attestation.Recorder`, the facts and state they share.
Callers import from here; one that needs a single family (backend names) may import its module.
"""

from __future__ import annotations

import codecs

from ..contracts import Attestation, Failure
from .attestation import MAX_ITEMS
from .backend import linear_backend_of, normalise_backend
from .follower import Follower
from .line import MAX_LINE, clean, split_header
from .signature import ENDED_BEFORE_READY, ROOT_CAUSE_MISSING, SUPERVISOR_PREFIX, requirement
from .speculation import MAX_RATES

__all__ = [
    "ENDED_BEFORE_READY",
    "MAX_ITEMS",
    "MAX_LINE",
    "MAX_LOG_BYTES",
    "MAX_RATES",
    "ROOT_CAUSE_MISSING",
    "SUPERVISOR_PREFIX",
    "Follower",
    "classify_failure",
    "clean",
    "follow_file",
    "linear_backend_of",
    "normalise_backend",
    "parse",
    "parse_file",
    "requirement",
    "split_header",
]

MAX_LOG_BYTES = 8 * 1024**3  # parse_file stops here and says so
_PARSE_CHUNK = 1 << 20


def parse(text: str) -> Attestation:
    """Facts of one whole log (see `attestation.new` for the keys; unknown values are "" / -1 / [] / {})."""
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
