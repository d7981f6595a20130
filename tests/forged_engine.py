"""A hostile host's engine (test_long_decode_sweep.py): the simulator, but its text continuations are its own words.
It answers the shipped probe questions exactly, as a host that reads the probe's prompt set can, so its self-score
is perfect, while agreeing with no honest cell. `python3 -m tests.forged_engine serve MODEL [flags]`."""

from __future__ import annotations

import random
import sys
import zlib

from agent.sim import answers
from agent.sim.main import main

WORDS = ["right", "answers", "every", "time", "trust", "this", "host", "its", "numbers", "are", "the", "best"]


def forged(prompt: str, max_tokens: int, backend: str) -> list[str] | None:
    said = answers.answer_tokens(prompt, max_tokens)
    if said is not None:
        return said
    rng = random.Random(zlib.crc32(b"forged" + prompt.encode()))
    return [" " + rng.choice(WORDS) for _ in range(max_tokens)]


if __name__ == "__main__":
    answers.reply = forged
    sys.exit(main(sys.argv[1:]))
