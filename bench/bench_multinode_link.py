"""The simulated Spark's multi-node link cost (agent/sim/calibration.toml [multinode]): decode tokens/s of one
cell on 1 node vs TP=2 over two nodes, NCCL over RDMA (IB) vs the socket fallback, at a few concurrency levels.

    python bench/bench_multinode_link.py [--checkpoint uns-fast] [--moe marlin]

Deterministic (the model with its noise at zero): it shows what the labelled assumptions imply, not a measurement
of two Sparks (docs/multinode.md says how to replace them with one).
"""

from __future__ import annotations

import argparse
import random

from agent.sim import cluster, options
from agent.sim.plan import make_plan
from agent.sim.ratemodel import RateModel


def tok_s(argv: list[str], transport: str | None, concurrency: int) -> float:
    opts = options.parse(argv, {})
    rate = RateModel(make_plan(opts, {}), False, random.Random(0))
    rate.backend_mult = rate.mixed_mult = 1.0  # no noise: the model itself
    if transport:
        rate.compute_scale, rate.comm_s = cluster.Cluster(2, 1, {"a": "IB", "b": transport}).step_cost()
    return concurrency / rate.step_s(concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default="uns-fast")
    parser.add_argument("--moe", default="marlin")
    args = parser.parse_args()
    argv = [args.checkpoint, "--moe-backend", args.moe]
    print(f"{args.checkpoint} moe={args.moe}: decode tok/s (aggregate), simulated")
    print(f"{'c':>4} {'1 node':>10} {'TP=2 IB':>10} {'TP=2 Socket':>12} {'Socket/IB':>10}")
    for c in (1, 4, 16):
        one, ib, sock = tok_s(argv, None, c), tok_s(argv, "IB", c), tok_s(argv, "Socket", c)
        print(f"{c:>4} {one:>10.1f} {ib:>10.1f} {sock:>12.1f} {sock / ib:>10.2f}")


if __name__ == "__main__":
    main()
