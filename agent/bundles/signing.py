"""Signatures with the owner's own SSH key: OpenSSH's `ssh-keygen -Y` (sign, check-novalidate, find-principals,
verify), in our namespace. No new key type and no crypto of ours: ssh-keygen does all of it.

The data and the signature are files in a private folder of ours; nothing from a bundle reaches a command line
except as a file ssh-keygen reads.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.bundles.layout import NAMESPACE
from agent.errors import UserError
from agent.escape import plain

TIMEOUT_S = 120  # a passphrase prompt waits for the person at the terminal
FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
MAX_SIGNATURE_BYTES = 16 * 1024  # an armored SSHSIG of any OpenSSH key type is well under this
ARMOR = b"-----BEGIN SSH SIGNATURE-----"


@dataclass(frozen=True)
class Signer:
    fingerprint: str  # SHA256:... of the public key in the signature
    principal: str  # from --allowed-signers; "" when none was given (the key is then only named by fingerprint)
    trusted: bool  # an allowed-signers file named this key

    @property
    def name(self) -> str:
        return self.principal or self.fingerprint


def _keygen() -> str:
    found = shutil.which("ssh-keygen")
    if not found:
        raise UserError("ssh-keygen not found: install OpenSSH's client (8.1 or newer signs with -Y)")
    return found


def key_fingerprint(key: Path) -> tuple[str, str]:
    """(SHA256 fingerprint, comment) of a key file (private or public); UserError naming the file."""
    done = subprocess.run([_keygen(), "-l", "-f", str(key)], capture_output=True, text=True, timeout=30)
    found = FINGERPRINT.search(done.stdout)
    if done.returncode != 0 or not found:
        raise UserError(f"{key}: not an SSH key ssh-keygen can read ({plain(done.stderr.strip())[:160]})")
    comment = done.stdout[found.end() :].strip().rsplit(" (", 1)[0]
    return found.group(0), comment


def sign(data: bytes, key: Path) -> bytes:
    """The armored signature of `data` made with `key` (a private key, or a public key whose private half is in
    ssh-agent); a passphrase is asked on the terminal by ssh-keygen itself."""
    with tempfile.TemporaryDirectory(prefix="spark-sign-") as tmp:
        target = Path(tmp) / "manifest.json"
        target.write_bytes(data)
        done = subprocess.run(
            [_keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE, str(target)],
            capture_output=True,  # stdin stays the terminal: ssh-keygen asks a passphrase there
            text=True,
            timeout=TIMEOUT_S,
        )
        sig = target.with_name("manifest.json.sig")
        if done.returncode != 0 or not sig.is_file():
            raise UserError(f"{key}: ssh-keygen could not sign ({plain(done.stderr.strip())[:200]}); pass --key FILE")
        return sig.read_bytes()


def check(data: bytes, signature: bytes, allowed_signers: Path | None = None) -> Signer:
    """Who signed `data`: the signature must be good in our namespace; with an allowed-signers file, by a key it
    names (ValueError saying what failed)."""
    if len(signature) > MAX_SIGNATURE_BYTES or not signature.startswith(ARMOR):
        raise ValueError("is not an SSH signature (ssh-keygen -Y sign)")
    with tempfile.TemporaryDirectory(prefix="spark-verify-") as tmp:
        data_file, sig_file = Path(tmp) / "data", Path(tmp) / "data.sig"
        data_file.write_bytes(data)
        sig_file.write_bytes(signature)
        good = _run(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig_file)], data_file)
        found = FINGERPRINT.search(good.stdout + good.stderr)
        if good.returncode != 0 or not found:
            raise ValueError(f"does not verify over manifest.json in namespace {NAMESPACE} ({_said(good)})")
        if allowed_signers is None:
            return Signer(found.group(0), "", False)
        names = _run(["-Y", "find-principals", "-s", str(sig_file), "-f", str(allowed_signers)], None)
        principals = [p.strip() for p in names.stdout.splitlines() if p.strip()]
        if names.returncode != 0 or not principals:
            raise ValueError(f"was made by key {found.group(0)}, which {allowed_signers} does not name")
        for principal in principals:
            ok = _run(
                ["-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", NAMESPACE, "-s", str(sig_file)],
                data_file,
            )
            if ok.returncode == 0:
                return Signer(found.group(0), principal, True)
        raise ValueError(f"key {found.group(0)} is not allowed to sign in namespace {NAMESPACE} ({_said(ok)})")


def _run(args: list[str], stdin: Path | None) -> subprocess.CompletedProcess[str]:
    with open(stdin if stdin else "/dev/null", "rb") as fh:
        out = subprocess.run([_keygen(), *args], stdin=fh, capture_output=True, timeout=30)
    return subprocess.CompletedProcess(
        out.args, out.returncode, out.stdout.decode("utf-8", "replace"), out.stderr.decode("utf-8", "replace")
    )


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return plain(" ".join((done.stderr or done.stdout).split()))[:160] or f"exit {done.returncode}"
