"""One SSH connection to one host, for the two things Ansible cannot do: stream a live log (`spark-agent logs
--follow`) and read a new host's key (`spark-agent trust`).

It uses what the inventory gives Ansible (address, port, user, key file, and the known_hosts file named by
UserKnownHostsFile in the host's ssh args), so both tools see the same host Ansible sees. Host keys are always
checked: an unknown or changed key is refused, never added.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.errors import UserError
from agent.planning.inventory import Host

if TYPE_CHECKING:
    import fabric

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
# ssh also trusts (and checks against) the system's files: a key pinned there by an admin must not be overridden
DEFAULT_GLOBAL_KNOWN_HOSTS = (Path("/etc/ssh/ssh_known_hosts"), Path("/etc/ssh/ssh_known_hosts2"))
_KNOWN_HOSTS_OPTION = re.compile(r"UserKnownHostsFile\s*=?\s*(\S+)", re.IGNORECASE)
_GLOBAL_OPTION = re.compile(r"GlobalKnownHostsFile\s*=?\s*(.+)", re.IGNORECASE)


@dataclass(frozen=True)
class SshTarget:
    host: str  # the inventory name
    address: str
    port: int
    user: str
    key_file: str  # "" → the ssh agent / default keys
    known_hosts: Path
    global_known_hosts: tuple[Path, ...] = DEFAULT_GLOBAL_KNOWN_HOSTS  # the system's, as ssh reads them

    @property
    def known_hosts_name(self) -> str:
        """How OpenSSH names this host in known_hosts: a bare address on port 22, else [address]:port."""
        return self.address if self.port == 22 else f"[{self.address}]:{self.port}"


def target(host: Host) -> SshTarget:
    """The SSH target Ansible would connect to, from the host's (already validated) inventory variables."""
    if host.local:
        raise UserError(f"host {host.name}: ansible_connection is local; there is no SSH host to reach")
    address, port = host.address
    key = host.vars.get("ansible_ssh_private_key_file") or host.vars.get("ansible_private_key_file") or ""
    user = host.vars.get("ansible_user") or host.vars.get("ansible_ssh_user") or os.environ.get("USER", "root")
    known = known_hosts_file(host.vars)
    return SshTarget(
        host.name, address, port, str(user), os.path.expanduser(str(key)), known, global_known_hosts_files(host.vars)
    )


def known_hosts_file(host_vars: dict) -> Path:
    """The known_hosts file ssh reads for this host: the first UserKnownHostsFile in its ssh args, else the
    user's own. (ssh takes the first value of an option, so the first one wins here too.)"""
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        args = host_vars.get(var) or ""
        words = shlex.split(str(args)) if isinstance(args, str) else [str(a) for a in args]
        for word in words:
            found = _KNOWN_HOSTS_OPTION.search(word)
            if found:
                return Path(os.path.expanduser(found[1].split()[0]))
    return Path(os.path.expanduser(str(DEFAULT_KNOWN_HOSTS)))


def global_known_hosts_files(host_vars: dict) -> tuple[Path, ...]:
    """The system known_hosts files ssh reads for this host: the first GlobalKnownHostsFile in its ssh args (one
    or more files), else OpenSSH's defaults."""
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        args = host_vars.get(var) or ""
        words = shlex.split(str(args)) if isinstance(args, str) else [str(a) for a in args]
        for word in words:
            found = _GLOBAL_OPTION.search(word)
            if found:
                return tuple(Path(os.path.expanduser(f)) for f in found[1].split())
    return DEFAULT_GLOBAL_KNOWN_HOSTS


def connect(t: SshTarget, timeout: float = 10.0) -> fabric.Connection:
    """An open Fabric connection whose host key was checked against `t.known_hosts` (RejectPolicy: an unknown
    key is refused, a changed one raises BadHostKeyException)."""
    import fabric
    import paramiko

    connect_kwargs: dict = {"look_for_keys": not t.key_file, "allow_agent": not t.key_file}
    if t.key_file:
        connect_kwargs["key_filename"] = [t.key_file]
    conn = fabric.Connection(
        t.address, user=t.user, port=t.port, connect_timeout=timeout, connect_kwargs=connect_kwargs
    )
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())  # Fabric's default would add any key
    for system in t.global_known_hosts:  # checked first, as ssh does: a pinned key cannot be overridden
        if system.is_file():
            conn.client.load_system_host_keys(str(system))
    if t.known_hosts.exists():
        conn.client.load_host_keys(str(t.known_hosts))
    try:
        conn.open()
    except paramiko.BadHostKeyException:
        conn.close()
        raise UserError(
            f"host {t.host}: its SSH host key has CHANGED and no longer matches {t.known_hosts}: refused. "
            "Only if you know the host was reinstalled: ssh-keygen -R "
            f"'{t.known_hosts_name}' -f {t.known_hosts}, then spark-agent trust {t.host}"
        ) from None
    except paramiko.SSHException as exc:
        conn.close()
        if "not found in known_hosts" in str(exc):
            raise UserError(
                f"host {t.host}: its SSH host key is not in {t.known_hosts}: refused. Check and record it with "
                f"spark-agent trust {t.host}"
            ) from None
        raise UserError(f"host {t.host}: SSH to {t.address}:{t.port} failed: {_one_line(exc)}") from None
    except OSError as exc:
        conn.close()
        raise UserError(f"host {t.host}: cannot reach {t.address}:{t.port}: {_one_line(exc)}") from None
    return conn


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
