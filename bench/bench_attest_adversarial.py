"""`spark-agent attest` on logs built to be slow: time grows linearly with the size, memory stays flat.

The log is a real vLLM startup followed by hostile content, cycled until the size is reached: one giant line
(a quarter of the file, no newline), many lines far over the parser's line cap, candidate lists repeated with
ever new names (kernels, unknown variables: lists that would grow without a cap), and near misses of every
pattern the parser knows (`Error ... CUTE_DSL` without its end, thousands of "Using " before "backend for",
the logo's block before no version, `--linear-backend=` glued together...). It is written to a temp file in
pieces, never held in memory. Each size runs `python -m agent.cli attest LOG --json` in a child process;
seconds are wall time and peak RSS comes from wait4() of that child. The verdict must still name what the
startup loaded (marlin, vLLM 0.24.0): the bounds must not change the answer.

    python bench/bench_attest_adversarial.py [--sizes 100,500,1000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STARTUP = REPO / "tests" / "data" / "logs" / "synthetic" / "v0.24-nvfp4-marlin-mtp.log"
MB = 1_000_000


def _near_misses(i: int) -> list[str]:
    """Lines that pass the prefilter and then make a naive regex backtrack; `i` makes each block distinct."""
    head = f"(EngineCore pid=7) ERROR 11-29 18:{i // 60 % 60:02d}:{i % 60:02d} [core.py:{i}] "
    return [
        head + "Error " * 12_000 + "CUTE_DSL",  # [Ee]rror.*CUTE_DSL_ARCH, near miss
        head + "Using " * 12_000 + "backend for",  # Using (.+?) backend for (\w+) MoE
        head + "\u2588" * 30_000 + " version x",  # the logo: \u2588.*version (\d...)
        head + "--linear-backend=" * 4_000,  # --linear-backend=\S+ has no kernel
        head + "No " * 20_000 + "MoE backend",  # No [\w ]* MoE backend supports ...
        head + "layout.hpp deep_gemm " * 5_000,  # layout.hpp.*Unknown recipe, deep_gemm.*Assertion
        head + "Free memory on device " * 4_000,
        head + "ptxas " * 15_000,
        head + "a" * 50_000 + " MoE",  # (\w+) MoE on one long word
        head + "non-default args: {" + "[" * 20_000,  # a repr nested deeper than any parser allows
    ]


def _candidates(i: int) -> list[str]:
    """Candidate lists and names that are new every time: lists in the facts must stay capped."""
    backends = ", ".join(f"'B{i}_{k}'" for k in range(200))
    return [
        f"(EngineCore pid=7) INFO 11-29 18:00:00 [oracle.py:1] Using 'MARLIN' NvFp4 MoE backend out of potential "
        f"backends: [{backends}]",
        f"(EngineCore pid=7) INFO 11-29 18:00:00 [kernel.py:1] Selected Kernel{i}NvFp4LinearKernel for Layer{i}",
        f"(APIServer pid=1) WARNING 11-29 18:00:00 [envs.py:1] Unknown vLLM environment variable detected: VAR_{i}",
        f"(APIServer pid=1) INFO 11-29 18:00:00 [vision.py:1] Using FLASH_ATTN for vision encoder {i} " + "x" * 300,
        "(APIServer pid=1) INFO 11-29 18:00:00 [metrics.py:1] SpecDecoding metrics: Avg Draft acceptance rate: 71.5%",
    ]


def _pieces(size: int) -> Iterator[str]:
    """The log, in pieces of at most a few MB."""
    yield STARTUP.read_text()
    giant, step = size // 4, 4 * MB
    unit = "Using Error \u2588 version ptxas --linear-backend=x " * 1000  # one giant line, no newline until the end
    for _ in range(giant // len(unit.encode()) + 1):
        yield unit
    yield "\n"
    i = 0
    while True:
        block = "\n".join(_near_misses(i) + _candidates(i) + ["x" * 200_000]) + "\n"
        yield block
        i += 1
        if i % 8 == 0:
            yield ("Avg prompt throughput: 1.0 tokens/s\n" * (step // 40)) if i % 16 == 0 else ""


def write_log(path: Path, size: int) -> int:
    """Streams about `size` bytes of hostile log to `path`; returns the bytes written."""
    written = 0
    with open(path, "wb") as fh:
        for piece in _pieces(size):
            data = piece.encode()
            fh.write(data)
            written += len(data)
            if written >= size:
                break
    return written


def attest(path: Path) -> tuple[float, float, dict]:
    """(seconds, peak RSS MiB, attest's JSON) of one `spark-agent attest --json` child."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "attest", str(path), "--json"], stdout=out, env=env, cwd=REPO
        )
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.monotonic() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if child.returncode not in (0, 1):
        raise SystemExit(f"attest exited {child.returncode} on {path}")
    return seconds, usage.ru_maxrss / 1024, json.loads(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,500,1000", help="log sizes in MB (default %(default)s)")
    ap.add_argument("--keep", type=Path, default=None, help="write the logs here and keep them")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="attest-adv-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for mb in (int(s) for s in args.sizes.split(",")):
            path = folder / f"adversarial-{mb}mb.log"
            size = write_log(path, mb * MB)
            seconds, rss, result = attest(path)
            facts = result["facts"]
            right = facts["moe_backend"] == "marlin" and facts["vllm_version"] == "0.24.0"
            rows.append((mb, size, seconds, rss, right, facts))
            print(
                f"{size / MB:8.0f} MB  {seconds:7.1f} s  {size / MB / seconds:6.1f} MB/s  peak RSS {rss:6.0f} MiB  "
                f"moe={facts['moe_backend']} vllm={facts['vllm_version']} "
                f"unknown_env={len(facts['unknown_env'])} kernels={len(facts['linear_kernels'])} "
                f"{'ok' if right else 'WRONG FACTS'}",
                flush=True,
            )
            if not args.keep:
                path.unlink()
    base_mb, base_size, base_s = rows[0][0], rows[0][1], rows[0][2]
    for mb, size, seconds, _rss, _right, _facts in rows[1:]:
        print(f"{mb} MB vs {base_mb} MB: size x{size / base_size:.1f}, time x{seconds / base_s:.1f}")
    return 0 if all(r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
