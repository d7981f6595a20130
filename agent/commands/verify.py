"""`spark-agent verify BUNDLE`: check a shared bundle, and say which check failed with its file: the signature and
every hash; what loaded, attested again from each server log; every median, spread, noise floor and verdict judged
again from the windows; plausibility (images by digest, vLLM versions, the bandwidth ceiling, timestamps, windows as
long as they say). The tier: signed, re-derived, or reproduced (`--against` another signer's agreeing bundle).
Exit 0 when re-derived or reproduced, 1 otherwise."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from agent.escape import plain


def bundle_file(text: str) -> Path:
    path = Path(text)
    if not text or not (path.is_file() or path.is_symlink()):
        raise argparse.ArgumentTypeError(f"{text!r}: no such bundle file (spark-agent share writes one)")
    return path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify", help="check a shared bundle: signature, hashes, and every number again", description=__doc__
    )
    p.add_argument("bundle", type=bundle_file, help="the bundle file")
    p.add_argument(
        "--allowed-signers", type=bundle_file, default=None, help="ssh-keygen allowed_signers: who you trust"
    )
    p.add_argument("--against", type=bundle_file, nargs="+", default=[], help="other signers' bundles of the same spec")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agent.bundles import agree, verify

    with contextlib.ExitStack() as stack:
        v = stack.enter_context(verify.opened(args.bundle, args.allowed_signers))
        for other in args.against if v.ok else []:
            why = agree.why_not(v, stack.enter_context(verify.opened(other, args.allowed_signers)))
            if why:
                print(plain(f"agreement: {other}: {why}"))
        for line in verify.lines(v):
            print(plain(line))
        return 0 if v.ok else 1
