"""How long `spark-agent report` takes over a big results tree (the claim: 10,000 measurements in under 10 s).

    .venv/bin/python bench/bench_report.py [--measurements 10000] [--keep DIR]

Generates a tree exactly per the results contract (tests/test_report_fixtures.write_cell): a fleet of GB10 hosts,
each with three NVFP4 checkpoints × marlin / flashinfer_b12x / one INVALID cell, FP8 × triton / marlin / one failed
cell, 10 concurrency levels, 5 repeats, ~2% of runs failed. Then times write_report() end to end (reading the
tree, statistics, ranking, plots, markdown, HTML) and its parts.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_report_fixtures import GB10_FACTS, write_cell

from agent.judging.correctness import judged_cells
from agent.reporting import markdown as report

CONCURRENCY = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
REPEATS = 5
# (checkpoint, quant, backend, base tok/s at c=1, noise, verdict)
CELLS = (
    [(ck, "nvfp4", "marlin", 64.0, 0.0125, "valid") for ck in ("nv", "uns", "uns-fast")]
    + [(ck, "nvfp4", "flashinfer_b12x", 32.0, 0.30, "valid") for ck in ("nv", "uns", "uns-fast")]
    + [(ck, "nvfp4", "cutlass", 70.0, 0.02, "invalid") for ck in ("nv", "uns", "uns-fast")]
    + [
        ("fp8", "fp8", "triton", 39.1, 0.0125, "valid"),
        ("fp8", "fp8", "marlin", 35.6, 0.0125, "valid"),
        ("fp8", "fp8", "deep_gemm", 0.0, 0.0, "failed"),
    ]
)


def generate(root: Path, measurements: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    per_host = sum(len(CONCURRENCY) * REPEATS for *_, verdict in CELLS if verdict != "failed")
    hosts = -(-measurements // per_host)
    written = 0
    for h in range(hosts):
        facts = dict(GB10_FACTS, fingerprint=f"{h:08x}")
        for ck, quant, backend, base, noise, verdict in CELLS:
            values = (
                {}
                if verdict == "failed"
                else {c: [_value(rng, base * c**0.8, noise) for _ in range(REPEATS)] for c in CONCURRENCY}
            )
            write_cell(
                root,
                backend=backend,
                values=values,
                checkpoint=ck,
                quant=quant,
                host=f"spark-{h + 1}",
                sweep="bench",
                verdict=verdict,
                status="failed" if verdict == "failed" else "done",
                verdict_reasons=["moe: requested cutlass, loaded MARLIN"] if verdict == "invalid" else [],
                failure_class="deep_gemm_assert" if verdict == "failed" else "",
                facts=facts,
                env={"VLLM_USE_DEEP_GEMM": "0"} if quant == "fp8" else None,
            )
            written += sum(map(len, values.values()))
    return written


def _value(rng: random.Random, mid: float, noise: float) -> float | str:
    if rng.random() < 0.02:
        return "stream closed before the window ended"
    return round(mid * rng.uniform(1 - noise, 1 + noise), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, default=None, help="generate into this folder and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "results"
        t0 = time.perf_counter()
        n = generate(root, args.measurements)
        print(f"generated {n} measurements in {time.perf_counter() - t0:.1f} s under {root}")
        t0, c0 = time.perf_counter(), time.process_time()
        report.write_report(root, Path(tmp) / "report")
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        parts = _parts(root)
        print("parts (wall): " + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()))
        load = os.getloadavg()[0]
        print(
            f"report over {n} measurements: {total:.2f} s wall, {cpu:.2f} s CPU, "
            f"{os.cpu_count()} CPUs, load average {load:.1f} "
            f"({'PASS' if total < 10 else 'FAIL'}: target < 10 s wall)"
        )
    return 0 if total < 10 else 1


def _parts(root: Path) -> dict[str, float]:
    """The same work again, stage by stage, to show where the time goes."""
    out = {}
    t0 = time.perf_counter()
    cells = judged_cells(root)
    out["read tree"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = report.build(cells)
    out["stats + ranking"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    images = report.render_plots(data)
    out["plots"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report.render_markdown(data, images)
    out["markdown"] = time.perf_counter() - t0
    return out


if __name__ == "__main__":
    sys.exit(main())
