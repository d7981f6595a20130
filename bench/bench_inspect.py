"""How long `inspect` takes on a big checkpoint: 100 shards, 40,123 tensors, 8.7 GiB of (sparse) weights.

The shards are real safetensors files (valid header, data left as zeros by truncate, so they take no
disk), named like a Qwen3.5-MoE NVFP4 checkpoint. Only headers are read, so the time is independent of
the weight size.   Run: .venv/bin/python bench/bench_inspect.py [--repeats 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.hostside.safetensors import inspect_checkpoint  # noqa: E402
from tests.test_inspect_build import linear, write_checkpoint  # noqa: E402

LAYERS, EXPERTS, HIDDEN, INTER = 40, 108, 2048, 512


def big_moe() -> tuple[dict, dict]:
    t = {
        "model.language_model.embed_tokens.weight": ("BF16", [151936, HIDDEN]),
        "lm_head.weight": ("BF16", [151936, HIDDEN]),
        "model.language_model.norm.weight": ("BF16", [HIDDEN]),
    }
    for layer in range(LAYERS):
        p = f"model.language_model.layers.{layer}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", [HIDDEN])
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", [HIDDEN])
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t.update(linear(f"{p}.self_attn.{proj}", HIDDEN, HIDDEN, "nvfp4"))
        t[f"{p}.mlp.gate.weight"] = ("BF16", [EXPERTS, HIDDEN])
        for proj, out, inp in (("gate_proj", INTER, HIDDEN), ("up_proj", INTER, HIDDEN), ("down_proj", HIDDEN, INTER)):
            t.update(linear(f"{p}.mlp.shared_expert.{proj}", out, inp, "nvfp4"))
            for e in range(EXPERTS):
                t.update(linear(f"{p}.mlp.experts.{e}.{proj}", out, inp, "nvfp4", static=False))
    config = {"text_config": {"num_hidden_layers": LAYERS, "num_experts": EXPERTS, "num_experts_per_tok": 8}}
    return t, config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", default=None, help="write the checkpoint here and keep it")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-inspect-"))
    try:
        tensors, config = big_moe()
        t0 = time.perf_counter()
        folder = write_checkpoint(str(root / "big"), tensors, config, shards=100)
        print(f"wrote {len(tensors)} tensors in 100 shards in {time.perf_counter() - t0:.1f} s")
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            summary = inspect_checkpoint(folder)
            times.append(time.perf_counter() - t0)
        disk = sum(os.stat(p).st_blocks * 512 for p in Path(folder).iterdir())
        print(
            f"checkpoint: {summary['tensors']} tensors, {summary['shards']} shards, "
            f"{summary['total_gib']:.1f} GiB of weights ({disk / 2**20:.1f} MiB on disk)"
        )
        print(
            f"inspect_checkpoint: median {statistics.median(times):.3f} s, max {max(times):.3f} s "
            f"over {args.repeats} runs (budget 2 s)"
        )
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "agent.cli", "inspect", folder, "--json"],
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"`spark-agent inspect --json` end to end (with interpreter start): {time.perf_counter() - t0:.3f} s")
        return 0 if max(times) < 2.0 else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
