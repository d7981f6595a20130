"""The JIT fault (--sim-jit-s S / SPARK_SIM_JIT_S): the first S simulated seconds of serving compile kernels, as a
vLLM whose startup warmup missed a shape does. Meanwhile the engine is slower and the log carries vLLM 0.24's own
JIT monitor warning, worded as the real one (tests/data/logs/vllm-0.24-h200), once per EVERY_S.
It exists to test the steady-state rule (agent/hostside/steady.py): warmup must outlast it."""

from __future__ import annotations

import asyncio
from typing import Any

from .vlog import ENGINE, VllmLog

# kernel names of the real 0.24 logs' JIT lines
KERNELS = ("fused_moe_kernel", "_compute_slot_mapping_kernel", "_count_expert_num_tokens")
SLOWDOWN = 0.6  # ASSUMPTION: decode speed while compiling, a fraction of normal (no public figure)
EVERY_S = 1.0  # simulated seconds between JIT lines


def line(kernel: str) -> str:
    return (
        f"Triton kernel JIT compilation during inference: {kernel}. This causes a latency spike; consider "
        "extending warmup to cover this shape/config."
    )


async def compile_while_serving(engine: Any, log: VllmLog, seconds: float, time_scale: float) -> None:
    """From the first completion request on, for `seconds` simulated seconds: JIT lines and a slower engine."""
    loop = asyncio.get_running_loop()
    while not engine.submitted:
        await asyncio.sleep(0.02)
    end = loop.time() + seconds / time_scale
    engine.compiling = SLOWDOWN
    try:
        i = 0
        while loop.time() < end:
            log.warning(ENGINE, "jit_monitor.py:106", line(KERNELS[i % len(KERNELS)]))
            i += 1
            await asyncio.sleep(max(0.0, min(EVERY_S / time_scale, end - loop.time())))
    finally:
        engine.compiling = 1.0
