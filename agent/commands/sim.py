"""`spark-agent sim serve MODEL [vllm serve flags] [--sim-* flags]`: the simulated Spark (embedded default engine).
`spark-agent sim image build --tag T`: the same simulator as a container image, built locally from a rootfs.

The command line is `vllm serve`'s; `spark-agent sim serve --help` lists the simulator's own settings.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="run the simulated Spark: a vLLM-compatible server (sim serve MODEL ...)",
        description=__doc__,
        add_help=False,
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="serve MODEL [vllm serve flags] [--sim-* flags]")
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.argv[:2] == ["image", "build"]:  # spark-agent sim image build --tag T: the simulator as a container image
        from agent.sim.image import main as image_main

        return image_main(args.argv[2:])
    from agent.sim.main import main  # the same entry point as `python3 -m agent.sim`

    return main(args.argv)
