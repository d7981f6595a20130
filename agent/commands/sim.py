"""`spark-agent sim serve MODEL [vllm serve flags] [--sim-* flags]`: the simulated Spark (embedded default engine).

The command line is `vllm serve`'s; `spark-agent sim serve --help` lists the simulator's own settings.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("sim", help="run the simulated Spark: a vLLM-compatible server (sim serve MODEL ...)",
                                   description=__doc__, add_help=False)
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="serve MODEL [vllm serve flags] [--sim-* flags]")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..sim.main import main  # the same entry point as `python3 -m agent.sim`

    return main(args.argv)
