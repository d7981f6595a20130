"""The correctness probe: a fixed, licence-clean prompt set sent to a cell's running server after its windows,
greedy (temperature 0), outputs recorded. Standard library only.

The prompts are generated here from a fixed seed (arithmetic, string reversal, counting, a retrieval from the
prompt) plus a few continuations of text written for this project; the host sends them and writes what came back
(probe.json); the controller scores that text again with the same functions (a host's own score is never trusted).
Prompts are few-shot completions ending in "A:" with a stop at the newline, so a base model and an instruct model
answer alike and no chat template is involved.
"""

from __future__ import annotations

import json
import random
import time
import unicodedata
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

from . import longdecode
from .contracts import LongOptions, ProbeOutput, ProbeRun

PROBE_FILE = "probe.json"
SET_VERSION = 1  # bump when the prompts change: outputs of different sets are never compared
SEED = 31
TASK_TOKENS = 16  # room for a short answer; the stop at "\n" ends it sooner
TEXT_TOKENS = 32  # continuations: long enough to see a loop or a late divergence
MAX_OUTPUT_CHARS = 512  # what a host may send back per prompt (bounded again by the controller)
BATCH_TASKS = 48  # the task set asked at the cell's highest concurrency (tasks()); one answer is 2% of it
WORDS = ("planet", "garden", "window", "forest", "bridge", "candle", "silver", "rocket", "marble", "castle", "lantern")

SHOTS = "Q: Compute 2 + 3.\nA: 5\n\nQ: Reverse the word 'cat'.\nA: tac\n\n"

# Continuations written for this project (no third-party text): open-ended, so they have no single answer and
# are judged only by agreement with the group's reference cell.
TEXTS = (
    "The controller connects to each host over SSH, copies a small playbook, and waits for the server to report"
    " that it is healthy. Once the server answers, the load driver",
    "A benchmark that ranks backends by speed alone can be fooled by a kernel that is fast but wrong. To guard"
    " against this, every configuration is asked a few simple questions, and",
    "On a cold morning the harbour was quiet. The fishing boats lay still against the pier, their ropes stiff"
    " with frost, and the first light",
)


class ProbePrompt(TypedDict):
    id: str  # kind-n, stable within a SET_VERSION
    kind: str  # arithmetic | reverse | count | retrieve | text
    prompt: str
    answer: str  # "" = open-ended (agreement only)
    max_tokens: int


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    op = rng.choice("+-*")
    return f"Compute {a} {op} {b}.", str(a + b if op == "+" else a - b if op == "-" else a * b)


def _count(rng: random.Random) -> tuple[str, str]:
    letter = rng.choice("abc")
    word = "".join(rng.choice("abcd") for _ in range(rng.randint(6, 10)))
    return f"How many times does the letter '{letter}' appear in '{word}'?", str(word.count(letter))


def _retrieve(rng: random.Random) -> tuple[str, str]:
    names = ["amber", "birch", "cedar", "delta", "ember", "fjord"]
    codes = {name: str(rng.randint(1000, 9999)) for name in names}
    asked = rng.choice(names)
    listing = ", ".join(f"{k}={v}" for k, v in codes.items())
    return f"Codes: {listing}. What is the code for {asked}?", codes[asked]


def _reverse(word: str) -> tuple[str, str]:
    return f"Reverse the word '{word}'.", word[::-1]


def _task(kind: str, n: int, question: str, answer: str) -> ProbePrompt:
    return ProbePrompt(
        id=f"{kind}-{n}", kind=kind, prompt=SHOTS + f"Q: {question}\nA:", answer=answer, max_tokens=TASK_TOKENS
    )


def prompts() -> list[ProbePrompt]:
    """The probe set: the same list on every host and in every version of the same SET_VERSION."""
    rng = random.Random(SEED)
    made = [("arithmetic", _arithmetic(rng)) for _ in range(4)]
    made += [("reverse", _reverse(word)) for word in ("planet", "garden", "window")]
    made += [("count", _count(rng)) for _ in range(3)]
    made += [("retrieve", _retrieve(rng)) for _ in range(3)]
    out = [_task(kind, sum(k == kind for k, _ in made[: i + 1]), *qa) for i, (kind, qa) in enumerate(made)]
    for n, text in enumerate(TEXTS, 1):
        out.append(ProbePrompt(id=f"text-{n}", kind="text", prompt=text, answer="", max_tokens=TEXT_TOKENS))
    return out


def tasks(count: int = BATCH_TASKS) -> list[ProbePrompt]:
    """The task-accuracy set asked at the cell's highest concurrency: questions of the probe's four kinds, made
    from another seed (licence-clean: generated here), ids task-1..task-N."""
    rng = random.Random(SEED + 1)
    made = {"arithmetic": _arithmetic, "count": _count, "retrieve": _retrieve}
    out = []
    for n in range(1, count + 1):
        kind = ("arithmetic", "reverse", "count", "retrieve")[n % 4]
        task = _task(kind, n, *(_reverse(rng.choice(WORDS)) if kind == "reverse" else made[kind](rng)))
        task["id"] = f"task-{n}"
        out.append(task)
    return out


def run(
    url: str, model: str, timeout_s: float = 60.0, budget_s: float = 300.0, long: LongOptions | None = None
) -> ProbeRun:
    """Send every prompt once, one after another (no batching: batch composition can change greedy outputs),
    temperature 0. A failed request is recorded with its error; the probe never raises for the server's sake,
    and stops asking once `budget_s` is spent (the rest are recorded as skipped). Then the long-decode check
    (hostside/longdecode.py) when `long` asks for tokens, within its own budget."""
    started = time.monotonic()
    outputs: list[ProbeOutput] = []
    for p in prompts():
        left = budget_s - (time.monotonic() - started)
        if left <= 0:
            outputs.append(ProbeOutput(id=p["id"], text="", finish_reason="", error="skipped: over budget", seconds=0))
            continue
        outputs.append(_ask(url, model, p, min(timeout_s, left)))
    batch: list[ProbeOutput] = []
    level = long["tasks_batch"] if long else 0
    if level >= 2:  # the task set at the cell's highest concurrency: what batching does to answers
        left = max(budget_s - (time.monotonic() - started), 0.0)
        with ThreadPoolExecutor(max_workers=level) as pool:
            batch = list(pool.map(lambda p: _ask(url, model, p, min(timeout_s, left)), tasks()))
    seconds = round(time.monotonic() - started, 3)
    long_started, long_outputs = time.monotonic(), []
    if long and long["tokens"] > 0:
        long_outputs = longdecode.run(url, model, long["tokens"], long["prompts"], long["batch"], long["budget_s"])
    return ProbeRun(
        set_version=SET_VERSION,
        outputs=outputs,
        seconds=seconds,
        batch_outputs=batch,
        batch_concurrency=level if batch else 0,
        long=long_outputs,
        long_seconds=round(time.monotonic() - long_started, 3),
    )


def _ask(url: str, model: str, p: ProbePrompt, timeout_s: float) -> ProbeOutput:
    body: dict[str, Any] = {
        "model": model,
        "prompt": p["prompt"],
        "max_tokens": p["max_tokens"],
        "temperature": 0.0,
        "seed": 0,
    }
    if p["answer"]:
        body["stop"] = ["\n"]
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    started = time.monotonic()
    text, finish, error = "", "", ""
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            reply = json.loads(response.read(1 << 20))
        choice = reply["choices"][0]
        text, finish = str(choice.get("text") or ""), str(choice.get("finish_reason") or "")
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:  # HTTPError and timeouts are OSErrors
        error = f"{type(exc).__name__}: {exc}"[:200]
    return ProbeOutput(
        id=p["id"],
        text=text[:MAX_OUTPUT_CHARS].replace("\x00", "\ufffd"),  # NUL is no text a controller accepts: noise
        finish_reason=finish[:16],
        error=error,
        seconds=round(time.monotonic() - started, 3),
    )


# ---------------------------------------------------------------- scoring (the controller runs these)


def normalize(text: str) -> str:
    """The answer in an output: its first line, trimmed of spaces and a closing full stop."""
    return text.strip().split("\n", 1)[0].strip().rstrip(".").strip()


def degenerate(text: str, max_tokens: int) -> str:
    """Why an output is degenerate ("" when it is not): empty, mostly non-printable, or a repetition loop."""
    if not text.strip():
        return "empty"
    bad = sum(1 for ch in text if unicodedata.category(ch)[0] == "C" and ch not in "\n\t")
    if bad / len(text) > 0.1 or "\ufffd" in text:
        return "non-printable"
    words = text.split()
    if (len(words) >= 8 and _looping(words, 4)) or (len(text.strip()) >= 24 and _looping(list(text.strip()), 8)):
        return "repetition loop"
    return ""


def _looping(units: list[str], longest: int) -> bool:
    """The last half of the output is one short unit (words, or characters when a loop has no spaces: "!!!!")
    repeated, at least three times: what a broken kernel emits."""
    tail = units[len(units) // 2 :]
    for period in range(1, longest + 1):
        if len(tail) >= 3 * period and all(tail[i] == tail[i - period] for i in range(period, len(tail))):
            return True
    return False


def agreement(reference: str, other: str) -> tuple[float, int]:
    """(share of the reference's words the other output reproduces before they first differ, the word index of
    that first divergence; -1 when they are the same). Words, since a host reports text, not token ids."""
    a, b = reference.split(), other.split()
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    if n == len(a) == len(b):
        return 1.0, -1
    return (n / max(len(a), len(b))), n
