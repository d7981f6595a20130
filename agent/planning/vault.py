"""ansible-vault: the password file that decrypts `!vault` inventory values, for our own inventory parsing and for
every ansible-playbook we start.

Only the file's path travels (as ANSIBLE_VAULT_PASSWORD_FILE in the runner's environment, which no other user can
read); the password itself is never on a command line. Every value that was vaulted is a secret by definition: its
plaintext is remembered for redaction wherever it shows up.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.hostside import redact

ENV = "ANSIBLE_VAULT_PASSWORD_FILE"
_chosen: Path | None = None


def add_option(parser: argparse.ArgumentParser) -> None:
    """--vault-password-file on every command that reads an inventory."""
    parser.add_argument(
        "--vault-password-file",
        metavar="FILE",
        help=f"decrypts !vault values in the inventory (default: ${ENV}); a file, or a script that prints it",
    )


def use_password_file(path: str | None) -> None:
    """The flag's file (else $ANSIBLE_VAULT_PASSWORD_FILE), checked before anything runs."""
    global _chosen
    flag = "--vault-password-file" if path else f"${ENV}"
    path = path or os.environ.get(ENV) or None
    if not path:
        _chosen = None
        return
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file() or not os.access(resolved, os.R_OK):
        raise UserError(f"{flag} {path}: no readable file there; give the file that holds the vault password")
    _chosen = resolved


def password_file() -> Path | None:
    return _chosen


def runner_env() -> dict[str, str]:
    """What ansible-playbook needs in its environment to decrypt the same values we did."""
    return {ENV: str(_chosen)} if _chosen else {}


def install(loader: Any) -> None:
    """Let Ansible's own parser in this process decrypt vaulted values (no-op without a password file)."""
    if _chosen is None:
        return
    from ansible.errors import AnsibleError
    from ansible.parsing.vault import VaultSecretsContext, get_file_vault_secret

    try:
        secret = get_file_vault_secret(filename=str(_chosen), vault_id="default", loader=loader)
        secret.load()
    except AnsibleError as exc:
        raise UserError(f"--vault-password-file {_chosen}: {exc.message}") from None
    secrets = [("default", secret)]
    loader.set_vault_secrets(secrets)
    current = VaultSecretsContext.current(optional=True)
    if current is None:  # Ansible allows one context per process; a later inventory swaps its secrets
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))
    else:
        current.secrets = secrets


def remember_vaulted(value: Any, where: str) -> None:
    """Remember the plaintext of every vaulted value under `value` for redaction; say clearly when it can't be read."""
    from ansible.parsing.vault import EncryptedString

    if isinstance(value, dict):
        for key, item in value.items():
            remember_vaulted(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            remember_vaulted(item, f"{where}[{index}]")
    elif isinstance(value, EncryptedString):
        try:
            redact.remember([str(value)])
        except Exception as exc:  # Ansible raises several kinds; all mean "no or wrong password"
            how = "a wrong vault password?" if _chosen else "pass --vault-password-file FILE (or set $" + ENV + ")"
            raise UserError(
                f"{where} is vault-encrypted and cannot be decrypted ({type(exc).__name__}): {how}"
            ) from None
