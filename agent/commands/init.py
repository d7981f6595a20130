"""`spark-agent init [USER@]ADDRESS[:PORT]... [-o FILE] [--user U] [--key FILE] [--known-hosts FILE] [--yes]`: write a
starter inventory for these hosts (group `sparks`, named spark-1, spark-2, ... in the order given), then walk
`trust`: show each host's SSH key fingerprint and record it in known_hosts once you have compared it with the host's
console. A host given as USER@ADDRESS logs in as USER (the others as --user); --known-hosts names the fleet's own
known_hosts file (default: ~/.ssh/known_hosts), where trust records the keys and every run checks them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agent.errors import UserError

DEFAULT_OUT = "spark-inventory.yml"
GROUP = "sparks"

HEADER = """\
# Written by `spark-agent init`. Edit freely: it is a plain Ansible inventory.
#   spark-agent check -i {out}
#   spark-agent sweep SPEC.toml -i {out}        (a spec to start from: {examples}/gb10-nvfp4.toml)
# Host keys are checked: `spark-agent trust {group} -i {out}` records a new host's key after you compare it.
# Secrets (e.g. HF_TOKEN under spark_serve_env) belong vaulted (ansible-vault encrypt_string); then add
# --vault-password-file FILE to each command.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="write a starter inventory for a list of hosts, then record their SSH keys (trust)",
        description=__doc__,
    )
    p.add_argument(
        "hosts",
        nargs="+",
        metavar="[USER@]ADDRESS[:PORT]",
        help="each Spark's address (IPv6: [ADDR]:PORT); USER@: its own login",
    )
    p.add_argument("-o", "--out", default=DEFAULT_OUT, help=f"inventory to write (default: ./{DEFAULT_OUT})")
    p.add_argument("--user", default="nvidia", help="SSH user on the hosts (default %(default)s)")
    p.add_argument("--key", default="~/.ssh/id_ed25519", help="SSH private key file (default %(default)s)")
    p.add_argument(
        "--known-hosts",
        metavar="FILE",
        help="the fleet's known_hosts file: trust records the keys there, every run checks them (default ~/.ssh/known_hosts)",
    )
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--no-trust", action="store_true", help="only write the inventory (run `trust` later)")
    p.add_argument("--yes", action="store_true", help="trust: record without asking (after checking fingerprints)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if os.path.lexists(out) and not args.force:
        kind = " (a symbolic link: it is never written through)" if out.is_symlink() else ""
        raise UserError(f"{out} exists{kind}: pass --force to replace it, or -o ANOTHER.yml")
    text = inventory_text(args.hosts, args.user, args.key, str(out), args.known_hosts)
    if not out.parent.is_dir():
        raise UserError(f"-o {out}: folder {out.parent} does not exist")
    _check(text, out)  # the loader every command uses must accept what we write, before it exists
    _write(out, text, force=args.force)
    print(f"wrote {out}: {len(args.hosts)} host(s) in group {GROUP}", file=sys.stderr)
    if args.no_trust:
        print(f"next: spark-agent trust {GROUP} -i {out}", file=sys.stderr)
        return 0
    from agent.commands import trust

    try:
        return trust.run(argparse.Namespace(hosts=[GROUP], inventory=str(out), yes=args.yes))
    except UserError as exc:
        raise UserError(f"{exc.message} (the inventory is written; then: spark-agent trust {GROUP} -i {out})") from None


def _write(out: Path, text: str, *, force: bool) -> None:
    """A new file is created, never opened through a link (a dangling one would write wherever it points); with
    --force the text lands in a temp file beside it, renamed over it (a link at `out` is replaced, not followed)."""
    if force:
        from agent.hostside import atomic

        atomic.write_text(out, text)
        return
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise UserError(f"{out} exists (or is a link): pass --force to replace it, or -o ANOTHER.yml") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def inventory_text(hosts: list[str], user: str, key: str, out: str, known_hosts: str | None = None) -> str:
    import yaml

    from agent.planning.inventory import USER

    if not USER.match(user):
        raise UserError(f"--user {user!r}: letters, digits, _ . @ - only")
    if not key or any(c in key for c in "\n\r\0"):
        raise UserError("--key: give the path of an SSH private key file")
    if known_hosts is not None and (not known_hosts.strip() or any(c in known_hosts for c in "\n\r\0 \t\"'")):
        raise UserError(f"--known-hosts {known_hosts[:60]!r}: give a file path without spaces or quotes")
    members = {}
    for number, given in enumerate(hosts, 1):
        login, _, rest = given.rpartition("@") if "@" in given.split("]")[0] else ("", "", given)
        if login and not USER.match(login):
            raise UserError(f"host {given!r}: the user before @ may hold letters, digits, _ . - only")
        address, port = split_host(rest)
        entry: dict[str, object] = {"ansible_host": address}
        if port != 22:
            entry["ansible_port"] = port
        if login and login != user:
            entry["ansible_user"] = login
        members[f"spark-{number}"] = entry
    group_vars: dict[str, object] = {
        "ansible_user": user,
        "ansible_ssh_private_key_file": key,
        "ansible_python_interpreter": "/usr/bin/python3",
        "spark_runtime": "docker",
    }
    if known_hosts is not None:  # the fleet's file, as ssh and Ansible read it (connection.py finds it there)
        group_vars["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={known_hosts}"
    group = {"hosts": members, "vars": group_vars}
    body = yaml.safe_dump({"all": {"children": {GROUP: group}}}, sort_keys=False, default_flow_style=False)
    from agent.paths import EXAMPLES

    return HEADER.format(out=out, group=GROUP, examples=EXAMPLES) + body


def split_host(given: str) -> tuple[str, int]:
    """ADDRESS, ADDRESS:PORT or [IPV6]:PORT; a bare IPv6 address has no port."""
    from agent.planning.inventory import ADDRESS, SHELL_META

    address, port_text = given, ""
    if given.startswith("[") and "]:" in given:
        address, port_text = given[1:].split("]:", 1)
    elif given.count(":") == 1:
        address, port_text = given.split(":", 1)
    port = int(port_text) if port_text.isdigit() else (22 if not port_text else 0)
    if not ADDRESS.match(address) or SHELL_META.search(address.strip("[]")) or not 0 < port < 65536:
        raise UserError(f"host {given!r}: give ADDRESS, ADDRESS:PORT or [IPV6]:PORT (port 1-65535)")
    return address, port


def _check(text: str, out: Path) -> None:
    import tempfile

    from agent.planning.inventory import load_inventory

    with tempfile.TemporaryDirectory(prefix="spark-agent-init-") as folder:
        trial = Path(folder) / out.name
        trial.write_text(text, encoding="utf-8")
        load_inventory(trial)
