"""`spark-agent share RESULTS/SWEEP`: one bundle file of a sweep that anyone can check with `spark-agent verify`:
its results tree (redacted), the judgement agent.judging makes of it, every file's SHA-256 in a manifest, and your
SSH key's signature over the manifest (`ssh-keygen -Y sign`, namespace spark-agent-bundle@v1). `--dry-run` lists
what would go out and what stays home, and signs nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from agent.commands import flags
from agent.escape import plain


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "share", help="write a signed bundle of a sweep that anyone can verify", description=__doc__
    )
    p.add_argument("sweep", type=flags.folder, help="the sweep's results folder (results/<sweep>)")
    p.add_argument("--key", type=Path, default=None, help="your SSH key (default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
    p.add_argument("--principal", default="", help="the name you sign as (default: the key's comment)")
    p.add_argument(
        "--spec", type=Path, default=None, help="the sweep's spec, shared too (verify checks its vLLM version)"
    )
    p.add_argument(
        "-o", "--out", type=flags.writable_file, default=None, help="the bundle (default: SWEEP.spark-bundle.tgz)"
    )
    p.add_argument("--dry-run", action="store_true", help="list what would go out; write and sign nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.bundles import layout, pack, signing

    plan = pack.plan(args.sweep, args.spec)
    key = args.key or pack.default_key()
    if args.dry_run:
        fingerprint, comment = signing.key_fingerprint(key)
        for rel, src in plan.files.items():
            print(f"{rel}  ({src.stat().st_size} bytes)")
        print(f"{layout.CLAIMS}, {layout.MANIFEST}, {layout.SIGNATURE}  (made when you share)")
        for line in plan.left_out:
            print(f"left out: {plain(line)}")
        print(f"{len(plan.files)} file(s) would go out, signed by {fingerprint} as {plain(args.principal or comment)}")
        return 0
    bundle = pack.build(plan, key, args.principal)
    out = pack.write(bundle, args.out or Path(plan.sweep + layout.SUFFIX))
    for line in plan.left_out:
        print(f"left out: {plain(line)}")
    print(f"{out}: {len(plan.files)} file(s), {len(bundle)} bytes; check it with `spark-agent verify {out}`")
    return 0
