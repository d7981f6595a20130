"""Redaction is linear: redact_text over inputs built to be slow, at growing sizes, and over a real server log.

For each adversarial shape (one long word, a name repeated without a value, an unclosed quote, `--` runs, `://`
without `@`, `bearer` and `authorization:` runs, key blocks without an end, a JWT-like prefix repeated) it times
1, 2, 4 and 8 MiB and prints seconds per MiB: linear means that figure stays flat as the size doubles. Collect masks
server.log line by line with the same function, so the real-log figure is what a cell's log costs.

    .venv/bin/python bench/bench_redact.py [--max-mib 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.hostside import redact  # noqa: E402

SHAPES = {
    "long word": "a",
    "name, no value": "HF_TOKEN",
    "unclosed quote": "'a",
    "dashes": "--",
    "flags, no value": "--api-key ",
    "scheme, no @": "://a:",
    "bearer runs": "bearer ",
    "authorization runs": "authorization: ",
    "key block, no end": "-----BEGIN PRIVATE KEY-----",
    "jwt-like prefix": "eyJaaaaaaaaaa.",
    "assignments": "a=b ",
}
MIB = 1 << 20


def seconds(text: str) -> float:
    start = time.perf_counter()
    redact.redact_text(text)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-mib", type=int, default=8)
    args = parser.parse_args()
    sizes = [s for s in (1, 2, 4, 8, 16, 32) if s <= args.max_mib]
    print(f"{'shape':22}" + "".join(f"{s:>8} MiB" for s in sizes) + "   (seconds per MiB)")
    for name, unit in SHAPES.items():
        row = []
        for size in sizes:
            text = (unit * (size * MIB // len(unit) + 1))[: size * MIB]
            row.append(seconds(text) / size)
        print(f"{name:22}" + "".join(f"{v:12.3f}" for v in row))
    logs = sorted((REPO / "tests" / "data" / "logs").rglob("*.log"))
    sample = "".join(p.read_text(errors="replace") for p in logs)
    real = (sample * (4 * MIB // max(1, len(sample)) + 1))[: 4 * MIB]
    start = time.perf_counter()
    for line in real.splitlines(keepends=True):
        redact.redact_text(line)
    print(f"real vLLM logs, line by line: {(time.perf_counter() - start) / 4:.3f} s per MiB ({len(logs)} logs)")


if __name__ == "__main__":
    main()
