"""Host keys for `spark-agent trust`: read a host's SSH key (paramiko, key exchange only, no login), show its
fingerprint as ssh-keygen does, and record it in the known_hosts file the inventory names.

A key already recorded for the host is kept: the same key is "already trusted", a different one is refused (that is
what a man-in-the-middle looks like; the user removes the old line on purpose, never us). The system's known_hosts
files (GlobalKnownHostsFile, /etc/ssh/ssh_known_hosts) count as ssh counts them: a key an admin pinned there is
never overridden by one recorded in the user's file.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.errors import UserError
from agent.running.connection import SshTarget

if TYPE_CHECKING:
    import paramiko

NEW, KNOWN, CHANGED = "new", "already trusted", "CHANGED"


@dataclass(frozen=True)
class ScannedKey:
    target: SshTarget
    key_type: str  # e.g. ssh-ed25519
    key_base64: str
    fingerprint: str  # SHA256:… as `ssh-keygen -l` prints it
    state: str  # NEW, KNOWN or CHANGED
    where: str = ""  # the known_hosts file that holds the host's key, when one does

    @property
    def known_hosts_line(self) -> str:
        return f"{self.target.known_hosts_name} {self.key_type} {self.key_base64}"


def fingerprint(key_bytes: bytes) -> str:
    """OpenSSH's SHA256 fingerprint: unpadded base64 of the SHA-256 of the public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_bytes).digest()).decode().rstrip("=")


def scan(t: SshTarget, timeout: float = 10.0) -> ScannedKey:
    """Read the host's public key over a key exchange (no authentication), and compare it with known_hosts."""
    import paramiko

    try:
        sock = socket.create_connection((t.address, t.port), timeout=timeout)
    except OSError as exc:
        raise UserError(f"host {t.host}: cannot reach {t.address}:{t.port} ({exc.strerror or exc})") from None
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise UserError(f"host {t.host}: no SSH key exchange with {t.address}:{t.port} ({exc})") from None
    finally:
        transport.close()
        sock.close()
    state, where = _state(t, key)
    return ScannedKey(t, key.get_name(), key.get_base64(), fingerprint(key.asbytes()), state, where)


def _state(t: SshTarget, key: paramiko.PKey) -> tuple[str, str]:
    """(state, the file that holds the host) over the system's files first, then the user's."""
    for path in (*t.global_known_hosts, t.known_hosts):
        state = _state_in(path, t.known_hosts_name, key)
        if state != NEW:
            return state, str(path)
    return NEW, ""


def _state_in(path: Path, name: str, key: paramiko.PKey) -> str:
    import paramiko

    if not path.is_file():
        return NEW
    try:
        known = paramiko.HostKeys(str(path))
    except (OSError, paramiko.SSHException, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read it as a known_hosts file ({exc})") from None
    entry = known.lookup(name)
    if not entry:
        return NEW
    recorded = entry.get(key.get_name())
    if recorded is not None:
        return KNOWN if recorded.asbytes() == key.asbytes() else CHANGED
    # The host is known under other key types only: ssh would use those and reject this one as a change.
    return CHANGED


def record(keys: list[ScannedKey]) -> int:
    """Append the NEW keys to their known_hosts files (made 0600, in a 0700 folder, if missing). Returns how many."""
    added = 0
    for k in keys:
        if k.state != NEW:
            continue
        path = k.target.known_hosts
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        needs_newline = False
        with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
            if f.seek(0, os.SEEK_END) > 0:
                f.seek(-1, os.SEEK_END)
                needs_newline = f.read(1) != b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(("\n" if needs_newline else "") + k.known_hosts_line + "\n")
        added += 1
    return added
