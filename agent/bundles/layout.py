"""What a bundle holds, by name, and how large it may be.

A bundle is a gzip-compressed tar:

    manifest.json       every other file's SHA-256 and size, who signed, when, with which spark-agent (Manifest)
    manifest.sig        `ssh-keygen -Y sign -n spark-agent-bundle@v1` over manifest.json
    judgement.json      what agent.judging made of the tree when it was shared (claims.py)
    spec.toml           the sweep's spec, when the owner passed --spec
    tree/<sweep>/...    the sweep's results tree: sweep.toml, report.md, verdicts.json, tune.toml, and per cell
                        cell.toml, server.log, launch.txt, node-<host>.log, its windows, lost.toml
"""

from __future__ import annotations

import re
from typing import TypedDict

from agent.hostside import loadpoints
from agent.results import tree

FORMAT = "spark-agent-bundle"
SCHEMA = 1
NAMESPACE = "spark-agent-bundle@v1"  # ssh-keygen -Y namespace: a signature made for anything else never verifies
MANIFEST, SIGNATURE, CLAIMS, SPEC = "manifest.json", "manifest.sig", "judgement.json", "spec.toml"
TREE = "tree"
SUFFIX = ".spark-bundle.tgz"

MiB = 1 << 20
MAX_BUNDLE_BYTES = 128 * MiB  # the file as shared
MAX_UNPACKED_BYTES = 256 * MiB  # the tar inside it: past this it is a tar bomb, whatever it holds
MAX_MEMBERS = 20_000
MAX_LOG_BYTES = 64 * MiB  # one server or node log
MAX_FILE_BYTES = 16 * MiB  # any other file (tree.MAX_TOML_BYTES)
MAX_DEPTH = 5  # tree/<sweep>/<host>/<cell>/<file>

SWEEP_FILES = ("sweep.toml", "report.md", "verdicts.json", "tune.toml")
CELL_FILES = ("cell.toml", "server.log", "launch.txt", "lost.toml")
NODE_LOG = re.compile(r"node-" + tree.PART.pattern + r"\.log")


class FileEntry(TypedDict):
    sha256: str
    bytes: int


class Manifest(TypedDict):
    """manifest.json: what the signature covers."""

    format: str  # FORMAT
    schema: int
    created_at: str  # ISO 8601 UTC
    agent_version: str  # the spark-agent that judged the tree (claims.py)
    sweep: str
    signer: str  # the principal the owner names (--principal; default the key's comment)
    files: dict[str, FileEntry]  # bundle path -> hash and size: everything but manifest.json and manifest.sig


def cell_file_allowed(name: str) -> bool:
    """A file of a cell folder that goes out (and may come in)."""
    if name in CELL_FILES or NODE_LOG.fullmatch(name):
        return True
    return name.endswith(".toml") and bool(loadpoints.WINDOW.fullmatch(name[: -len(".toml")]))


def path_problem(name: str) -> str:
    """What is wrong with a member name ("" when nothing): only the layout above, plain parts, no links."""
    if name in (MANIFEST, SIGNATURE, CLAIMS, SPEC):
        return ""
    parts = name.split("/")
    if name.startswith("/") or parts[0] != TREE or len(parts) < 3 or len(parts) > MAX_DEPTH:
        return "is not a path of the bundle's layout (manifest.json, manifest.sig, judgement.json, spec.toml, tree/...)"
    if any(not tree.PART.fullmatch(p) for p in parts[1:]):
        return "has a part that is not a plain name (letters, digits, . _ -; no '..', no leading dot)"
    if len(parts) == 3 and parts[2] not in SWEEP_FILES:
        return f"is not a file a sweep folder shares ({', '.join(SWEEP_FILES)})"
    if len(parts) == 4:
        return "is a file where a cell folder belongs"
    if len(parts) == 5 and not (tree.CELL_ID.fullmatch(parts[3]) and cell_file_allowed(parts[4])):
        return "is not a file of a cell folder (cell.toml, server.log, launch.txt, windows, node logs, lost.toml)"
    return ""


def cap(name: str) -> int:
    return MAX_LOG_BYTES if name.endswith(".log") else MAX_FILE_BYTES
