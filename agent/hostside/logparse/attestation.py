"""The attestation under way: the facts every family of lines fills in (`new`), and `Recorder`, the state the
families share and the bookkeeping they write through (capped lists with a set behind each, the first line that said
each thing, what a pasted fragment needed repaired).

Its own module because the families share these facts: a draft model's load decides whose a kernel line is, and a
failure names the backend another family read.
"""

from __future__ import annotations

from ..contracts import Attestation
from . import cluster

MAX_ITEMS = 64  # entries of each list of names or lines in the facts
MAX_EVIDENCE = 12  # lines kept as a failure's evidence; candidates passed over
# Pasted fragments (see Attestation.confidence): what the parser repaired, and how it says so.
REPAIRS = {
    "damaged": "line(s) whose vLLM prefix lost its first characters",
    "restored": "message(s) whose lost first characters were put back",
    "joined": "line(s) holding two log lines, split",
    "wrapped": "wrapped line(s) joined to the line they continue",
    "ellipsis": "list(s) cut with '...'",
    "lenient_args": "non-default args read pair by pair (the dict was cut or damaged)",
    "prose": "exception read from the paste's prose (no vLLM prefix; vLLM's frames around it)",
    "tool_version": "vLLM version read from another tool's output (collect_env, pip, an image tag), not the server's",
    "pasted_launch": "arguments read from the command line pasted beside the log (the log printed none)",
}


def new() -> Attestation:
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
        "kv_cache_gib": -1.0,
        "engine_ready": False,
        "startup_complete": False,
        "other_model_lines": [],  # vision tower / encoder / all-reduce choices: kept apart, never the answer
        "failure": {},
        "runtime_failure": {},  # after readiness: {class, root_cause, evidence} of an engine that died mid-run
        "evidence": {},
        "vllm_log_lines": 0,
        "cluster": cluster.new(),
        "confidence": "",
        "repairs": [],
    }


class Recorder:
    """The state every family of lines reads and writes: the facts, and where in the log the reading is."""

    def __init__(self) -> None:
        self.ready = False  # the server said it is up ("Application startup complete", uvicorn's lines)
        self.items_dropped = 0
        self._f = new()
        self._seen: dict[str, set[str]] = {}  # list key -> what the list holds, for O(1) de-duplication
        self._in_draft = False  # between the draft model's "Loading drafter model" and the end of its load
        self._served = False  # the log shows the server serving (see failure.SERVED_ACCESS): the start was over
        self._repairs = dict.fromkeys(REPAIRS, 0)

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
