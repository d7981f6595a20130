"""What the simulated model says: the right answer to a question it can compute from the prompt, a deterministic
continuation of other text, and (the wrong-output fault) a loop or noise.

The simulator is a fake model, so it reads the last "Q: ... A:" of a completion prompt and computes arithmetic,
reversals, letter counts and look-ups the way a healthy model would; it knows nothing of the probe's prompt list.
A continuation is drawn from the prompt's own words, seeded by the prompt; its last quarter is seeded by the loaded
MoE backend too, as real kernels' small numeric differences make greedy outputs part late in a long answer.
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass

QUESTION = re.compile(r"Q: ([^\n]*)\nA:\s*$")
ARITHMETIC = re.compile(r"Compute (-?\d{1,9}) ([-+*]) (-?\d{1,9})\.")
REVERSE = re.compile(r"Reverse the word '([^']{0,64})'\.")
COUNT = re.compile(r"How many times does the letter '(.)' appear in '([^']{0,256})'\?")
LOOKUP = re.compile(r"Codes: (.{0,2048})\. What is the code for (\w{1,32})\?")
SHARED_SHARE = 0.75  # of a continuation that every backend says alike


def answer(question: str) -> str | None:
    """The one right answer to a question the simulated model understands; None for any other."""
    if m := ARITHMETIC.fullmatch(question):
        a, op, b = int(m[1]), m[2], int(m[3])
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    if m := REVERSE.fullmatch(question):
        return m[1][::-1]
    if m := COUNT.fullmatch(question):
        return str(m[2].count(m[1]))
    if m := LOOKUP.fullmatch(question):
        codes = dict(pair.split("=", 1) for pair in m[1].split(", ") if "=" in pair)
        return codes.get(m[2])
    return None


def answer_tokens(prompt: str, max_tokens: int) -> list[str] | None:
    """The answer's tokens when the prompt ends in a question the model can compute ("Q: ...\nA:"), else None."""
    q = QUESTION.search(prompt)
    said = answer(q[1].strip()) if q else None
    return None if said is None else [" " + said][:max_tokens]


def reply(prompt: str, max_tokens: int, backend: str) -> list[str] | None:
    """The output tokens (words with their leading space) for a text prompt: its answer, or a continuation drawn
    from its words; None for an empty prompt (the engine's word cycle then)."""
    said = answer_tokens(prompt, max_tokens)
    if said is not None:
        return said
    words = prompt.split()
    if not words:
        return None
    shared = int(max_tokens * SHARED_SHARE)
    common = random.Random(zlib.crc32(prompt.encode()))
    own = random.Random(zlib.crc32(f"{backend}\0{prompt}".encode()))
    return [" " + (common if i < shared else own).choice(words) for i in range(max_tokens)]


@dataclass(frozen=True)
class Fault:
    """--sim-wrong-output: where a broken kernel sits and when it shows."""

    target: str  # a MoE backend's name | "draft" (wrong only with speculative decoding on) | "graph" (wrong only
    # without --enforce-eager: a kernel that breaks under CUDA graphs)
    rate: float = 0.0  # share of prompts that are wrong from their first token
    late: int = 0  # > 0: every prompt is right until this token, then loops or emits noise (a long decode going bad)

    def hits(self, moe_loaded: str, speculative: bool, eager: bool) -> bool:
        """Whether this server has the broken path."""
        if self.target == "draft":
            return speculative
        if self.target == "graph":
            return not eager
        return self.target == (moe_loaded or "").lower()


def parse_faults(text: str) -> list[Fault]:
    """--sim-wrong-output: faults separated by commas; ValueError when one is not a fault."""
    return [parse_fault(part.strip()) for part in text.split(",") if part.strip()]


def parse_fault(text: str) -> Fault:
    """`TARGET:RATE` or `TARGET:late@N`; ValueError when it is not that."""
    target, sep, mode = text.rpartition(":")
    if not sep or not target:
        raise ValueError(text)
    if mode.startswith("late@"):
        late = int(mode[5:])
        if late < 1:
            raise ValueError(text)
        return Fault(target.lower(), late=late)
    value = float(mode)
    if not 0 <= value <= 1:
        raise ValueError(text)
    return Fault(target.lower(), rate=value)


def wrong(prompt: str, rate: float) -> bool:
    """Whether the fault hits this prompt: decided by the prompt, so every run of the cell is wrong alike."""
    return rate > 0 and (zlib.crc32(b"wrong\0" + prompt.encode()) % 10_000) / 10_000 < rate


def gone_bad(prompt: str, late: int, said: list[str], max_tokens: int) -> list[str]:
    """A late fault: the right tokens until token `late`, then a broken kernel's (only when the output is longer)."""
    if max_tokens <= late:
        return said
    return said[:late] + garbage(prompt, max_tokens - late)


def garbage(prompt: str, max_tokens: int) -> list[str]:
    """What a broken kernel emits: a repeated word (a loop) or non-printable noise, every token of max_tokens."""
    rng = random.Random(zlib.crc32(prompt.encode()))
    if rng.random() < 0.5:
        word = rng.choice([" the", " of", " and", " 0"])
        return [word] * max_tokens
    return [
        "".join(chr(rng.choice((rng.randint(1, 8), 0xFFFD, rng.randint(14, 31)))) for _ in range(2))
        for _ in range(max_tokens)
    ]
