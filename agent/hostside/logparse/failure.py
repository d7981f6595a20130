"""Failures: why a start failed (`fatal` as soon as a line says it, then the facts' `failure`) and why an engine
that was serving died (`runtime_failure`), told apart by whether the log showed the server ready or serving first.

Its own family because it is the one with memory: a cause is decided from the lines around it (the traceback after
"EngineCore failed to start", the exception before "Engine core initialization failed", a candidate backend passed
over earlier), where the other families read each line alone. The classes are signature.py's table.
"""

from __future__ import annotations

import re
from typing import Any

from ..contracts import Attestation, Failure
from .attestation import MAX_EVIDENCE
from .backend import BACKEND_WORDS, CANDIDATE, BackendLines, linear_backend_of, normalise_backend, quant_of
from .line import MAX_LINE, clean, split_header
from .signature import (
    DISABLED,
    ENDED_BEFORE_READY,
    ROOT_CAUSE_MISSING,
    SUPERVISOR_PREFIX,
    death_cause_of,
    disabled_class,
    requirement,
    signature_of,
)

# --- serving: proof that the start was over ---------------------------------------------------------
# A server that answered a request (uvicorn's access line with 200), took one into its engine, or failed inside the
# engine's busy loop had started: what dies after that is a crash while serving, never a failed start. An excerpt
# can show this without the start's own lines.
SERVED_ACCESS = re.compile(r'"(?:GET|POST|PUT|DELETE|PATCH) /\S{0,300} HTTP/\d(?:\.\d)?" 200\b')
SERVED_REQUEST = ("Added request", "Received request", "Finished request", "Generated response")
# Only the loops that serve log these: V1's busy loop (core.py) and its step dump (dump_input.py, which carries the
# version and the engine config), the API server's output handler (started by the first request), and V0's engine
# loop (MQLLMEngine, AsyncLLMEngine).
SERVING_ENGINE = re.compile(
    r"\bin (?:run_busy_loop|_process_engine_step|step_with_batch_queue|run_engine_loop|engine_step|output_handler)\b"
    r"|\.run_busy_loop\(\)|output_handler failed"  # the frame's source line: run_engine_core had the loop running
    r"|EngineCore encountered (?:a fatal error|an issue)|EngineDeadError|Dumping (?:input data|scheduler output)"
    r"|Engine core proc \w{1,40} died unexpectedly"
)
# A frame of the loops that serve: a traceback through one is a death while serving, whatever line says so or not.
_BUSY_FRAME = re.compile(
    r"\bin (?:run_busy_loop|_process_engine_step|step_with_batch_queue|run_engine_loop|engine_step)\b|\.run_busy_loop\(\)"
)
# V0's engine loop logs the exception's repr when it dies: "ERROR ... engine.py:158] NotImplementedError('...')"
_EXCEPTION_REPR = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\(")

# The engine died. "Dying" lines are logged with a traceback after them (its last line names the cause);
# "died" lines are the API server's final word, after the engine's traceback (or before, when streams interleave).
_ENGINE_DYING = re.compile(
    r"EngineCore failed to start|WorkerProc failed to start|Worker failed with error|WorkerProc hit an exception"
    r"|EngineCore encountered a fatal error|AsyncLLM output_handler failed"
)
_ENGINE_DIED = re.compile(
    r"Engine core initialization failed|Engine process failed to start|EngineDeadError"
    r"|Got fatal signal from worker processes"  # 0.7's V1 wording
    r"|Engine core proc \w{1,40} died unexpectedly"  # V1 core_client's monitor, which runs once the engine is up
)
# "ValueError: ...", "torch.OutOfMemoryError: ...", and Ray's wrapper "ray.exceptions.RayTaskError(ValueError): ..."
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt)(?:\(\w{1,80}\))?(?::|$)")
# An exception named inside a sentence ("... and then it crashes with KeyError: 'model.layers.0'"): a paste's prose.
_PROSE_EXCEPTION = re.compile(r"(?<![\w.])(?:[A-Za-z_]\w{0,60}\.){0,4}[A-Z]\w{0,60}(?:Error|Exception): \S")
# A traceback's frame and caret lines: never the root cause, even when logged at ERROR level.
_FRAME_LINE = re.compile(r"^(?:\s|Traceback|File \"|\^)")
_MOE_CLASSES = ("no_moe_backend", "unsupported_moe_backend", "unsupported_backend")
# The backend family a kernel's own failure class is about.
_CLASS_BACKEND = {
    "flashinfer_jit_arch": "flashinfer",
    "triton_shared_memory": "triton",
    "deep_gemm_assert": "deep_gemm",
    "flashinfer_version": "flashinfer",
}
_BACKEND_CLASSES = ("unsupported_backend", "cutlass_disabled")  # classes whose `backend` the message names
_UNEXPLAINED = ("root_cause_not_in_excerpt",)  # a start that failed, its cause not shown (a log that just ends: no)
_BARE_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w+(?:Error|Exception)?:?\s*$")  # "AssertionError" with no message
_MOE_ERROR_QUANT = re.compile(r"\b(\w{1,40}) MoE\b")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_CONTEXT = 2000  # characters of an exception line or frame kept to read with the next line
# What a process that died before vLLM logged anything says last: an exception line, or the shell's and loader's
# own complaints (python cannot import vLLM, a missing binary or file, a killed process). Anything else is not taken.
_LAST_WORDS = re.compile(
    r"(?:[\w.]*(?:Error|Exception)\b|.*\b(?:No module named|command not found|not found|No such file or directory|"
    r"Permission denied|can't open file|Segmentation fault|Killed)\b)"
)


class FailureLines(BackendLines):
    """Watches for a failed start until the server is ready (or seen serving), then for an engine that dies.

    `.fatal` is a failure dict as soon as a fatal signature is seen before readiness, else None.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fatal: Failure | None = None
        self._last_exception = ""
        self._last_error = ""
        self._last_words = ""  # the last line that is neither vLLM's log nor the supervisor's: the process's own
        self._dying = False
        self._fail_lines: list[str] = []
        self._death: dict[str, Any] = {"class": "", "root_cause": "", "evidence": []}  # dying after readiness
        self._death_dying = False
        self._stopping = False  # the server was told to stop (0.24+: "[shutdown] ... signal=SIGTERM")
        self._prose_exception = ""  # an exception named inside prose (see _PROSE_EXCEPTION)
        self._early_death = ("", "", "")  # (class, message, line): a runtime cause seen before the log showed serving
        self._error_frames = False
        self._bare_rejected = False  # a candidate's refusal pasted without its level (see _watch_failure)
        self.exc_pending = ""  # an exception no signature named: the follower hands the next line on too
        self._last_frame = ""  # the last traceback frame ('File "..."'), for the bare exception it raised

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

    # -- failures --
    def _watch_failure(self, level: str, msg: str, line: str) -> None:
        cls = signature_of(msg)
        # A candidate's refusal at DEBUG/INFO is selection going on. Pasted without its level, and not raised (no
        # exception name in front), it is read the same way; the paste's failure falls back on it only when nothing
        # was selected for that part (see _failure), even if the paste then just ends.
        if cls == "unsupported_backend":
            bare = not level and CANDIDATE.search(msg) is not None and not _EXCEPTION_LINE.match(msg)
            if (level in ("DEBUG", "INFO") or bare) and self._passed_over(msg, line):
                self._bare_rejected = self._bare_rejected or bare
                return
        if not cls and "disabled for this" in msg and DISABLED.search(msg):
            if level in ("ERROR", "CRITICAL") or _EXCEPTION_LINE.match(msg) or "ssert" in msg:
                cls = disabled_class(msg)
            elif level not in ("INFO", "DEBUG"):  # a warning (or a bare paste); an INFO note explains nothing
                self._disabled = self._disabled or msg
                self._keep(line)
                return
        if not cls and msg.startswith(SUPERVISOR_PREFIX):  # killed while starting (the OOM killer, loading weights)
            cls = death_cause_of(msg)
        if not cls:
            cls, msg = self._with_context(msg)
        if cls:
            self._keep(line)
            if self.fatal is None or self.fatal["class"] in ("engine_init_failed", ROOT_CAUSE_MISSING):
                self._declare(cls, msg)  # the first decisive line wins; "engine died" gives way to its cause
            elif self.fatal["class"] == cls and _EXCEPTION_LINE.match(msg):
                self._declare(cls, msg)  # the exception line says it better than the traceback's source line
            return
        if not self._early_death[0] and level in ("ERROR", "CRITICAL"):  # a cause that a later line may show was
            death_cls = death_cause_of(msg)  # a crash while serving (an excerpt that starts mid-crash)
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
        elif (
            level in ("ERROR", "CRITICAL")
            or ("/vllm/" in msg and msg.lstrip().startswith('File "'))
            or msg.startswith(_CHAINED)
        ):
            self._error_frames = True  # a traceback (logged as errors, vLLM's own frames, a chain): something failed
        elif not level and not self._prose_exception and ("Error: " in msg or "Exception: " in msg):
            m = _PROSE_EXCEPTION.search(msg)
            if m and not _FRAME_LINE.match(msg):
                self._prose_exception = msg[m.start() :]

    def _with_context(self, msg: str) -> tuple[str, str]:
        """(class, cause) of an exception read with what the paste keeps around it: its message wrapped onto the next
        line ("Assertion error" here, the DeepGEMM path there), or, for a bare exception ("AssertionError"), the
        frame that raised it (".../deep_gemm/jit_kernels/gemm.py ... in gemm_fp8_fp8_bf16_nt"). ("", msg) if none."""
        pending, self.exc_pending = self.exc_pending, ""
        frame = self._last_frame
        if msg.lstrip().startswith('File "'):
            self._last_frame = msg.strip()[:_CONTEXT]
            return "", msg
        if pending and msg.strip() and not _EXCEPTION_LINE.match(msg) and not _FRAME_LINE.match(msg.strip()):
            joined = f"{pending} {msg.strip()[:_CONTEXT]}"
            cls = signature_of(joined)
            if cls:
                self._repairs["wrapped"] += 1
                return cls, joined
        if _EXCEPTION_LINE.match(msg):
            if frame and _BARE_EXCEPTION.match(msg):
                cls = signature_of(f"{frame} {msg}")
                if cls:
                    return cls, f"{msg.strip()} (raised at {frame})"
            self.exc_pending = msg[:_CONTEXT]  # the next line may carry its message on
        return "", msg

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
            if _BUSY_FRAME.search(line):  # a traceback through the serving loop: the engine died in it
                self._death_dying = True
                if self._last_exception and not self._death["class"] and self.fatal is None:
                    # a chained traceback prints its cause first ("TimeoutError", then "The above exception was the
                    # direct cause ..." and the busy loop's frames): that exception is what killed the loop
                    self._death["class"] = death_cause_of(self._last_exception) or "other"
                    self._death["root_cause"] = self._last_exception
                    self._keep_death(self._last_exception)
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
        cls = death_cause_of(msg)
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
            elif (
                death["class"] == "other"
                and _BARE_EXCEPTION.match(death["root_cause"])
                and not _BARE_EXCEPTION.match(msg)
                and not msg.startswith(SUPERVISOR_PREFIX)
            ):  # a chain: the bare cause ("TimeoutError") is said better by the exception it caused
                death["root_cause"] = f"{msg} (caused by {death['root_cause'].strip()})"
        elif level in ("ERROR", "CRITICAL") and self._death_dying:
            self._keep_death(line)

    def _keep_death(self, line: str) -> None:
        evidence = self._death["evidence"]
        if len(evidence) < MAX_EVIDENCE and line not in evidence:  # at most MAX_EVIDENCE lines to look through
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
            and quant_of(m.group(1)) == "unquantized"
            and main not in ("", "unquantized")
            and self._f["speculative"]["method"]
        ):
            return (
                f"probably the draft model (the main model's MoE is {main} and loaded; set moe_backend in "
                "--speculative-config): "
            )
        return ""

    def _keep(self, line: str) -> None:
        if len(self._fail_lines) < MAX_EVIDENCE and line not in self._fail_lines:  # at most 12: a list will do
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
        m = BACKEND_WORDS.search(cause)
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
            words = self._last_words if not (self._f["vllm_log_lines"] or recognised(self._f)) else ""
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
        unexplained = (
            failure["class"] in _UNEXPLAINED
            or (failure["class"] == ENDED_BEFORE_READY and self._bare_rejected)
            or (failure["class"] in ("other", "engine_init_failed") and _BARE_EXCEPTION.match(failure["root_cause"]))
        )
        fallback = self._fallback_cause()
        if fallback and unexplained:  # the start failed with nothing more specific
            failure["class"] = disabled_class(fallback) if fallback == self._disabled else "unsupported_backend"
            failure["root_cause"] = fallback
        self._name_backend(failure)
        return failure


def _unique_lines(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def recognised(f: Attestation) -> bool:
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
