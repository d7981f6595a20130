"""`spark-agent pin IMAGE:TAG --host H`: resolve a tag to its digest on a host and print (or write) it.

The host itself pulls the tag (the spark_image module, state=resolved), so the digest is the one that
host's registry access really yields, multi-arch manifests included. Its answer is checked on the controller and
confirmed by the registry asked from here, or by another host of the inventory (running/imageref.py): a host
that answers another repository's digest, an older one, or something that is no digest is exit 2, nothing written.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from agent.errors import UserError
from agent.hostside import atomic
from agent.paths import DEFAULT_INVENTORY
from agent.planning.inventory import load_inventory
from agent.running import imageref


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "pin", help="resolve an image tag to name@sha256:<digest> on a host", description=__doc__
    )
    parser.add_argument("tag", metavar="IMAGE:TAG", help="the tag to resolve, e.g. nvcr.io/nvidia/vllm:25.09-py3")
    parser.add_argument("--host", required=True, help="inventory host that pulls the tag")
    parser.add_argument(
        "-i", "--inventory", default=str(DEFAULT_INVENTORY), help="Ansible inventory (default: %(default)s)"
    )
    parser.add_argument("--write", metavar="SPEC", help="write the pinned ref into this spec's [image] ref")
    parser.set_defaults(func=run)


def run(args) -> int:
    check_input(args.tag, args.host, args.inventory, args.write)
    others = [h.name for h in load_inventory(args.inventory) if h.name != args.host]
    pinned = imageref.resolve(args.tag, args.host, others, args.inventory)
    if args.write:
        write_image_ref(Path(args.write), pinned)
        print(f'{args.write}: [image] ref = "{pinned}"')
    else:
        print(pinned)
    return 0


def check_input(tag: str, host: str, inventory: str, write: str | None) -> None:
    """Everything but the pull, before any host is touched: the tag's form, the host, the spec to write."""
    from agent.hostside.docker import is_tag
    from agent.planning.spec import SPEC_MAX_BYTES, read_text_file

    if not is_tag(tag):
        raise UserError(f"IMAGE:TAG {tag[:100]!r}: not an image reference such as nvcr.io/nvidia/vllm:25.11-py3")
    if write:
        text = read_text_file(Path(write), "spec", SPEC_MAX_BYTES)
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{write}: not valid TOML ({exc}); fix it, then run pin again") from None
        except RecursionError:
            raise UserError(f"{write}: nested too deeply to be a sweep spec") from None
    load_inventory(inventory, limit=host, flag="--host")


_TABLE = re.compile(r"^\s*\[")
_IMAGE_TABLE = re.compile(r"^\s*\[\s*image\s*\]\s*(#.*)?$")
_REF_LINE = re.compile(r"""^(\s*ref\s*=\s*)("[^"]*"|'[^']*')(.*)$""", re.S)


def write_image_ref(spec: Path, pinned: str) -> None:
    """Set [image] ref = "<pinned>" in a spec file, keeping every other line (and comment) as it is."""
    try:
        lines = spec.read_text().splitlines(keepends=True)
    except OSError as exc:
        raise UserError(f"{spec}: cannot read the spec ({exc.strerror}); check the --write path") from None
    lines = _with_ref(lines, f'"{pinned}"')
    text = "".join(lines)
    try:  # checked before anything is written: the spec is replaced whole or left alone
        written = tomllib.loads(text).get("image", {}).get("ref")
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{spec}: not valid TOML ({exc}); fix it, then run pin again") from None
    if written != pinned:
        raise UserError(
            f'{spec}: could not set [image] ref (it is not a plain `ref = "..."` line); set it by hand to {pinned}'
        )
    atomic.write_text(spec, text)


def _with_ref(lines: list[str], value: str) -> list[str]:
    """The spec's lines with [image] ref replaced, added to [image], or a new [image] table appended."""
    start = next((n for n, line in enumerate(lines) if _IMAGE_TABLE.match(line)), None)
    if start is None:
        tail = "" if not lines or lines[-1].endswith("\n") else "\n"
        return lines + [f"{tail}\n[image]\nref = {value}\n"]
    for n in range(start + 1, len(lines)):
        if _TABLE.match(lines[n]):
            break
        match = _REF_LINE.match(lines[n])
        if match:
            return lines[:n] + [f"{match.group(1)}{value}{match.group(3)}"] + lines[n + 1 :]
    return lines[: start + 1] + [f"ref = {value}\n"] + lines[start + 1 :]
