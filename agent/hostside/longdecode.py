"""The long-decode check: a few long greedy generations (ignore_eos) sent to a cell's server after the short probe,
once at concurrency 1 and once inside a batch as large as the cell's highest level. Standard library only.

Outputs that go bad late (a loop or noise after thousands of tokens, with CUDA graphs, prefix caching or a draft
model on) pass a short probe; these are long enough to show it. The host records what came back, streamed with
the server's running token count, so the controller can name token positions: the token ids when the server
returns them (`return_token_ids`, vLLM >= 0.10.2), the text and the token count at each chunk always. The controller
judges (judging/longdecode.py): a host's own judgement is never asked for.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .contracts import LongOptions, LongOutput

MAX_TOKENS = 32_768  # the spec's bound on one generation (planning/spec.py checks it against max_model_len)
MAX_PROMPTS = 4
MAX_CHARS = 8 * MAX_TOKENS  # text kept per output: a broken kernel's tokens can be long
MAX_LINE = 1 << 16  # one SSE line

# Openings written for this project (no third-party text), each inviting a long, open-ended continuation.
OPENINGS = (
    "Chapter one. The survey ship reached the outer moon three weeks late, and the crew, tired of tinned food and"
    " of each other, argued about who would step out first. The engineer, who had kept the reactor alive through",
    "A practical guide to keeping bees in a small garden. Before buying a hive, spend a season watching the"
    " flowers near your house: which bloom in spring, which in late summer, and how far the nearest water is."
    " The first thing to understand is",
    "The history of the river town is mostly a history of its bridges. The first was a ferry rope, the second a"
    " timber span that burned, and the third, built of stone by a mason whose name nobody wrote down,",
    "Notes from a workshop on writing clear technical documents. Begin with the reader's question, not with what"
    " you know. A reader who opens a manual wants to do something, and every paragraph should help them",
)
PROMPT_IDS = tuple(f"long-{n}" for n in range(1, len(OPENINGS) + 1))


def options(raw: Any) -> LongOptions | None:
    """The plan's `probe_long` (planning/matrix.py) as bounded options; None when it asks for nothing."""
    if not isinstance(raw, dict) or not (raw.get("tokens") or raw.get("tasks_batch")):
        return None
    return LongOptions(
        tokens=max(0, min(int(raw["tokens"]), MAX_TOKENS)),
        prompts=max(0, min(int(raw.get("prompts", 1)), MAX_PROMPTS)),
        batch=max(0, min(int(raw.get("batch", 0)), 1024)),
        budget_s=max(0.0, float(raw.get("budget_s", 0.0))),
        tasks_batch=max(0, min(int(raw.get("tasks_batch", 0)), 1024)),
    )


def run(url: str, model: str, tokens: int, count: int, batch: int, budget_s: float) -> list[LongOutput]:
    """Each of the first `count` openings generated to `tokens` tokens, greedy: one after another (path "c1"),
    then all at once with copies up to `batch` requests in flight (path "batch", the first copy of each recorded;
    skipped when batch < 2). Never raises for the server's sake; stops asking once `budget_s` is spent."""
    started = time.monotonic()
    chosen = list(zip(PROMPT_IDS, OPENINGS, strict=True))[: max(0, min(count, MAX_PROMPTS))]
    tokens = max(1, min(tokens, MAX_TOKENS))
    out: list[LongOutput] = []
    for pid, text in chosen:
        left = budget_s - (time.monotonic() - started)
        out.append(_generate(url, model, pid, text, tokens, "c1", left))
    if batch >= 2 and chosen:
        left = budget_s - (time.monotonic() - started)
        jobs = [chosen[i % len(chosen)] for i in range(max(batch, len(chosen)))]
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            replies = list(pool.map(lambda job: _generate(url, model, job[0], job[1], tokens, "batch", left), jobs))
        out.extend(replies[: len(chosen)])
    return out


def _generate(url: str, model: str, pid: str, prompt: str, tokens: int, path: str, budget_s: float) -> LongOutput:
    result = LongOutput(id=pid, path=path, text="", token_ids=[], chunk_tokens=[], chunk_chars=[], error="", seconds=0)
    if budget_s <= 0:
        result["error"] = "skipped: over budget"
        return result
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0.0,
        "seed": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_token_ids": True,  # vLLM >= 0.10.2; an older server ignores it and the controller compares words
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "accept": "text/event-stream"},
    )
    started = time.monotonic()
    text: list[str] = []
    chars, counted, ids_whole = 0, 0, True
    try:
        with urllib.request.urlopen(request, timeout=min(budget_s, 600.0)) as response:
            while time.monotonic() - started < budget_s:
                line = response.readline(MAX_LINE)
                if not line:
                    break
                event = _event(line)
                if event is None:
                    continue
                choices = event.get("choices") or []
                if not choices:
                    continue
                choice = choices[0]
                piece = str(choice.get("text") or "")
                ids = choice.get("token_ids")
                if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
                    result["token_ids"].extend(ids)
                else:
                    ids_whole = False
                usage = event.get("usage") or {}
                total = usage.get("completion_tokens")
                step = len(ids) if isinstance(ids, list) and ids else 1
                counted = total if isinstance(total, int) and total > counted else counted + step
                if chars < MAX_CHARS:
                    text.append(piece[: MAX_CHARS - chars])
                chars += len(piece)
                result["chunk_tokens"].append(counted)
                result["chunk_chars"].append(min(chars, MAX_CHARS))
                if counted >= MAX_TOKENS or len(result["chunk_tokens"]) >= MAX_TOKENS:
                    break
            else:
                result["error"] = "stopped: over budget"
    except (OSError, ValueError) as exc:  # HTTPError and timeouts are OSErrors
        result["error"] = f"{type(exc).__name__}: {exc}"[:200]
    result["text"] = "".join(text).replace("\x00", "\ufffd")  # NUL is no text a controller accepts: noise
    if not ids_whole:
        result["token_ids"] = []
    result["token_ids"] = result["token_ids"][:MAX_TOKENS]
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _event(line: bytes) -> dict[str, Any] | None:
    """One SSE `data:` line's JSON object; None for anything else ([DONE], comments, blank lines)."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if not data or data == b"[DONE]":
        return None
    try:
        event = json.loads(data)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None
