"""`spark-agent inspect CHECKPOINT [CHECKPOINT_B] [--host H -i INVENTORY] [--json]`: read the checkpoint,
not the card. Only safetensors headers, config.json and the quantization config are read; with --host
the reading happens on that host and only the summary crosses the network."""

from __future__ import annotations

import argparse
import json

from agent.commands import flags
from agent.errors import UserError
from agent.escape import plain
from agent.judging.bandwidth import bandwidth_for
from agent.judging.checkpoints import compare, format_ceiling, format_comparison, format_summary, inspect


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "inspect", help="what is in a checkpoint, from its safetensors headers", description=__doc__
    )
    p.add_argument(
        "checkpoints",
        nargs="+",
        metavar="CHECKPOINT",
        help="checkpoint folder (or .safetensors file); give two to compare them",
    )
    p.add_argument("--host", default=None, help="inspect the folder on this inventory host instead of locally")
    p.add_argument("-i", "--inventory", default=None, help="Ansible inventory that defines --host")
    p.add_argument("--json", action="store_true", help="print the summary (or both and the comparison) as JSON")
    p.add_argument(
        "--gpu",
        default="gb10",
        help="GPU arch or name whose bandwidth sets the decode ceiling (gpus.toml; default %(default)s)",
    )
    p.add_argument(
        "--bandwidth-gbs",
        type=flags.number(0, 100_000),
        default=None,
        help="measured memory bandwidth, GB/s (overrides --gpu)",
    )
    p.add_argument(
        "--tok-s",
        type=flags.number(0, 1_000_000),
        action="append",
        default=None,
        help="measured single-stream decode tok/s, one per CHECKPOINT in order: shows %% of the ceiling",
    )
    p.add_argument(
        "--speculative", action="store_true", help="the --tok-s figures were measured with speculative decoding"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if len(args.checkpoints) > 2:
        raise UserError(f"inspect takes one checkpoint, or two to compare; got {len(args.checkpoints)}")
    if args.tok_s and len(args.tok_s) != len(args.checkpoints):
        raise UserError(
            f"--tok-s given {len(args.tok_s)} time(s) for {len(args.checkpoints)} checkpoint(s); "
            "give one per checkpoint"
        )
    summaries = [inspect(path, args.host, args.inventory) for path in args.checkpoints]
    comparison = compare(summaries[0], summaries[1]) if len(summaries) == 2 else None
    if args.json:
        out = summaries[0] if comparison is None else {"a": summaries[0], "b": summaries[1], "comparison": comparison}
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return 0
    gbs, source = (args.bandwidth_gbs, "measured") if args.bandwidth_gbs else bandwidth_for(args.gpu)
    _print("\n\n".join(format_summary(s) for s in summaries))
    if comparison:
        _print("\n" + format_comparison(comparison))
    _print("\n" + format_ceiling(summaries, gbs, source, args.tok_s, args.speculative))
    return 0


def _print(text: str) -> None:
    """Tensor names and paths come from the checkpoint's files: no terminal control sequences from them."""
    print("\n".join(plain(line) for line in text.split("\n")))
