"""The spark role's defaults (playbooks/roles/spark/defaults/main.yml), for the few places the controller must know
a host's value that its inventory leaves unset (the Ray ports, the work dir): one source for both sides, so a
default changed in the role is the controller's default too."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from agent.paths import PLAYBOOKS

DEFAULTS_FILE = PLAYBOOKS / "roles" / "spark" / "defaults" / "main.yml"


@functools.cache
def _defaults() -> dict[str, Any]:
    return yaml.safe_load(DEFAULTS_FILE.read_text(encoding="utf-8")) or {}


def default_int(name: str) -> int:
    """The role's default of `name`, a plain integer there (a KeyError or a ValueError is our bug, not a host's)."""
    value = _defaults()[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{DEFAULTS_FILE}: {name} is {value!r}, not an integer")
    return value


def default_str(name: str) -> str:
    """The role's default of `name`, a plain string there (never a Jinja template: the controller does not render)."""
    value = _defaults()[name]
    if not isinstance(value, str) or "{{" in value:
        raise ValueError(f"{DEFAULTS_FILE}: {name} is {value!r}, not a plain string")
    return value


def names() -> frozenset[str]:
    """Every variable the role defines a default for."""
    return frozenset(k for k in _defaults() if isinstance(k, str))
