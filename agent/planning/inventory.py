"""Load and validate an Ansible inventory with Ansible's own parser (so group_vars and host_vars apply)."""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.paths import DEFAULT_INVENTORY, PLAYBOOKS

RUNTIMES = ("docker", "process")


@dataclass
class Host:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.vars.get("ansible_connection") == "local"

    @property
    def address(self) -> tuple[str, int]:
        return str(self.vars.get("ansible_host", self.name)), int(self.vars.get("ansible_port", 22))


def load_inventory(path: str | Path | None, limit: str | None = None) -> list[Host]:
    """The hosts to work on, with their variables. Raises UserError naming the file or host."""
    path = Path(path) if path else DEFAULT_INVENTORY
    if not path.exists():
        raise UserError(f"{path}: inventory not found; pass -i INVENTORY (see inventory/example-fleet.yml)")
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    try:
        inv = InventoryManager(loader=loader, sources=[str(path)])
    except Exception as exc:  # ansible raises many kinds; all mean "fix the file"
        raise UserError(f"{path}: cannot parse the inventory: {exc}") from None
    names = [h.name for h in inv.get_hosts()]
    if not names:
        raise UserError(f"{path}: the inventory has no hosts (is it valid YAML/INI for Ansible?)")
    if limit:
        wanted = [p.strip() for p in limit.split(",") if p.strip()]
        selected = []
        for pattern in wanted:
            matched = [h.name for h in inv.get_hosts(pattern)]
            if not matched:
                raise UserError(f"--limit {pattern}: no such host or group in {path}; hosts: {', '.join(names)}")
            selected += [m for m in matched if m not in selected]
        names = selected
    variables = VariableManager(loader=loader, inventory=inv)
    hosts = [Host(n, _templated(loader, variables.get_vars(host=inv.get_host(n)))) for n in names]
    for h in hosts:
        runtime = h.vars.get("spark_runtime", "docker")
        if runtime not in RUNTIMES:
            raise UserError(f"{path}: host {h.name}: spark_runtime={runtime!r} must be one of {', '.join(RUNTIMES)}")
    return hosts


def _templated(loader, host_vars: dict) -> dict[str, Any]:
    """Host vars as a playbook run sees them (Jinja filled in), so what we record is what runs."""
    from ansible.template import Templar

    magic = {"ansible_playbook_python": sys.executable, "playbook_dir": str(PLAYBOOKS)}
    merged = {**dict(host_vars), **magic}
    templar = Templar(loader=loader, variables=merged)
    out = {}
    for key, value in merged.items():
        try:
            out[key] = templar.template(value)
        except Exception:  # a var that only resolves during a play (e.g. from facts): keep it as written
            out[key] = value
    return out


def check_reachable(hosts: list[Host], timeout: float = 3.0) -> None:
    """A TCP connect to each SSH port, before any playbook runs: an unreachable host is a clear error."""
    for h in hosts:
        if h.local:
            continue
        addr, port = h.address
        try:
            with socket.create_connection((addr, port), timeout=timeout):
                pass
        except OSError as exc:
            raise UserError(
                f"host {h.name} ({addr}:{port}) is unreachable: {exc.strerror or exc}; "
                "check ansible_host/ansible_port in the inventory, or leave it out with --limit"
            ) from None
